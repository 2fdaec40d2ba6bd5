r"""ViT-B/16 masked patch prediction with the paper's settings (§4.6, App. B.1.2).

Adam (beta 0.9 / 0.999), learning rate 2e-4, 10k warmup steps then cosine decay,
batch 4096, 1M steps (about 14 epochs of JFT; the paper also reports ImageNet
pre-training), 224 px, 3-bit RGB mean colour of the corrupted patches (512
classes), 50% of the patches corrupted (80% [mask], 10% random patch, 10% kept).
The paper states no weight decay or dropout for this run: the JFT pre-training
recipe's values are kept (pretrain.py's default weight decay 0.1, coupled to the
learning rate; dropout 0).

  python trainers/pretrain.py --config=configs/vit_b16_masked_patch.py \
      --data_dir=IMAGENET_TFRECORDS --model_dir=SSL_B16 --strategy=tpu --tpu=local
  python trainers/finetune.py --config=configs/... --init=SSL_B16 ...
"""

from keras_vit_configs import common


def get_config():
    config = common.base_config("ViT_B16")
    config.objective = "masked_patch"
    # config.masked_patch: the paper's settings, configs/common.py MASKED_PATCH.
    config.image_size = 224
    config.optimizer = "adamw"
    config.weight_decay = None  # pretrain.py's default, 0.1
    config.learning_rate = 2e-4
    config.warmup_steps = 10_000
    config.decay_type = "cosine"
    config.batch_size = 4096
    config.total_steps = 1_000_000
    config.checkpoint_every = 5000
    return config
