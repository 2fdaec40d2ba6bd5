r"""Fine-tunes a ViT (SGD momentum 0.9, clip 1.0, warmup + cosine, optional EMA).

Usage (installed, as a module, from the repository; the same flags as pretrain):
  keras-vit-finetune --config=CONFIG --init=PATH_OR_REGISTRY_NAME --data_dir=DATA \
      --model_dir=RUN [--config.KEY=VALUE ...]
  python -m keras_vit_trainers.finetune --config=CONFIG --init=... ...
  python trainers/finetune.py --config=configs/cifar10.py --init=... ...

Example (ViT-B/16's ImageNet-21k weights on CIFAR-10, prepared by TFDS in ./tfds):
  keras-vit-finetune --config=cifar10 --init=imagenet21k --model_dir=runs/cifar10 \
      --config.input.tfds_data_dir=tfds

--init: an official .npz, a keras_vit registry name, a .weights.h5/.keras file, or a
pretrain RUN directory. The head is re-initialised to zeros for the config's classes,
position embeddings are interpolated to `image_size`. With `ema_momentum` > 0 the
Polyak-averaged weights are evaluated and exported.
"""

from keras_vit_cli import console

console.setup()  # before TensorFlow is imported: our lines only, a progress bar

from keras_vit_trainers import app

if __name__ == "__main__":
    app.main("finetune")
