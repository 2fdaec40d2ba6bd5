"""Fine-tune on CIFAR-10 at 384 px: 10k steps, batch 512, SGD 0.9, 500 warmup + cosine.
python tools/make_tfrecords.py --source=tfds:cifar10 --output_dir=DATA
python trainers/finetune.py --config=configs/cifar10.py --init=imagenet21k ...
"""

from keras_vit_configs import common


def get_config(model="ViT_B16", total_steps=10_000, learning_rate=0.01):
    c = common.finetune_config(model)
    c.total_steps = total_steps
    c.learning_rate = learning_rate
    c.checkpoint_every = 1000
    return c
