"""make_tfrecords speed on 224 x 224 JPEGs (--source=folder:): images/s, and per core;
or (--fashion_mnist) the command on Fashion-MNIST's 70,000 images, end to end.

  python benchmarks/make_tfrecords_speed.py [--images=3000] [--workers=N]
      [--serial_images=300] [--output=results/make_tfrecords_speed.json]
  python benchmarks/make_tfrecords_speed.py --fashion_mnist [--repeats=3]
      [--baseline=/path/to/other/checkout[:PYTHON]] [--output=...]

--fashion_mnist times `python tools/make_tfrecords.py --source=fashion_mnist
--output_dir=TMP --noprogress` as a user runs it: a fresh interpreter each time, wall
time from its start to its exit (Python's and any TensorFlow start-up included),
--repeats times; images/s of the fastest and the median run. --baseline runs another
checkout's command the same way (with that checkout's virtual environment's python,
or PYTHON), alternating with this one's, for a before/after on one machine under the
same load. Neither writes bytecode into the checkouts (PYTHONDONTWRITEBYTECODE).

Writes --images synthetic 224 x 224 JPEGs (quality 90; smooth random colour fields
with noise, so that sizes are those of photographs, about 30 KB) in two class
folders of a temporary folder, then times `writer.make_tfrecords` on them in this
process after a warm-up (TensorFlow's start-up and tracing are left out): the
parallel writer (--workers, default all cores) on all of them, and the serial one
(workers=0) on the first --serial_images. Every image passes through unchanged
(checked: header, decode). Prints JSON that names the machine (cli/machine.py).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def synthetic_image(rng):
    """A 224 x 224 x 3 uint8 image: a smooth random colour field with noise, whose
    JPEG (quality 90) is about the size of a photograph's at 224 px (about 30 KB)."""
    coarse = rng.uniform(0, 255, (8, 8, 3))
    field = np.kron(coarse, np.ones((28, 28, 1)))  # blocks, then blurred a little
    field = (field + np.roll(field, 14, 0) + np.roll(field, 14, 1)) / 3
    return np.clip(field + rng.normal(0, 12, field.shape), 0, 255).astype(np.uint8)


def write_jpegs(root, n, seed=0):
    """`n` 224 x 224 JPEGs (quality 90) in root/{a,b}/; returns their total bytes."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    total = 0
    for cls in ("a", "b"):
        os.makedirs(os.path.join(root, cls))
    for i in range(n):
        jpeg = tf.io.encode_jpeg(synthetic_image(rng), quality=90).numpy()
        total += len(jpeg)
        with open(os.path.join(root, "ab"[i % 2], f"{i:05d}.jpg"), "wb") as f:
            f.write(jpeg)
    return total


FASHION_MNIST_IMAGES = 70_000


def time_command(repo, python, output_dir):
    """Wall seconds of repo's tools/make_tfrecords.py on Fashion-MNIST, run as a user
    runs it (a fresh interpreter)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    start = time.perf_counter()
    subprocess.run(
        [
            python,
            "tools/make_tfrecords.py",
            "--source=fashion_mnist",
            f"--output_dir={output_dir}",
            "--noprogress",
        ],
        cwd=repo,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def fashion_mnist_command(repeats, baseline):
    """{label: {seconds, images_per_second (fastest), median_images_per_second}} of
    this checkout's command ('this') and the baseline's ('baseline'), alternating."""
    this = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runs = {"this": (this, sys.executable)}
    if baseline:
        repo, _, python = baseline.partition(":")
        runs["baseline"] = (repo, python or os.path.join(repo, ".venv", "bin", "python"))
    seconds = {label: [] for label in runs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            for label, (repo, python) in runs.items():
                out = os.path.join(tmp, f"{label}-{r}")
                seconds[label].append(time_command(repo, python, out))
    return {
        label: {
            "repo": runs[label][0],
            "seconds": times,
            "images_per_second": FASHION_MNIST_IMAGES / min(times),
            "median_images_per_second": FASHION_MNIST_IMAGES / statistics.median(times),
        }
        for label, times in seconds.items()
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fashion_mnist", action="store_true")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--baseline", default=None)
    p.add_argument("--images", type=int, default=3000)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--serial_images", type=int, default=300)
    p.add_argument("--output", default=None)
    a = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from keras_vit_cli.machine import machine_info, report

    if a.fashion_mnist:
        result = {
            "images": FASHION_MNIST_IMAGES,
            "command": "python tools/make_tfrecords.py --source=fashion_mnist "
            "--output_dir=TMP --noprogress",
            "cores": len(os.sched_getaffinity(0)),
            "runs": fashion_mnist_command(a.repeats, a.baseline),
            "loadavg": os.getloadavg(),
            "machine": machine_info(),
        }
        report(result, a.output)
        return
    from keras_vit_data import writer

    workers = writer.default_workers() if a.workers is None else a.workers
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "images")
        jpeg_bytes = write_jpegs(root, a.images)
        source = f"folder:{root}"

        def timed(out, **kwargs):
            start = time.perf_counter()
            manifest = writer.make_tfrecords(
                source, os.path.join(tmp, out), progress=False, **kwargs
            )
            return manifest["splits"]["train"]["count"], time.perf_counter() - start

        timed("warm", workers=workers, max_examples=64)
        timed("warm0", workers=0, max_examples=8)
        n, seconds = timed("parallel", workers=workers)
        n0, seconds0 = timed("serial", workers=0, max_examples=a.serial_images)
    cores = writer.default_workers()
    result = {
        "images": n,
        "image_size": 224,
        "mean_jpeg_bytes": jpeg_bytes / a.images,
        "workers": workers,
        "cores": cores,
        "images_per_second": n / seconds,
        "images_per_second_per_core": n / seconds / cores,
        "serial_images": n0,
        "serial_images_per_second": n0 / seconds0,
        "speedup": (n / seconds) / (n0 / seconds0),
        "loadavg": os.getloadavg(),
        "machine": machine_info(),
    }
    report(result, a.output)


if __name__ == "__main__":
    main()
