"""A small ViT that learns Fashion-MNIST from scratch on a 2-core CPU.

Top-level keys are the pre-training run (trainers/pretrain.py). `config.finetune`
holds what trainers/finetune.py changes on top (override those with
--config.finetune.KEY=VALUE); e.g. fine-tune a pretrain RUN:
  python trainers/finetune.py --config=configs/fashion_mnist.py --init=RUN ...
"""
import ml_collections

from configs import common


def get_config():
  config = common.base_config(model=dict(
      patch_size=4, hidden_size=64, mlp_dim=128, num_heads=4, num_layers=4,
      classifier="gap", dropout_rate=0.0, attention_dropout_rate=0.0))
  config.image_size = 28
  config.total_steps = 2000
  config.batch_size = 128
  config.learning_rate = 2e-3
  config.warmup_steps = 200
  config.decay_type = "cosine"
  config.weight_decay = 0.05
  config.checkpoint_every = 500
  config.eval_batch_size = 500
  config.input.augment = "random_crop"
  config.input.shuffle_buffer = 60_000
  # Keras' EMA starts at the initial weights without bias correction: after n
  # steps momentum**n of the exported average is still the initial model,
  # 0.99**500 = 0.7% (0.999**500 would be 61%).
  config.finetune = ml_collections.ConfigDict(dict(
      total_steps=500, learning_rate=0.01, warmup_steps=50, checkpoint_every=100,
      ema_momentum=0.99, optimizer="sgd", weight_decay=0.0))
  return config
