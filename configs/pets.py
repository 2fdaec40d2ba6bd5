"""Fine-tune on Oxford-IIIT Pets at 384 px: 500 steps (tfds:oxford_iiit_pet)."""

from keras_vit_configs import cifar10


def get_config():
    c = cifar10.get_config(total_steps=500, learning_rate=0.003)
    c.checkpoint_every = 100
    c.warmup_steps = 100  # official: warmup shortened for 500-step runs (<= total)
    return c
