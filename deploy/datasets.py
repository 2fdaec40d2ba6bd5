"""Real images for calibration and comparison, as uint8 pixels at the model's
size: the Fashion-MNIST test set (Debian's IDX files), TFRecords of
tf.train.Example in the trainer's format (data/records.py), or a split of a data
set the trainers read (`keras_vit_data.readers`).

`comparison_set` picks the export reports' images (`Comparison`): --eval_data (a
make_tfrecords directory, or a TFRecord glob), else the run's own data (RUN/data.json,
or a TFDS data set its config.json names: the validation split, else test), else
Fashion-MNIST's test images, scored only when the model's class names are
Fashion-MNIST's (the run's class_names.json) and otherwise compared with the
reference alone (agreement, no accuracy), the report saying so. A comparison set
whose classes cannot be the model's is a DataError naming the flag, raised before
anything is exported.

Images are brought to the model as the serving signature does: grayscale
repeated to RGB, bilinear `tf.image.resize` (identity at the same size), then
rounded back to uint8 so that every runtime sees the same pixels.
"""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from keras_vit import run_directory
from keras_vit_data import fashion_mnist, readers, records
from keras_vit_data.fashion_mnist import FASHION_MNIST_DIR
from keras_vit_data.records import DataError  # its owner is data/records.py
from keras_vit_deploy import preprocessing


