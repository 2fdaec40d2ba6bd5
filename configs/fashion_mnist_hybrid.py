"""The paper's hybrid (§3.1) sized for Fashion-MNIST on a 2-core CPU: BiT's ResNet
stem alone (StdConv 7x7 / 2, GroupNorm, ReLU, max-pool 3x3 / 2; 32 channels) turns
a 28x28 image into a 7x7 feature map, whose 49 1x1 patches are the Transformer's
tokens (hidden 128, MLP 256, 4 heads, 4 blocks, GAP).

`make demo` trains it: at the demo's budget (the ViT's 4,500 steps of training time;
this model trains at half the ViT's images/s, so 2,250 steps) it was ahead of the ViT
of configs/fashion_mnist.py on the compute frontier (benchmarks/frontier.py,
docs/training.md "The compute frontier"). Everything else (AdamW at lr 2e-3, the
sweep's best for both, augmentation, evaluation, fine-tuning section) is
configs/fashion_mnist.py's.

  python trainers/pretrain.py --config=configs/fashion_mnist_hybrid.py \
      --data_dir=runs/data/fashion_mnist --model_dir=runs/fashion_mnist_hybrid
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
    # The demo ViT's training time at half its speed (49 tokens against 16): the
    # frontier's demo-budget point (benchmarks/frontier.py), warm-up 1/15 as the ViT's.
    config.total_steps = 2250
    config.warmup_steps = 150
    config.checkpoint_every = 750
    config.evals.test.every = 750  # the learning curve's test accuracy
    return config
