"""AugReg from scratch on ImageNet-21k (configs/augreg.py; big_vision configs/vit_i21k.py).

  python trainers/pretrain.py --config=configs/augreg_i21k.py:ViT_B16 --tpu=NAME \
      --data_dir=DATA --model_dir=RUN [--config.input.aug_setting=medium1]
"""

from keras_vit_configs import augreg


def get_config(variant="ViT_B16"):
    return augreg.recipe(variant, "i21k")
