"""Fine-tune on Oxford-IIIT Pets at 384 px: 500 steps, TFDS's oxford_iiit_pet read by
name (train[:90%], the held-out train[90%:] as validation, test); as configs/cifar10.py."""

from keras_vit_configs import cifar10


def get_config():
    c = cifar10.get_config(total_steps=500, learning_rate=0.003, dataset="oxford_iiit_pet")
    c.train_split, c.evals.validation.split = "train[:90%]", "train[90%:]"
    c.checkpoint_every = 100
    c.warmup_steps = 100  # official: warmup shortened for 500-step runs (<= total)
    return c
