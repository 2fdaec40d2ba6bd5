"""Fine-tune on Oxford Flowers-102 at 384 px: 500 steps (as configs/pets.py), TFDS's
oxford_flowers102 read by name: its own train, validation and test splits."""

from keras_vit_configs import common, pets


def get_config():
    c = pets.get_config()
    return common.read_tfds(c, "oxford_flowers102", validation="validation")
