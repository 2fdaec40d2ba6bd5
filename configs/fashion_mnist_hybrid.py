"""The paper's hybrid (§3.1) sized for Fashion-MNIST on a 2-core CPU: BiT's ResNet
stem alone (StdConv 7x7 / 2, GroupNorm, ReLU, max-pool 3x3 / 2; 32 channels) turns
a 28x28 image into a 7x7 feature map, whose 49 1x1 patches are the Transformer's
tokens (hidden 128, MLP 256, 4 heads, 4 blocks, GAP).

Everything else (recipe, augmentation, evaluation, fine-tuning section) is
configs/fashion_mnist.py's; the learning rate is the frontier's tuned one
(benchmarks/frontier.py, docs/training.md "Compute frontier").

  python trainers/pretrain.py --config=configs/fashion_mnist_hybrid.py \
      --data_dir=data/fashion_mnist --model_dir=runs/fashion_mnist_hybrid
"""

from keras_vit_configs import fashion_mnist

# On top of configs/fashion_mnist.py's model (hidden 128, MLP 256, 4 heads, GAP).
HYBRID = dict(
    resnet=dict(num_layers=(), width_factor=0.5),  # the stem alone, 32 channels
    patch_size=1,
    num_layers=4,
)


def get_config():
    config = fashion_mnist.get_config()
    config.model = {**config.model, **HYBRID}
    return config
