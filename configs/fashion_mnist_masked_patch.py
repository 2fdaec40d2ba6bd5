r"""Masked patch prediction (paper §4.6) on Fashion-MNIST, sized for a 2-core CPU.

The model configs/fashion_mnist.py had when docs/masked_patch.md was measured (ViT,
patch 4, hidden 64, 4 layers, gap; pinned here), pre-trained without labels on the 60,000 training images, then fine-tuned:

  python trainers/pretrain.py --config=configs/fashion_mnist_masked_patch.py \
      --data_dir=DATA --model_dir=SSL
  python trainers/finetune.py --config=configs/fashion_mnist.py --init=SSL \
      --data_dir=DATA --model_dir=FT --config.train_examples=1000

Target: Fashion-MNIST is grayscale (decoded to R = G = B), so the 3-bit mean
*intensity* of each 4x4 patch is predicted: 8 classes (the 512-class RGB target
would carry the same information with 504 classes that never occur).
"""

from keras_vit_configs import fashion_mnist


def get_config():
    config = fashion_mnist.get_config()
    # Pinned to the recorded runs' model and input (the demo's recipe has moved on).
    config.model.update(dict(patch_size=4, hidden_size=64, mlp_dim=128, num_heads=4, num_layers=4))
    config.input.crop = "random_crop"
    config.label_smoothing = 0.0
    config.evals.test.every = 0
    config.objective = "masked_patch"
    config.masked_patch.target = "intensity"  # the rest: configs/common.py MASKED_PATCH
    # Batch 128, cosine decay, weight decay 0.05 and the checkpoint and eval
    # intervals are configs/fashion_mnist.py's.
    config.total_steps = 1500
    config.learning_rate = 1e-3
    config.warmup_steps = 300
    return config