def to_model_pixels(image, image_size, where):
    """uint8 (h, w, C) with C in {1, 3}, or 2 / 4 with alpha (dropped, as the serving
    signatures do: `preprocessing.without_alpha`) -> uint8 (H, W, 3) at `image_size`."""
    image = np.asarray(image)
    if image.ndim == 2:
        image = image[..., None]
    if image.ndim == 3:
        image = preprocessing.without_alpha(image, 3)
    if image.ndim != 3 or image.shape[-1] not in (1, 3):
        raise DataError(
            f"{where}: image of shape {image.shape}; the model takes RGB "
            "(3 channels) or grayscale (1) images."
        )
    image = np.repeat(image, 3 // image.shape[-1], axis=-1)
    if image.shape[:2] != tuple(image_size):
        image = tf.image.resize(image, image_size).numpy()
        image = np.clip(np.round(image), 0, 255)
    return image.astype(np.uint8)


def fashion_mnist_test(image_size, limit=1000, directory=FASHION_MNIST_DIR):
    """The first `limit` Fashion-MNIST test images -> (uint8 (N, H, W, 3), labels (N,))."""
    images, labels = fashion_mnist.read_split(directory, "test", "pass --eval_data=TFRECORD_GLOB")
    images, labels = images[:limit], labels[:limit]
    paths = fashion_mnist.split_paths(directory, "test")
    pixels = np.stack(
        [to_model_pixels(image, image_size, f"{paths[0]}[{i}]") for i, image in enumerate(images)]
    )
    return pixels, labels.astype(np.int64)


def _collect(examples, image_size, limit):
    """The first `limit` of `examples` ((where, serialized example, parse)) ->
    (uint8 (N, H, W, 3), labels (N,) int64: the first of each example's, -1 where it
    has none)."""
    pixels, labels = [], []
    for where, record, parse in examples:
        try:
            encoded, label = parse(record)
            image = tf.io.decode_image(encoded, channels=0, expand_animations=False).numpy()
        except tf.errors.InvalidArgumentError as e:
            raise DataError(
                f"{where}: not a tf.train.Example with a decodable "
                f"'{records.ENCODED_KEY}' image ({e.message.splitlines()[0]})."
            ) from e
        pixels.append(to_model_pixels(image, image_size, where))
        label = label.numpy()
        labels.append(int(label[0]) if len(label) else -1)
        if len(pixels) == limit:
            break
    return np.stack(pixels), np.asarray(labels, np.int64)


def tfrecord_images(pattern, image_size, limit=1000):
    """The first `limit` examples of the TFRecord files matching `pattern`
    (sorted) -> (uint8 (N, H, W, 3), labels (N,) int64, -1 where absent)."""
    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise DataError(f"no TFRecord files match {pattern!r}.")
    examples = (
        (f"{path} record {index}", record, records.parse_example)
        for path in files
        for index, record in enumerate(tf.data.TFRecordDataset(path))
    )
    return _collect(examples, image_size, limit)


def reader_images(reader, split, image_size, limit=1000):
    """The first `limit` examples of `split` of `reader` (a `readers.Reader`: a
    make_tfrecords directory, TFDS, ImageNet-layout shards) -> as `tfrecord_images`."""
    info = reader.split(split)
    if not sum(info.counts):
        raise DataError(f"{reader.description}: the {split!r} split has no examples.")
    examples = (
        (f"{path} record {start + index}", record, reader.parse)
        for path, start in zip(info.files, info.file_starts())
        for index, record in enumerate(tf.data.TFRecordDataset(path).skip(start))
    )
    return _collect(examples, image_size, limit)


@dataclasses.dataclass
class Comparison:
    """The images an export report compares on: `pixels` uint8 (N, H, W, 3),
    `labels` (N,) int64 or None (agreement with the reference alone), `source` what
    the report's `eval_data` says, `note` the one line that says whether and why the
    report scores accuracy."""

    pixels: np.ndarray
    labels: object
    source: str
    note: str


def run_reader(run_dir):
    """(the `readers.Reader` of a run's own data, or None, why not): the data
    RUN/data.json records, or a TFDS data set RUN/config.json names
    (config.input.dataset=tfds:NAME)."""
    if not run_dir:
        return None, "no run directory"
    run = run_directory.RunDirectory(run_dir)
    data = run.read_json(run.data) if run_directory.exists(run.data) else {}
    config = run.read_json(run.config) if run_directory.exists(run.config) else {}
    inputs = config.get("input") or {}
    dataset = data.get("dataset", inputs.get("dataset"))
    if not data.get("data_dir") and not (dataset or "").startswith(readers.TFDS_PREFIX):
        return None, f"{run_dir} records no data ({run_directory.DATA})"
    try:
        reader = readers.open_reader(
            data.get("data_dir"),
            dataset,
            tfds_data_dir=data.get("tfds_data_dir", inputs.get("tfds_data_dir")),
            num_classes=config.get("num_classes"),
            label_offset=inputs.get("label_offset"),
        )
    except (DataError, OSError, ImportError, tf.errors.OpError) as e:
        return None, f"the run's data cannot be read ({str(e).splitlines()[0]})"
    return reader, None


def _held_out_split(reader):
    return next((s for s in ("validation", "test") if reader.has_split(s)), None)


def _names(names):
    return ", ".join(map(str, names[:5])) + (", ..." if len(names) > 5 else "")


def _check_classes(where, num_classes, class_names, their_names, labels):
    """DataError naming `where` (the flag) unless the comparison set's classes can be
    the model's: as many classes, the same names where both name them, labels below
    `num_classes`."""
    fix = "pass the model's own data, or leave --eval_data out"
    if num_classes and their_names and len(their_names) != num_classes:
        raise DataError(
            f"{where}: {len(their_names)} classes ({_names(their_names)}); the model has "
            f"{num_classes}: not its data set ({fix})"
        )
    if class_names and their_names and list(their_names) != list(class_names):
        raise DataError(
            f"{where}: its classes ({_names(their_names)}) are not the model's "
            f"({_names(class_names)}): not its data set ({fix})"
        )
    if num_classes and labels is not None and len(labels) and labels.max() >= num_classes:
        raise DataError(
            f"{where}: labels up to {labels.max()}; the model has {num_classes} classes: "
            f"not its data set ({fix})"
        )


def _data_dir_names(pattern):
    """The class names of the make_tfrecords manifest beside the files of `pattern`."""
    folder = os.path.dirname(pattern)
    if folder and tf.io.gfile.exists(records.manifest_path(folder)):
        return records.read_manifest(folder).get("class_names") or None
    return None


def comparison_set(
    image_size,
    limit,
    *,
    eval_data=None,
    run_dir=None,
    num_classes=None,
    class_names=None,
    fashion_mnist_dir=FASHION_MNIST_DIR,
):
    """The `Comparison` of an export report (module docstring), for a classifier of
    `num_classes` classes named `class_names` (None: unknown; `num_classes` None: not
    a classifier, nothing to score)."""
    flag = f"--eval_data={eval_data}"
    if eval_data and run_directory.exists(records.manifest_path(eval_data)):
        reader = readers.open_manifest(eval_data)
        split = _held_out_split(reader) or reader.split_names[0]
        pixels, labels = reader_images(reader, split, image_size, limit)
        _check_classes(flag, num_classes, class_names, reader.class_names, labels)
        source = f"{eval_data}, {split} split"
    elif eval_data:
        pixels, labels = tfrecord_images(eval_data, image_size, limit)
        _check_classes(flag, num_classes, class_names, _data_dir_names(eval_data), labels)
        source = eval_data
    else:
        reader, why = run_reader(run_dir)
        split = reader and _held_out_split(reader)
        if split:
            pixels, labels = reader_images(reader, split, image_size, limit)
            where = f"the run's data, {reader.description} (or --eval_data)"
            _check_classes(where, num_classes, class_names, reader.class_names, labels)
            source = f"{reader.description}, {split} split"
        else:
            pixels, labels = fashion_mnist_test(image_size, limit, fashion_mnist_dir)
            source = "fashion_mnist_test"
            if list(class_names or ()) != list(fashion_mnist.CLASS_NAMES):
                named = "its class names are not" if class_names else "no class names say it is"
                why = why or f"{run_dir}: no validation or test split in its data"
                return Comparison(
                    pixels,
                    None,
                    source,
                    "agreement with the reference alone, on Fashion-MNIST test images: no "
                    f"labelled data of the model's classes ({why}; {named} Fashion-MNIST's): "
                    "pass --eval_data=DATA_DIR or TFRECORD_GLOB of its own data for accuracy",
                )
    if num_classes is None or not (labels >= 0).any():
        return Comparison(pixels, None, source, f"agreement with the reference alone, on {source}")
    return Comparison(pixels, labels, source, f"accuracy and agreement on {source}")
