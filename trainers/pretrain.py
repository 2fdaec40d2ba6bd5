r"""Pre-trains a ViT (Adam, coupled weight decay, warmup + linear/cosine decay).

  python trainers/pretrain.py --config=configs/fashion_mnist.py --data_dir=DATA \
      --model_dir=RUN [--strategy=auto|default|mirrored|multi_worker|tpu] [--tpu=NAME|local] \
      [--cpu_replicas=N] [--config.KEY=VALUE ...]

Rerunning the same command on an existing RUN resumes ("resumed from step N").
See trainers/README.md for the run directory.
"""

from keras_vit_cli import console

console.setup()  # before TensorFlow is imported: our lines only, a progress bar

from keras_vit_trainers import app

if __name__ == "__main__":
    app.main("pretrain")
