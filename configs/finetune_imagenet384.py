"""Fine-tune on ImageNet (ILSVRC-2012) at 384 px: SGD momentum 0.9, batch 512,
20k steps, 500 warmup then cosine, clip 1.0, no weight decay, EMA 0.9999.
  python trainers/finetune.py --config=configs/finetune_imagenet384.py \
      --init=imagenet21k --data_dir=DATA --model_dir=RUN
"""

from keras_vit_configs import common


def get_config(model="ViT_B16"):
    c = common.finetune_config(model)
    c.total_steps = 20_000
    c.learning_rate = 0.03  # ImageNet grid {0.003, 0.01, 0.03} (App. B.1.1)
    c.image_size = 384  # L/16 512, H/14 518 for the headline table
    c.evals = dict(validation=common.classification_eval("validation"), fewshot=c.evals.fewshot)
    c.checkpoint_every = 1000
    c.mixed_precision = True
    c.steps_per_execution = 100
    c.input.shard_by = "files"
    return c
