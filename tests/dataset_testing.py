"""Datasets in other projects' layouts, made by the tests: a TFDS dataset prepared offline
(`prepare_tfds`, TFDS's own writer), and shards in TensorFlow models' ImageNet layout
(`write_imagenet_shards`). Images: trainer_testing.synthetic_split's learnable bands."""

import os

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from trainer_testing import synthetic_split

from keras_vit_data import image_checks

TFDS_NAME = "keras_vit_tiny_images"
TFDS_CLASSES = ["band0", "band1", "band2", "band3"]
TFDS_SPLITS = {"train": (96, 0), "test": (32, 1)}  # name: (examples, seed)


class KerasVitTinyImages(tfds.core.GeneratorBasedBuilder):
    """28x28 RGB PNGs of 4 classes, written by TFDS as any dataset it prepares."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(shape=(28, 28, 3), encoding_format="png"),
                    "label": tfds.features.ClassLabel(names=TFDS_CLASSES),
                }
            ),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):
        del dl_manager
        return {name: self._generate_examples(*args) for name, args in TFDS_SPLITS.items()}

    def _generate_examples(self, n, seed):
        images, labels = synthetic_split(n, seed, len(TFDS_CLASSES))
        for i, (image, label) in enumerate(zip(images, labels)):
            yield i, {"image": np.repeat(image[..., None], 3, axis=-1), "label": int(label)}


def prepare_tfds(data_dir, num_shards=None):
    """Prepares `TFDS_NAME` in `data_dir` (train in `num_shards` files when given)."""
    builder = KerasVitTinyImages(data_dir=str(data_dir))
    config = tfds.download.DownloadConfig(num_shards=num_shards)
    builder.download_and_prepare(download_config=config)
    return builder


def imagenet_example(encoded, label, synset):
    feature = {
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        "image/class/synset": tf.train.Feature(bytes_list=tf.train.BytesList(value=[synset])),
        "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"PNG"])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_imagenet_shards(data_dir, split, n, num_shards, seed, num_classes=4, label_base=1):
    """`split`-{i:05d}-of-{num_shards:05d} files of `n` examples, labels counted from
    `label_base` (1, as TensorFlow models' build_imagenet_data.py). Returns the
    0-based labels in file order."""
    os.makedirs(data_dir, exist_ok=True)
    images, labels = synthetic_split(n, seed, num_classes)
    bounds = np.linspace(0, n, num_shards + 1).astype(int)
    for shard in range(num_shards):
        path = os.path.join(data_dir, f"{split}-{shard:05d}-of-{num_shards:05d}")
        with tf.io.TFRecordWriter(path) as writer:
            for i in range(bounds[shard], bounds[shard + 1]):
                encoded = image_checks.encode_png(images[i])
                synset = f"n{int(labels[i]):08d}".encode()
                writer.write(imagenet_example(encoded, int(labels[i]) + label_base, synset))
    return labels
