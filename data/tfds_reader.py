"""A TensorFlow Datasets dataset read by name (`config.input.dataset="tfds:NAME"`), as
its prepared files are: the builder's `info` (from the dataset's own code where TFDS
ships it, else read from the prepared files alone) gives the splits' files and record
counts, TFDS's slicing syntax (`train[:99%]`, `train[99%:]+validation`) the records of
each file to read (`file_instructions`), and the features the encoded image and the
label are stored under. The records are TFDS's serialized `tf.train.Example`s, read
and parsed by our input pipeline (images left encoded: decoded, cropped and checked as
ours are), so each input pipeline reads its own files, and resume and evaluation
padding are the same as for a make_tfrecords directory.

Preparing a dataset is TFDS's step, done once before training (`tfds build NAME
--data_dir=DIR`, or `tfds.builder(NAME, data_dir=DIR).download_and_prepare()`; manual
downloads such as imagenet2012 as TFDS documents them).
"""

import logging

import tensorflow_datasets as tfds

from keras_vit_data import readers, records
from keras_vit_data.records import DataError

log = logging.getLogger("data")


def open_tfds(name, data_dir):
    """The `readers.Reader` of the prepared TFDS dataset `name` (as TFDS names it:
    `name[/config][:version]`) in `data_dir` (None: TFDS's default,
    ~/tensorflow_datasets)."""
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as e:  # TFDS raises several kinds for a name it cannot resolve
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(
            f"--config.input.dataset=tfds:{name}: TFDS has no such dataset in "
            f"{data_dir or 'its default data_dir'} ({first})"
        ) from e
    info = builder.info
    if not builder.is_prepared():
        raise DataError(
            f"--config.input.dataset=tfds:{name} is not prepared in {builder.data_dir}: run "
            f"`tfds build {name} --data_dir={data_dir or '~/tensorflow_datasets'}` first "
            "(or tfds.builder(...).download_and_prepare())"
        )
    file_format = str(getattr(info, "file_format", "tfrecord")).lower()
    if "tfrecord" not in file_format:
        raise DataError(
            f"tfds:{name} is stored as {file_format}; the trainers read TFRecord datasets "
            "(prepare it with --file_format=tfrecord)"
        )
    image_key, label_key = feature_keys(name, info.features, info.supervised_keys)
    label = info.features[label_key]
    multi_label = isinstance(label, tfds.features.Sequence)
    names = list(getattr(getattr(label, "feature", label), "names", []) or [])
    num_classes = getattr(getattr(label, "feature", label), "num_classes", None) or len(names)
    if not num_classes:
        raise DataError(f"tfds:{name}: feature {label_key!r} is not a ClassLabel (no classes)")

    def split_fn(split, strict, verify_max_bytes):
        del strict, verify_max_bytes  # TFDS checks its files' integrity itself
        try:
            instructions = info.splits[split].file_instructions
        except (KeyError, ValueError, AssertionError) as e:
            raise DataError(
                f"tfds:{name}: no split {split!r} ({e}); it has {', '.join(info.splits)} "
                "(slices as train[:99%])"
            ) from e
        instructions = [i for i in instructions if i.take]
        if not instructions:
            raise DataError(f"tfds:{name}: split {split!r} is empty")
        counts = [int(i.take) for i in instructions]
        return records.Split(
            split,
            [i.filename for i in instructions],
            counts,
            sum(counts),
            starts=tuple(int(i.skip) for i in instructions),
        )

    return readers.Reader(
        description=f"tfds:{name} in {builder.data_dir}",
        num_classes=int(num_classes),
        class_names=tuple(names) if names else None,
        multi_label=multi_label,
        split_fn=split_fn,
        split_names=tuple(info.splits),
        image_key=image_key,
        label_key=label_key,
    )


def feature_keys(name, features, supervised_keys=None):
    """(image feature, label feature) of an image classification dataset: the
    supervised keys where they are an Image and a ClassLabel (or a Sequence of them),
    else the one Image feature and a 'label' / 'labels' feature."""
    features = dict(features.items())
    if supervised_keys and len(supervised_keys) == 2:
        image_key, label_key = supervised_keys
        if _is_image(features.get(image_key)) and _is_label(features.get(label_key)):
            return image_key, label_key
    images = [key for key, feature in features.items() if _is_image(feature)]
    labels = [key for key in ("label", "labels") if _is_label(features.get(key))]
    if len(images) != 1 or not labels:
        raise DataError(
            f"tfds:{name}: an image classification dataset needs one Image feature and a "
            f"ClassLabel 'label' (or supervised keys); its features are "
            f"{', '.join(f'{k} ({type(v).__name__})' for k, v in features.items())}"
        )
    return images[0], labels[0]


def _is_image(feature):
    return isinstance(feature, tfds.features.Image)


def _is_label(feature):
    if isinstance(feature, tfds.features.Sequence):
        feature = feature.feature
    return isinstance(feature, tfds.features.ClassLabel)
