r"""Pre-trains a ViT (Adam, coupled weight decay, warmup + linear/cosine decay).

  python trainers/pretrain.py --config=configs/fashion_mnist.py --data_dir=DATA \
      --model_dir=RUN [--strategy=auto|default|mirrored|multi_worker|tpu] [--tpu=NAME|local] \
      [--cpu_replicas=N] [--config.KEY=VALUE ...]

Rerunning the same command on an existing RUN resumes ("resumed from step N").
See trainers/README.md for the run directory.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trainers import console

console.setup()  # before TensorFlow is imported: our lines only, a progress bar

from trainers import app

if __name__ == "__main__":
    app.main("pretrain")
