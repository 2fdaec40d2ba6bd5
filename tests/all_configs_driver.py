"""Trains every config in configs/ for one step at a tiny size, all in this one process,
under one strategy: the driver of tests/test_all_configs.py (one process per strategy keeps
the suite's time down; each config alone would pay TensorFlow's start-up again).

  python tests/all_configs_driver.py --strategy=mirrored --cpu_replicas=2 \
      --data_dir=DATA --model_dir=DIR

Each config (`specs()`: every configs/*.py with a `get_config`, with its default arguments;
vtab1k in its `vtab1k:TASK` form) is resolved by trainers/train_config.py as the trainers
resolve it, with `TINY` on top as command-line overrides, and trained by `train_lib.run`
into DIR/<config>, once per code path: `path_key` says which choices of the resolved
config take another path through the trainers and the model (objective, loss, model kind,
optimizer, schedule, crop, AugReg augmentation, mixed precision, ...), and which are only
values (learning rate, steps, sizes, ...). The first config of each path trains; a config
whose path is already trained is only validated (`validate`: resolved, checked, its plan
made and its tiny model built and compiled under the strategy, not trained). Prints one
line per config: `ok <spec> <mode> step=<n> jit_compile=<bool>`, `same <spec> <spec
trained> <mode> jit_compile=<bool>`, or `FAIL <spec>: <error>` (its traceback on stderr);
exits with 1 when any failed.
"""

import argparse
import importlib
import os
import pkgutil
import sys
import traceback

import keras_vit_configs
from keras_vit import families
from keras_vit_configs import fashion_mnist_hybrid

# The fine-tuning recipes (trainers/finetune.py); every other config pre-trains.
FINETUNE = ("cifar10", "cifar100", "flowers", "pets", "vtab1k", "finetune_imagenet384", "families")
# vtab1k through its `configs/vtab1k.py:TASK` form, for one task; configs/families.py for
# each family (each takes its own path: LayerScale, registers, pooling, pre-norm, ...).
VTAB_TASK = "vtab1k:dtd"
FAMILY_SPECS = tuple(
    f"families:{family}"
    for family in ("clip", "deit3", "dinov2", "dinov3", "eva02", "rope_vit", "siglip")
)
# configs/fashion_mnist_hybrid.py's every variant (how much ResNet before the tokens).
HYBRID_SPECS = tuple(f"fashion_mnist_hybrid:{v}" for v in fashion_mnist_hybrid.HYBRIDS)
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
    # the tests' tiny --data_dir, not the TFDS dataset a fine-tuning config names
    "input.dataset": None,
    "train_split": "train",
}


def specs():
    """Every config of configs/ as `--config=configs/<spec>.py` names it."""
    names = [
        m.name
        for m in pkgutil.iter_modules(keras_vit_configs.__path__)
        if hasattr(importlib.import_module(f"keras_vit_configs.{m.name}"), "get_config")
    ]
    expanded = {
        VTAB_TASK.split(":")[0]: (VTAB_TASK,),
        "families": FAMILY_SPECS,
        "fashion_mnist_hybrid": HYBRID_SPECS,
    }
    return sorted(spec for name in names for spec in expanded.get(name, (name,)))


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


# --- code paths ------------------------------------------------------------------------

