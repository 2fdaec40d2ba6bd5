"""The README's main job (`make demo`): Fashion-MNIST from scratch with a small ViT.

1. TFRecords in data/fashion_mnist (from the Debian IDX files, else TFDS), if missing.
2. trainers/pretrain.py --config=configs/fashion_mnist.py --strategy=mirrored
   --cpu_replicas=2 into runs/fashion_mnist (rerunning resumes / re-exports).
3. Prints the test accuracy and where the model is.

  python tools/demo.py [--model_dir=runs/fashion_mnist] [--data_dir=data/fashion_mnist]
                       [extra trainer flags, e.g. --config.total_steps=500]
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FMNIST = "/usr/share/datasets/fashion-mnist"


def _opt(args, name, default):
  for a in list(args):
    if a.startswith(f"--{name}="):
      args.remove(a)
      return a.split("=", 1)[1]
  return default


def main(argv):
  args = list(argv)
  data_dir = _opt(args, "data_dir", os.path.join(ROOT, "data", "fashion_mnist"))
  model_dir = _opt(args, "model_dir", os.path.join(ROOT, "runs", "fashion_mnist"))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
  t0 = time.time()
  if not os.path.exists(os.path.join(data_dir, "manifest.json")):
    source = ("fashion_mnist" if os.path.exists(f"{FMNIST}/t10k-labels-idx1-ubyte.gz")
              else "tfds:fashion_mnist")
    print(f"demo: writing TFRecords ({source}) to {data_dir}", flush=True)
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_tfrecords.py"),
                    f"--source={source}", f"--output_dir={data_dir}"], check=True, env=env)
  cmd = [sys.executable, os.path.join(ROOT, "trainers", "pretrain.py"),
         "--config=" + os.path.join(ROOT, "configs", "fashion_mnist.py"),
         f"--data_dir={data_dir}", f"--model_dir={model_dir}",
         "--strategy=mirrored", "--cpu_replicas=2", *args]
  print("demo: " + " ".join(cmd), flush=True)
  subprocess.run(cmd, check=True, env=env)
  with open(os.path.join(model_dir, "metrics.json")) as f:
    metrics = json.load(f)
  print(f"\nFashion-MNIST test accuracy: {metrics['test_accuracy']:.4f} "
        f"(step {metrics['step']}, {metrics['train_images_per_second']:.0f} train images/s, "
        f"{time.time() - t0:.0f} s wall)")
  print(f"model: {os.path.join(model_dir, 'model.weights.h5')} + "
        f"{os.path.join(model_dir, 'model_config.json')}  "
        f"(keras_vit.VisionTransformer(**config); load_weights)")
  print(f"metrics: {os.path.join(model_dir, 'metrics.json')}; "
        f"TensorBoard: {os.path.join(model_dir, 'tensorboard')}")
  return metrics


if __name__ == "__main__":
  main(sys.argv[1:])
