"""Fine-tune on CIFAR-10 at 384 px: 10k steps, batch 512, SGD 0.9, 500 warmup + cosine.

Reads TFDS's cifar10 by name, as the authors' code does: trains on train[:98%], picks
models on the held-out train[98%:] (`validation`), reports `test`.
  tfds build cifar10 --data_dir=TFDS    # once (or let TFDS download it)
  python trainers/finetune.py --config=configs/cifar10.py --init=imagenet21k \
      --config.input.tfds_data_dir=TFDS --model_dir=FT
A make_tfrecords directory instead: --data_dir=DATA --config.input.dataset= .
"""

from keras_vit_configs import common


def get_config(model="ViT_B16", total_steps=10_000, learning_rate=0.01, dataset="cifar10"):
    c = common.finetune_config(model)
    common.read_tfds(c, dataset, train="train[:98%]", validation="train[98%:]")
    c.total_steps = total_steps
    c.learning_rate = learning_rate
    c.checkpoint_every = 1000
    return c