# Keys of the resolved config (dotted) whose value is the path: each value its own code.
CHOICE_KEYS = (
    "objective",
    "optimizer",
    "decay_type",
    "freeze",
    "mixed_precision",
    "jit_compile",  # as requested: with mixed_precision, deterministic_ops and the
    "deterministic_ops",  # strategy, what "auto" resolves to (the same on one path)
    "input.crop",
    "input.dataset",  # which reader (data/readers.py)
    "input.flip",
    "input.shard_by",
    "input.strict",
    "input.synthetic",
    "input.cache_decoded",  # decoded once into memory, or every record every epoch
    "checkpoint_async",  # saved in TensorFlow's background thread, or not
)
# Keys that take another path only when on, with the value that is off.
SWITCH_KEYS = {
    "grad_clip_norm": 0.0,
    "ema_momentum": 0.0,
    "weight_decay": 0.0,
    "momentum": 0.0,
    "warmup_steps": 0,
    "grad_accum_steps": 1,
    "steps_per_execution": 1,
    "layer_decay": 1.0,
    "weight_decay_exclude": (),
    "train_examples": 0,
    "input.data_service": None,  # batches from tf.data service workers
    "checkpoint_keep_every": 0,  # a history of checkpoints: a second manager
}
# Keys read through their own rule in `path_key` (the objective's, the augmentation's,
# the model's and the evaluators').
RULE_KEYS = (
    "loss",
    "label_smoothing",
    "masked_patch.target",
    "input.aug_setting",
    "input.randaug",
    "input.mixup",
    "input.cutmix",
    "model",
    "model_overrides",
    "evals",
)
# Keys that are values only: another value takes the same path.
VALUE_KEYS = (
    "seed",
    "image_size",
    "num_classes",
    "total_steps",
    "batch_size",
    "learning_rate",
    "linear_end",
    "beta1",
    "beta2",
    "checkpoint_every",
    "checkpoint_keep",  # how many of the newest checkpoints stay
    "resume_step",  # which checkpoint a rerun resumes from: none in the recipes
    "log_every",  # TensorBoard points: the same steps and callbacks on any value
    "collective_timeout",  # multi-worker collectives' timeout: a value of the strategy
    "profile_steps",  # a profiler window: tracing only, the same steps
    "callbacks",  # the user's callbacks: none in the recipes
    "time_limit",  # a wall-clock stop: a run cut short at a boundary, the same steps
    "time_limit_reserve_steps",
    "time_limit_anneal",  # with a limit only: the schedule's end brought forward once
    "train_split",
    "input.area_range",
    "input.shuffle_buffer",
    "input.shuffle_bytes",
    "input.verify_max_bytes",
    "input.max_pixels",
    "input.tfds_data_dir",
    "input.augment",  # the crop's former name: folded into input.crop by resolve (None)
    "input.label_offset",
    "masked_patch.bits",
    "masked_patch.corruption_rate",
    "masked_patch.mask_prob",
    "masked_patch.random_prob",
    "vtab_task",  # configs/vtab1k.py's task and its TFDS name: the data's, not the trainer's
    "tfds_name",
)
# VisionTransformer arguments (as the model resolves them) that are the path; every other
# argument (sizes, names, dtype, image size, classes, normalisation constants) is a value.
MODEL_CHOICES = ("classifier", "include_top", "pooling", *families.BOOLEAN_OPTIONS)
MODEL_SWITCHES = (
    "representation_size",
    "dropout_rate",
    "attention_dropout_rate",
    "layer_scale_init",
    "num_registers",
    "rope",  # rotary position embeddings: None or a dict (keras_vit.layers.rotary)
)
MODEL_VALUES = (
    "image_size",
    "channels",
    "patch_size",
    "hidden_size",
    "mlp_dim",
    "num_heads",
    "num_layers",
    "num_classes",
    "layer_norm_epsilon",
    "preprocessing",
    "classifier_activation",
    "input_tensor",
    "dynamic_size",
    "name",
    "dtype",
    "trainable",
    "stochastic_depth_rate",  # its own rule: on or off
    "resnet",  # its own rule: none, the stem alone, or stages
)


