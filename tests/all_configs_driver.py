"""Trains every config in configs/ for one step at a tiny size, all in this one process,
under one strategy: the driver of tests/test_all_configs.py (one process per strategy keeps
the suite's time down; each config alone would pay TensorFlow's start-up again).

  python tests/all_configs_driver.py --strategy=mirrored --cpu_replicas=2 \
      --data_dir=DATA --model_dir=DIR

Each config (`specs()`: every configs/*.py with a `get_config`, with its default arguments;
vtab1k in its `vtab1k:TASK` form) is resolved by trainers/train_config.py as the trainers
resolve it, with `TINY` on top as command-line overrides, and trained by `train_lib.run`
into DIR/<config>. A config that resolves to the very config of one trained before (at
TINY's sizes cifar100 is cifar10, flowers is pets) is the same run, and is not trained
again. Prints one line per config: `ok <spec> <mode> step=<n> jit_compile=<bool>`, `same
<spec> <spec trained>`, or `FAIL <spec>: <error>` (its traceback on stderr); exits with 1
when any failed.
"""

import argparse
import importlib
import os
import pkgutil
import sys
import traceback

import keras_vit_configs

# The fine-tuning recipes (trainers/finetune.py); every other config pre-trains.
FINETUNE = ("cifar10", "cifar100", "flowers", "pets", "vtab1k", "finetune_imagenet384")
# vtab1k through its `configs/vtab1k.py:TASK` form, for one task.
VTAB_TASK = "vtab1k:dtd"
# A model of milliseconds per step, at 8x8 px (2x2 patches), one step of a batch of 4 (two
# per replica under 2 replicas), no evaluations; everything else is the config's own.
TINY_MODEL = dict(patch_size=4, hidden_size=8, mlp_dim=16, num_heads=2, num_layers=1)
TINY = {
    "image_size": 8,
    "batch_size": 4,
    "grad_accum_steps": 1,
    "total_steps": 1,
    "checkpoint_every": 1,
    "steps_per_execution": 1,
    "warmup_steps": 0,
    "evals": {},
}


def specs():
    """Every config of configs/ as `--config=configs/<spec>.py` names it."""
    names = [
        m.name
        for m in pkgutil.iter_modules(keras_vit_configs.__path__)
        if hasattr(importlib.import_module(f"keras_vit_configs.{m.name}"), "get_config")
    ]
    return sorted(VTAB_TASK if name == VTAB_TASK.split(":")[0] else name for name in names)


def tiny_overrides(config):
    """TINY, and the config's model at TINY_MODEL's sizes (a builder name becomes a dict
    with that `variant`); a hybrid keeps its ResNet, with 1x1 patches of its 2x2 map."""
    model = config.model
    model = model.to_dict() if hasattr(model, "to_dict") else model
    model = {"variant": model} if isinstance(model, str) else dict(model)
    tiny = {**model, **TINY_MODEL}
    if model.get("resnet"):
        tiny["patch_size"] = 1
    return {**TINY, "model": tiny}


def resolve(spec):
    """(mode, the config `spec` trains with at TINY's sizes)."""
    from keras_vit_trainers import train_config

    name, _, argument = spec.partition(":")
    module = importlib.import_module(f"keras_vit_configs.{name}")
    config = module.get_config(argument) if argument else module.get_config()
    mode = "finetune" if name in FINETUNE else "pretrain"
    return mode, train_config.resolve(config, mode, tiny_overrides(config))


def train(spec, mode, resolved, strategy, data_dir, model_dir):
    """Trains `resolved` one step; returns the run's metrics."""
    import keras
    from keras_vit_trainers import train_lib

    try:
        metrics = train_lib.run(
            resolved,
            data_dir=data_dir,
            model_dir=os.path.join(model_dir, spec.replace(":", "_")),
            strategy=strategy,
            mode=mode,
        )
    finally:
        keras.backend.clear_session()
    return metrics


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", required=True)
    parser.add_argument("--cpu_replicas", type=int, default=1)
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--model_dir", required=True)
    args = parser.parse_args(argv)
    from keras_vit_trainers import strategy as strategy_lib

    strategy = strategy_lib.make_strategy(args.strategy, None, args.cpu_replicas)
    failed, trained = 0, {}  # the config (as JSON) -> the spec trained with it
    for spec in specs():
        try:
            mode, resolved = resolve(spec)
            key = mode + resolved.to_json(sort_keys=True)
            if key in trained:
                print(f"same {spec} {trained[key]}")
                continue
            metrics = train(spec, mode, resolved, strategy, args.data_dir, args.model_dir)
            trained[key] = spec
        except Exception as e:  # report every config, not only the first that fails
            traceback.print_exc()
            print(f"FAIL {spec}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            failed += 1
            continue
        print(f"ok {spec} {mode} step={metrics['step']} jit_compile={metrics['jit_compile']}")
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
