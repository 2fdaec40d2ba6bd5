r"""Pre-trains a ViT (Adam, coupled weight decay, warmup + linear/cosine decay).

Usage (the same program three ways: installed, as a module, from the repository):
  keras-vit-pretrain --config=CONFIG --data_dir=DATA --model_dir=RUN \
      [--strategy=auto|default|mirrored|multi_worker|tpu] [--tpu=NAME|local] \
      [--cpu_replicas=N] [--config.KEY=VALUE ...]
  python -m keras_vit_trainers.pretrain --config=CONFIG ...
  python trainers/pretrain.py --config=configs/fashion_mnist.py ...

Example (records from keras-vit-make-tfrecords --output_dir=data):
  keras-vit-pretrain --config=fashion_mnist --data_dir=data --model_dir=runs/vit \
      --config.total_steps=500

CONFIG: an installed recipe's name (fashion_mnist, fashion_mnist_hybrid,
families:dinov2, ...) or a config file's path. Rerunning the same command on an existing
RUN resumes ("resumed from step N"). The run directory: trainers/README.md.
"""

from keras_vit_cli import console

console.setup()  # before TensorFlow is imported: our lines only, a progress bar

from keras_vit_trainers import app

if __name__ == "__main__":
    app.main("pretrain")
