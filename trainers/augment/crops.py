"""The crop and flip of each training image (`config.input.crop`, `config.input.flip`).

`crop` takes the image to the training size by one of settings.CROPS: inception_crop
(the official train crop: a random area/aspect box, resized), random_crop (resized,
padded by 4 reflected pixels, cropped back: the CIFAR/Fashion-MNIST-style light
augmentation) or none (resized only). `flip` mirrors it left-right with probability
0.5. Both are stateless: the same seed, the same output (the input pipeline draws
the seeds from (seed, epoch, index)). Images are (H, W, 3), 0..255.
"""

import tensorflow as tf

from keras_vit_trainers.augment.settings import CROPS


def inception_crop(image, seed, image_size, area_range=(0.05, 1.0)):
    """The official train augmentation's crop: random area/aspect crop, resize."""
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image),
        tf.zeros([0, 0, 4], tf.float32),
        seed=seed,
        area_range=area_range,
        aspect_ratio_range=(3 / 4, 4 / 3),
        min_object_covered=0,
        use_image_if_no_bounding_boxes=True,
    )
    image = tf.slice(image, begin, size)
    return tf.image.resize(image, image_size)


def random_crop(image, seed, image_size, padding=4):
    """Pad-and-crop (the CIFAR/Fashion-MNIST-style light augmentation)."""
    image = tf.image.resize(image, image_size)
    image = tf.pad(image, [[padding, padding], [padding, padding], [0, 0]], mode="REFLECT")
    return tf.image.stateless_random_crop(image, [*image_size, 3], seed=seed)


def crop(image, seed, image_size, name="inception_crop", area_range=(0.05, 1.0)):
    """`image` cropped by the crop `name` (one of CROPS) to float32 (*image_size, 3);
    `area_range` is inception_crop's. Another name raises ValueError naming
    input.crop."""
    if name == "inception_crop":
        return inception_crop(image, seed, image_size, area_range)
    if name == "random_crop":
        return random_crop(image, seed, image_size)
    if name == "none":
        return tf.image.resize(image, image_size)
    raise ValueError(f"input.crop={name!r}: expected {', '.join(CROPS[:-1])} or {CROPS[-1]}")


def flip(image, seed):
    """Left-right flip with probability 0.5, drawn from `seed` (int64 [2])."""
    return tf.image.stateless_random_flip_left_right(image, seed)
