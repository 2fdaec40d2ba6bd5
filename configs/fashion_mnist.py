"""A ViT that learns Fashion-MNIST from scratch on a 2-core CPU in about 12 minutes.

Top-level keys are the pre-training run (trainers/pretrain.py, `make demo`).
`config.finetune` holds what trainers/finetune.py changes on top (override those with
--config.finetune.KEY=VALUE); e.g. fine-tune a pretrain RUN:
  python trainers/finetune.py --config=configs/fashion_mnist.py --init=RUN ...

Measured choices (default strategy, Intel Xeon Sapphire Rapids, 2 cores, 2026-12-01, one
seed each; docs/training.md has the table and the commands):
- patch 7 (a 4x4 grid of 16 tokens), hidden 128, MLP 256, 4 heads, 6 blocks: trains at the
  speed of the former patch-4, hidden-64, 4-block model (884 against 850 images/s) with
  four times the parameters; the same accuracy at 1,000 steps (76.4% against 76.7%, both
  with the former pad-and-crop augmentation);
- no pad-and-crop: at this budget the +-4 pixel shifts cost 8 points (84.7% against 76.7%
  at 1,000 steps, former model); flips cost nothing (86.2% against 86.4% at 1,500 steps);
  RandAugment(2, 10) cost 7 points (79.1%) and halves the input pipeline's speed;
- XLA: 842 against 803 images/s, which `jit_compile="auto"` (configs/common.py) picks on
  one CPU replica (not on several, where XLA cannot train); mixed bfloat16 is
  slower for matrices this small (726 images/s); label smoothing 0.1;
- the training images decoded once into memory (`input.cache_decoded`, 141 MB): the same
  batches, without decoding every PNG every epoch on the cores the step runs on
  (docs/data.md has the figures).
"""

import ml_collections

from keras_vit_configs import common


def get_config():
    config = common.base_config(
        model=dict(
            patch_size=7,
            hidden_size=128,
            mlp_dim=256,
            num_heads=4,
            num_layers=6,
            classifier="gap",
            dropout_rate=0.0,
            attention_dropout_rate=0.0,
            stochastic_depth_rate=0.0,
        )
    )
    config.image_size = 28
    config.total_steps = 4500  # 9.6 epochs: what fits in the 15-minute demo here
    config.batch_size = 128
    config.learning_rate = 2e-3
    config.warmup_steps = 300
    config.decay_type = "cosine"
    config.weight_decay = 0.05
    config.label_smoothing = 0.1
    config.checkpoint_every = 500
    config.evals.test.every = 500  # the learning curve's test accuracy
    config.evals.test.batch_size = 500
    config.input.crop = "none"  # flips only: see the docstring
    config.input.flip = True
    config.input.shuffle_buffer = 60_000
    config.input.cache_decoded = True
    # Keras' EMA starts at the initial weights without bias correction: after n
    # steps momentum**n of the exported average is still the initial model,
    # 0.99**500 = 0.7% (0.999**500 would be 61%).
    config.finetune = ml_collections.ConfigDict(
        dict(
            total_steps=500,
            learning_rate=0.01,
            warmup_steps=50,
            checkpoint_every=100,
            ema_momentum=0.99,
            optimizer="sgd",
            weight_decay=0.0,
            evals=dict(test=dict(every=0)),
        )
    )
    return config
