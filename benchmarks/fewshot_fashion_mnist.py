r"""Trains a small ViT on Fashion-MNIST briefly (CPU, keras model.fit on the IDX
arrays) and writes a trainers-style RUN directory, so that tools/visualize.py
and tools/fewshot.py have a trained model to look at when no trainer run is at
hand. A measurement, not a test.

  python benchmarks/fewshot_fashion_mnist.py --run_dir=/tmp/fmnist_run --epochs=2

The model (patch 4, hidden 96, MLP 192, 3 heads, 4 layers, GAP, 28x28 px) was
configs/fashion_mnist.py's until 2026-12-01 (that config has since grown; the demo's run,
`tools/demo.py`, is the model docs/inspect.md looks at); AdamW with warmup + cosine, no
augmentation.
RUN/model_config.json + RUN/model.weights.h5 + RUN/metrics.json as trainers write;
metrics.json also names the machine (cli/machine.py: CPU kinds differ up to 4x).
"""

import argparse
import json
import time

import keras
import numpy as np

import keras_vit
from keras_vit.preprocessing import PIXEL_SCALE
from keras_vit.run_directory import RunDirectory
from keras_vit_cli.machine import describe, machine_info
from keras_vit_data.fashion_mnist import FASHION_MNIST_DIR, read_split

MODEL = dict(
    image_size=28,
    patch_size=4,
    hidden_size=96,
    mlp_dim=192,
    num_heads=3,
    num_layers=4,
    classifier="gap",
    num_classes=10,
)


def load(directory, split):
    images, labels = read_split(directory, split)
    images = np.repeat(images[..., None], 3, axis=-1).astype("float32") / PIXEL_SCALE - 1.0
    return images, labels.astype("int64")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run_dir", required=True)
    parser.add_argument("--fashion_mnist_dir", default=FASHION_MNIST_DIR)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--learning_rate", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    keras.utils.set_random_seed(args.seed)
    machine = machine_info()
    x_train, y_train = load(args.fashion_mnist_dir, "train")
    x_test, y_test = load(args.fashion_mnist_dir, "test")
    model = keras_vit.VisionTransformer(**MODEL, name="vit_fashion_mnist")
    steps = args.epochs * (len(x_train) // args.batch_size)
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, steps - 200, warmup_target=args.learning_rate, warmup_steps=200
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.05, global_clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    start = time.perf_counter()
    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, verbose=2)
    train_seconds = time.perf_counter() - start
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=500, verbose=0)
    run = RunDirectory(args.run_dir)
    run.makedirs()
    model.save_weights(run.weights)
    run.write_json(run.model_config, model.get_config())
    metrics = {
        "step": steps,
        "test_accuracy": float(accuracy),
        "eval_loss": float(loss),
        "train_seconds": train_seconds,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "source": "benchmarks/fewshot_fashion_mnist.py",
        "machine": machine,
    }
    run.write_json(run.metrics, metrics)
    print(describe(machine))
    print(json.dumps(metrics))


if __name__ == "__main__":
    main()