def _flat(node, prefix=""):
    """{dotted key: value} of a config's leaves; `model`, `model_overrides` and `evals`
    stay whole (RULE_KEYS)."""
    out = {}
    for key, value in node.items():
        dotted = prefix + key
        if hasattr(value, "items") and dotted not in ("model", "model_overrides", "evals"):
            out.update(_flat(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def model_arguments(config):
    """The VisionTransformer arguments `config`'s model is built with, complete (the
    variant's sizes, the config's model and model_overrides, the model's defaults), as
    keras_vit resolves them."""
    from keras_vit import applications_args, builders, variants
    from keras_vit import vision_transformer as vt

    spec = config.model.to_dict() if hasattr(config.model, "to_dict") else config.model
    spec = {"variant": spec} if isinstance(spec, str) else dict(spec)
    variant = spec.pop("variant", None)
    # a family's builder: its sizes and its family's options (without weights)
    families = {
        name: {**sizes, **options} for name, (sizes, options) in builders.FAMILY_VARIANTS.items()
    }
    arch = {**variants.VARIANTS, **variants.HYBRID_VARIANTS, **families}[variant] if variant else {}
    overrides = {k: v for k, v in config.model_overrides.to_dict().items() if v is not None}
    arguments = {**arch, **spec, **overrides, "image_size": config.image_size}
    return applications_args.with_defaults(vt.VisionTransformer.given_arguments(**arguments))


def unclassified_keys(config):
    """The keys of `config` (resolved) and of its model's arguments that `path_key` does
    not know as a path or as a value: each new key must be put in one of the tables."""
    known = {*CHOICE_KEYS, *SWITCH_KEYS, *RULE_KEYS, *VALUE_KEYS}
    model = {*MODEL_CHOICES, *MODEL_SWITCHES, *MODEL_VALUES}
    return sorted(
        [k for k in _flat(config) if k not in known]
        + [f"model:{k}" for k in model_arguments(config) if k not in model]
    )


def path_key(mode, config, model=True):
    """The code path a run of `config` (resolved, for `mode`) takes through the trainers
    and the model, as a sorted tuple of (name, value): two configs with one key take the
    same path and differ only in hyper-parameter values. A function of the resolved
    config, so a config with a new choice is a new path without anyone listing it.
    `model=False`: the trainers' path alone (the model's choices left out)."""
    from keras_vit_trainers.augment import settings as augment_settings

    flat = _flat(config)
    missing = unclassified_keys(config)
    if missing:
        raise ValueError(
            f"all_configs_driver.path_key: config keys {missing} are neither a path nor a "
            "value: add each to CHOICE_KEYS, SWITCH_KEYS, VALUE_KEYS or the MODEL_ tables"
        )
    key = {"mode": mode}  # which trainer (pretrain.py, finetune.py) and its defaults
    key.update({k: flat[k] for k in CHOICE_KEYS if k in flat})
    for k, off in SWITCH_KEYS.items():
        if k in flat:
            key[k] = (flat[k] or off) != off
    if config.objective == "classification":
        key["loss"] = config.loss
        key["label_smoothing"] = bool(config.label_smoothing)
    elif config.objective == "masked_patch":
        key["masked_patch.target"] = config.masked_patch.target
    aug = augment_settings.resolve(config.input)
    key.update({f"augment.{k}": bool(aug[k]) for k in ("randaug", "mixup", "cutmix")})
    model = model_arguments(config)
    key.update({f"model.{k}": model[k] for k in MODEL_CHOICES})
    key.update({f"model.{k}": bool(model[k]) for k in MODEL_SWITCHES})
    key["model.stochastic_depth"] = bool(model["stochastic_depth_rate"])
    resnet = model["resnet"]
    key["model.resnet"] = None if resnet is None else ("stages" if resnet["num_layers"] else "stem")
    key["evals"] = tuple(sorted({e["type"] for e in config.evals.to_dict().values()}))
    if not model:
        key = {k: v for k, v in key.items() if not k.startswith("model.")}
    return tuple(sorted((k, v if not isinstance(v, list) else tuple(v)) for k, v in key.items()))


def validate(spec, mode, resolved, strategy, data_dir, model_dir):
    """What `train_lib.run` does before training, without training: the config checked
    (config_checks.check), its plan made, its tiny model built and compiled under
    `strategy` with the input spec it would read. Returns the resolved jit_compile."""
    import keras

    from keras_vit_trainers import (
        config_checks,
        evaluators,
        input_pipeline,
        input_spec,
        train_lib,
    )

    run_dir = os.path.join(model_dir, spec.replace(":", "_"), "checkpoints")
    os.makedirs(run_dir, exist_ok=True)
    try:
        manifest = input_pipeline.read_manifest(data_dir)
        num_classes = resolved.num_classes or int(manifest["num_classes"])
        sizes = train_lib.plan(resolved, strategy, run_dir)
        objective = config_checks.check_values(resolved)
        jit_compile = config_checks.check(resolved, strategy, objective)
        train_lib._set_precision(resolved, strategy)
        optimizer = train_lib.make_optimizer(resolved, strategy, sizes.total_steps)
        model = train_lib.build(
            resolved, strategy, objective, num_classes, sizes, None, jit_compile, optimizer
        )
        spec_ = input_spec.InputSpec.from_config(
            resolved,
            num_classes,
            bool(manifest.get("multi_label", False)),
            objective,
            preprocessing=getattr(getattr(model, "backbone", model), "preprocessing", None),
        )
        train_lib.make_evaluators(
            resolved, evaluators.Context(data_dir, spec_, objective, strategy, sizes.batch)
        )
        if not model.built or not model.count_params():
            raise RuntimeError(f"{spec}: the model did not build")
    finally:
        keras.backend.clear_session()
    return jit_compile


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
    parser.add_argument(
        "--trainer_paths",
        action="store_true",
        help="one config trained per path of the trainers (path_key(model=False)); the "
        "model's own choices are trained under the other strategy",
    )
    args = parser.parse_args(argv)
    from keras_vit_trainers import strategy as strategy_lib

    strategy = strategy_lib.make_strategy(args.strategy, None, args.cpu_replicas)
    failed, trained = 0, {}  # path_key -> the spec trained on that path
    for spec in specs():
        try:
            mode, resolved = resolve(spec)
            key = path_key(mode, resolved, model=not args.trainer_paths)
            if key in trained:
                jit = validate(spec, mode, resolved, strategy, args.data_dir, args.model_dir)
                print(f"same {spec} {trained[key]} {mode} jit_compile={jit}")
                sys.stdout.flush()
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
