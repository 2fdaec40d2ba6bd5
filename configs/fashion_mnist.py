"""A small ViT that learns Fashion-MNIST from scratch on a 2-core CPU.

Top-level keys are the pre-training run (trainers/pretrain.py); `config.finetune`
holds what trainers/finetune.py changes (its --config.finetune.KEY=VALUE overrides).
"""
import ml_collections


def get_config():
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.model = dict(patch_size=4, hidden_size=96, mlp_dim=192, num_heads=3, num_layers=4,
                      classifier="gap", dropout_rate=0.0, attention_dropout_rate=0.0)
  config.model_overrides = {}
  config.image_size = 28
  config.num_classes = 10
  config.total_steps = 4000
  config.batch_size = 128
  config.learning_rate = 2e-3
  config.warmup_steps = 300
  config.decay_type = "cosine"
  config.weight_decay = 0.05
  config.label_smoothing = 0.0
  config.checkpoint_every = 500
  config.steps_per_execution = 1
  config.eval_batch_size = 500
  config.input = dict(augment="random_crop", flip=True, shuffle_buffer=60_000,
                      shard_by="examples")
  config.finetune = dict(total_steps=500, learning_rate=0.01, warmup_steps=50,
                         checkpoint_every=100, ema_momentum=0.999)
  return config
