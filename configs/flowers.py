"""Fine-tune on Oxford Flowers-102 at 384 px: 500 steps (tfds:oxford_flowers102)."""

from keras_vit_configs import pets


def get_config():
    return pets.get_config()
