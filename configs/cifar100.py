"""Fine-tune on CIFAR-100 at 384 px (as configs/cifar10.py, TFDS's cifar100 by name)."""

from keras_vit_configs import cifar10


def get_config():
    return cifar10.get_config(total_steps=10_000, learning_rate=0.01, dataset="cifar100")
