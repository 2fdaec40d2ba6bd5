"""ViT-L/16 pre-training on ImageNet-21k: the B/16 recipe (Adam, batch 4096, lr 1e-3,
wd 0.03, 10k warmup + linear decay, dropout 0.1, 90 epochs) with the L/16 model and a
1024-wide pre_logits layer."""

from keras_vit_configs import vit_b16_i21k


def get_config():
    return vit_b16_i21k.get_config(model="ViT_L16", hidden_size=1024)
