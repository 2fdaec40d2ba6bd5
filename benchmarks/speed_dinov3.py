"""ViT-S/16-DINOv3's forward, keras_vit (TensorFlow: graph and XLA) against timm's
(PyTorch eager, `vit_small_patch16_dinov3`), and keras_vit's plain ViT-S/16 of the
same shapes beside them: what the rotary embeddings, registers and LayerScale cost.

Random weights, synthetic images, float32, interleaved: every round times each
contender in turn (the order rotated by one a round), so that a shared, noisy
machine slows them alike and the ratios within one run hold.

    KERAS_BACKEND=tensorflow python benchmarks/speed_dinov3.py --batch=8 --rounds=5 \
        --json=benchmarks/results/speed_cpu_dinov3_s16_float32.json
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit_benchmarks.speed_runners import import_timm_vit  # noqa: E402
from keras_vit_cli.machine import describe, machine_info, report, source_commit  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="forwards timed per round")
    parser.add_argument("--json", help="write every round's timing here")
    return parser.parse_args(argv)


def _keras_contenders(images):
    """{name: step function} of the keras_vit models, traced and warmed up."""
    contenders = {}
    for variant in ("DINOv3_S16", "ViT_S16"):
        model = getattr(keras_vit, variant)(include_top=True, classes=1000)
        for mode, jit in (("graph", False), ("xla", True)):
            forward = tf.function(lambda x, m=model: m(x, training=False), jit_compile=jit)
            forward(images).numpy()
            contenders[f"keras_vit {variant} {mode}"] = lambda f=forward: f(images).numpy()
    return contenders


def _timm_contender(images):
    import torch

    import_timm_vit()  # torchvision's op registrations, where they do not load
    import timm

    model = timm.create_model("vit_small_patch16_dinov3", pretrained=False).eval()
    x = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))

    def step():
        with torch.inference_mode():
            return model(x).numpy()

    step()
    return {"timm vit_small_patch16_dinov3 eager": step}


def main(argv=None):
    args = parse_args(argv)
    images = np.random.default_rng(0).uniform(-1, 1, (args.batch, 224, 224, 3)).astype("float32")
    contenders = {**_keras_contenders(images), **_timm_contender(images)}
    names = list(contenders)
    times = {name: [] for name in names}
    print(describe(), flush=True)
    for round_index in range(args.rounds):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for name in order:
            start = time.perf_counter()
            for _ in range(args.steps):
                contenders[name]()
            times[name].append((time.perf_counter() - start) / args.steps)
        print(f"round {round_index + 1}/{args.rounds} done", flush=True)
    images_per_s = {name: args.batch / statistics.median(t) for name, t in times.items()}
    timm = images_per_s["timm vit_small_patch16_dinov3 eager"]
    result = {
        "machine": machine_info(),
        "commit": source_commit(),
        "batch": args.batch,
        "dtype": "float32",
        "image_size": 224,
        "seconds_per_step": times,
        "images_per_second": {k: round(v, 2) for k, v in images_per_s.items()},
        "ratio_to_timm": {k: round(v / timm, 3) for k, v in images_per_s.items()},
    }
    for name in names:
        print(f"{name:45s} {images_per_s[name]:8.2f} img/s  x{images_per_s[name] / timm:.2f} timm")
    report(result, args.json)


if __name__ == "__main__":
    main()
