"""A resolved config checked against the run's strategy, before any model is built.

Every mistake a config or its `--config.KEY=VALUE` flags can make raises `ConfigError`: one
line that names the flag and the fix, which trainers/app.py prints before exiting with code
2 (a traceback is for bugs). Each check calls the validator the run itself calls later,
where there is one, so that the check and the run cannot disagree; what the run makes
from the config (the schedule and optimizer, the evaluators) is checked by making it, once,
in trainers/train_lib.py under `flag_errors` (validation is construction):

  renamed keys  an old key (train_config.RENAMED: input.augment) given with its new
                name too, to another value (train_config.resolve folds it otherwise)
  model         config.model a keras_vit builder name or a dict, and model_overrides,
                bound to `VisionTransformer`'s signature (the model is not built)
  shapes        the sizes the layers would refuse (`check_shapes`: heads dividing the
                hidden size, the patch the image or the hybrid's feature map,
                registers, ResNet stages), by the model's and layers' own rules
  objective     `objectives.get` and the objective's `loss`; masked_patch: its options and
                `keras_vit.masked_patch.num_target_classes`
  fine-tuning   `freeze.check`, `layer_decay.check` and weight_decay_exclude (names)
  augmentation  `augment.settings.resolve` (aug_setting, randaug, mixup, cutmix); the
                crop (input.crop) by `input_pipeline.preprocess_train` on a 16x16 image
                (its own check runs inside tf.data, after the model, otherwise); Mixup /
                CutMix need an objective with class labels; input.shard_by;
                input.data_service a grpc://HOST:PORT address
  jit_compile   `keras_vit.compilation.training_jit_compile`: "auto" resolved (one log
                line says to what and why), True where XLA cannot train refused

`check_values` runs once, in trainers/app.py, before the strategy is made; `check`, in
train_lib.run, returns the `jit_compile` to compile with.
"""

import contextlib
import importlib
import inspect
import logging
import math
import re

import keras
import tensorflow as tf

from keras_vit import applications_args, builders, compilation, variants, views
from keras_vit import masked_patch as masked_patch_lib
from keras_vit.layers import attention, resnet
from keras_vit.layers.patch_embedding import PatchEmbedding
from keras_vit.vision_transformer import VisionTransformer
from keras_vit_trainers import (
    freeze,
    input_pipeline,
    layer_decay,
    masked_patch,
    objectives,
    train_config,
)
from keras_vit_trainers import strategy as strategy_lib
from keras_vit_trainers.augment import settings as augment_settings

log = logging.getLogger("trainers")

# The side of the image the crop is tried on (random_crop pads it by 4, reflected).
TRIAL_SIZE = 16
# Hints appended to a validator's message, by the key it starts with.
HINTS = {
    "total_steps": "give a smaller --config.warmup_steps or a larger --config.total_steps",
}


class ConfigError(ValueError):
    """A config or flag mistake: a one-line message naming the flag and the fix."""


def _flag_error(error, hint=None):
    """A validator's ValueError ('input.crop=...: expected ...', 'config.loss=...')
    as a ConfigError naming the flag ('--config.input.crop=...')."""
    message = str(error).splitlines()[0]
    message = "--" + message if message.startswith("config.") else "--config." + message
    key = message[len("--config.") :].split("=")[0].split(":")[0]
    hint = hint or HINTS.get(key)
    return ConfigError(f"{message}; {hint}" if hint else message)


def _model_arguments(config):
    """The keyword arguments `VisionTransformer` gets (a builder's sizes left out)."""
    spec = config.model
    spec = spec.to_dict() if hasattr(spec, "to_dict") else spec
    overrides = dict(config.model_overrides)
    if isinstance(spec, str):
        return spec, overrides
    if not isinstance(spec, dict):
        raise ConfigError(
            f"--config.model={spec!r}: expected a keras_vit builder name (e.g. ViT_B16) or a "
            "dict of VisionTransformer arguments"
        )
    spec = dict(spec)
    return spec.pop("variant", None), {**spec, **overrides}


def check_renamed(config):
    """No renamed key given under both names with different values (train_config.RENAMED;
    train_config.resolve has moved every other old key's value to its new key)."""
    for old, new in train_config.RENAMED.items():
        value, current = train_config.get(config, old), train_config.get(config, new)
        if value is not None and value != current:
            raise ConfigError(
                f"--config.{old}={value!r} and --config.{new}={current!r} disagree: {old} is "
                f"the deprecated name of {new}; give --config.{new} alone"
            )


def check_model(config):
    """config.model names a builder, and it with model_overrides binds to VisionTransformer."""
    variant, arguments = _model_arguments(config)
    if variant is not None and variant not in builders.BUILDERS:
        raise ConfigError(
            f"--config.model={variant!r}: no such keras_vit builder; known: "
            f"{', '.join(builders.BUILDERS)}"
        )
    try:
        inspect.signature(VisionTransformer).bind(**{**arguments, "image_size": config.image_size})
    except TypeError as e:
        raise ConfigError(
            f"--config.model / --config.model_overrides: VisionTransformer {e}"
        ) from None


def _builder_arguments(variant):
    """The VisionTransformer arguments the keras_vit builder `variant` passes (its
    sizes, and a family's options); {} for None (VisionTransformer's defaults)."""
    if variant in builders.FAMILY_VARIANTS:
        sizes, options = builders.FAMILY_VARIANTS[variant]
        return {**sizes, **options}
    return dict({**variants.VARIANTS, **variants.HYBRID_VARIANTS}.get(variant, {}))


def _flag(config, key):
    """(where the model's `key` comes from, the flag that sets it): model_overrides, a
    dict model's key, or the builder's size / VisionTransformer's default (set then by
    model_overrides where it has the key, else by a dict model naming the builder)."""
    spec = config.model.to_dict() if hasattr(config.model, "to_dict") else config.model
    variant = spec.get("variant") if isinstance(spec, dict) else spec
    if key in config.model_overrides and config.model_overrides.get(key) is not None:
        flag = f"--config.model_overrides.{key}"
        return flag, flag
    if isinstance(spec, dict):
        flag = f"--config.model.{key}"
        return flag if key in spec else f"VisionTransformer's default {key}", flag
    if key in config.model_overrides:
        setter = f"--config.model_overrides.{key}"
    else:
        setter = f"--config.model=\"{{'variant': '{variant}', '{key}': ...}}\""
    return f"{variant}'s {key}", setter


def _divisors(n):
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def check_shapes(config):
    """The model's sizes as its layers will take them, before anything is built or
    written: the model's own argument checks (`VisionTransformer.given_arguments`,
    `applications_args.with_defaults`: registers, the hybrid's ResNet stages), then the
    layers' size rules: heads dividing the hidden size (`attention.check_heads`, the
    encoder's and a MAP head's), the patch dividing the image (`PatchEmbedding.grid_size`)
    or a hybrid's ResNet feature map (`views.token_grid_of`). A ConfigError naming the
    flags and the fix otherwise. The sizes of a model whose --init file decides them are
    not the config's: trainers/app.py checks a run without --init."""
    variant, arguments = _model_arguments(config)
    given = {**_builder_arguments(variant), **arguments, "image_size": config.image_size}
    given.pop("weights", None)
    try:
        a = applications_args.with_defaults(VisionTransformer.given_arguments(**given))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"--config.model / --config.model_overrides: {e}") from None
    hidden, heads = a["hidden_size"], a["num_heads"]
    try:
        attention.check_heads(hidden, heads)
    except ValueError as e:
        (hidden_from, _), (heads_from, heads_flag) = (
            _flag(config, "hidden_size"),
            _flag(config, "num_heads"),
        )
        raise ConfigError(
            f"{hidden_from}={hidden} and {heads_from}={heads}: {str(e).rstrip('.')} (give a "
            f"number of heads that divides {hidden} ({_divisors(hidden)}) with {heads_flag})"
        ) from None
    image, patch = a["image_size"], a["patch_size"]
    patch_embedding = PatchEmbedding(patch, hidden)
    stages = resnet.resnet_layers(a["resnet"]) if a["resnet"] is not None else []
    try:
        views.token_grid_of(stages, patch_embedding, image)
    except ValueError as e:
        message = (str(e).split(": ", 1)[-1] if not stages else str(e)).rstrip(".")
        # the patch divides the image, or a hybrid's feature map (its grid of 1x1 patches)
        side = views.token_grid_of(stages, PatchEmbedding(1, hidden), image) if stages else image
        patch_from, patch_flag = _flag(config, "patch_size")
        fix = (
            f"give a patch size that divides {' and '.join(map(str, sorted(set(side))))} "
            f"({_divisors(math.gcd(*side))}) with {patch_flag}, or another --config.image_size"
        )
        hybrid = f"{_flag(config, 'resnet')[0]}={a['resnet']}, " if stages else ""
        raise ConfigError(
            f"{hybrid}{patch_from}={patch} and --config.image_size={config.image_size}: "
            f"{message} ({fix})"
        ) from None


# The sizes that must be positive integers: the run's, and the model's (where given).
POSITIVE = ("batch_size", "image_size")
POSITIVE_MODEL = ("hidden_size", "mlp_dim", "num_heads", "num_layers", "patch_size")


def _positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _positive_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def check_sizes(config):
    """config.batch_size, image_size and the model's sizes (hidden_size, mlp_dim, ...)
    positive integers (a 0 batch divides by zero in the pipeline; a negative width fails
    inside Keras after the run directory is written)."""
    for key in POSITIVE:
        value = config.get(key)
        if value is not None and not _positive_int(value):
            raise ConfigError(f"--config.{key}={value!r}: expected a positive integer")
    spec = config.model.to_dict() if hasattr(config.model, "to_dict") else config.model
    overrides = dict(config.model_overrides)
    for key in POSITIVE_MODEL:
        for where, values in (("model_overrides", overrides), ("model", spec)):
            value = values.get(key) if isinstance(values, dict) else None
            if value is not None:
                if not _positive_int(value):
                    raise ConfigError(
                        f"--config.{where}.{key}={value!r}: expected a positive integer"
                    )
                break


def check_watching(config):
    """config.log_every (0: off) and collective_timeout (seconds) not negative numbers;
    time_limit None or a time; profile_steps () or (first, last); callbacks importable
    "module:name" entries."""
    expected = {
        "log_every": (_count, "a step count >= 0 (0: no points between checkpoints)"),
        "collective_timeout": (
            _positive_number,
            "seconds > 0 (how long a worker waits for a lost peer before the run ends)",
        ),
        "time_limit": (
            _positive_number,
            "seconds since 1970 (date +%s), the time at which training stops",
        ),
        "time_limit_reserve_steps": (
            _count,
            "a step count >= 0 (the work after training, in training steps)",
        ),
    }
    for key, (valid, what) in expected.items():
        value = config.get(key)
        if value is not None and not valid(value):
            raise ConfigError(f"--config.{key}={value!r}: expected {what}")
    window = tuple(config.get("profile_steps") or ())
    if window and not (
        len(window) == 2
        and all(isinstance(s, int) and not isinstance(s, bool) for s in window)
        and 0 <= window[0] < window[1]
    ):
        raise ConfigError(
            f"--config.profile_steps={window!r}: expected two steps FIRST,LAST with "
            "0 <= FIRST < LAST (the profiler traces the steps between them), or () for none"
        )
    user_callbacks(config)


def user_callbacks(config):
    """config.callbacks ("module:name" strings) resolved: the callables, each making a
    Keras callback with no arguments. A bad entry is a ConfigError naming it."""
    entries = config.get("callbacks") or ()
    if isinstance(entries, str):
        entries = (entries,)
    made = []
    for i, entry in enumerate(entries):
        where = f"--config.callbacks[{i}]={entry!r}"
        module_name, _, name = str(entry).partition(":")
        if not (module_name and name):
            raise ConfigError(f"{where}: expected 'module:name' (a Keras callback class)")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ConfigError(
                f"{where}: cannot import {module_name} ({e}); put its folder on PYTHONPATH"
            ) from None
        factory = getattr(module, name, None)
        if not callable(factory):
            raise ConfigError(f"{where}: {module_name} has no callable {name!r}")
        made.append(factory)
    return made


def check_values(config):
    """The checks that need neither the strategy nor the data (renamed keys, sizes, the
    model, the objective): trainers/app.py runs them before anything is made."""
    check_renamed(config)
    check_sizes(config)
    check_watching(config)
    check_model(config)
    return check_objective(config)


def check_objective(config):
    """The objective named by config.objective (its loss and options checked)."""
    try:
        objective = objectives.get(config.objective)
        objective.loss(config)
        if isinstance(objective, masked_patch.MaskedPatch):
            options = masked_patch.options(config)
            try:
                masked_patch_lib.num_target_classes(options["target"], options["bits"])
            except ValueError as e:
                raise ValueError(f"masked_patch: {e}") from None
    except ValueError as e:
        raise _flag_error(e) from None
    return objective


def check_finetune_controls(config):
    """config.freeze, config.layer_decay and config.weight_decay_exclude."""
    try:
        freeze.check(config.freeze)
        layer_decay.check(config.layer_decay)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    names = config.weight_decay_exclude
    if isinstance(names, str) or not all(isinstance(n, str) and n for n in names or ()):
        raise ConfigError(
            f"--config.weight_decay_exclude={names!r}: expected a tuple of variable names, "
            'e.g. \'("bias", "gamma", "beta", "pos_embedding", "cls")\''
        )


def check_input(config, objective):
    """config.input: the augmentation the pipeline resolves, the crop, shard_by,
    data_service's address, and Mixup / CutMix only with class labels (`objective`'s)."""
    inp = config.input
    try:
        aug = augment_settings.resolve(inp)
        input_pipeline.preprocess_train(
            tf.zeros([TRIAL_SIZE, TRIAL_SIZE, 3], tf.uint8),
            tf.zeros([2], tf.int64),
            (TRIAL_SIZE, TRIAL_SIZE),
            crop=inp.crop,
            area_range=tuple(inp.area_range),
            flip=False,
        )
    except ValueError as e:
        hint = None
        if str(inp.crop).strip().lower() in augment_settings.AUGREG:
            hint = (
                f"{inp.crop!r} is an AugReg setting: give --config.input.aug_setting="
                f"{inp.crop} (input.crop chooses the crop only)"
            )
        raise _flag_error(e, hint) from None
    if inp.shard_by not in input_pipeline.SHARD_BY:
        raise ConfigError(
            f"--config.input.shard_by={inp.shard_by!r}: expected one of {input_pipeline.SHARD_BY}"
        )
    service = inp.get("data_service")
    if service and not re.fullmatch(r"grpc://[^/\s]+:\d+", str(service)):
        raise ConfigError(
            f"--config.input.data_service={service!r}: expected grpc://HOST:PORT, the "
            "dispatcher tools/data_service.py --role=dispatcher started (or None: off)"
        )
    if (aug["mixup"] or aug["cutmix"]) and not isinstance(objective, objectives.Classification):
        raise ConfigError(
            f"--config.input.mixup / cutmix / aug_setting: Mixup and CutMix ({augment_settings.describe(aug)}) "
            f"mix class labels, which the {objective.name} objective's targets are not; give "
            "--config.input.mixup=0 --config.input.cutmix=0"
        )


def jit_compile(config, strategy):
    """`config.jit_compile` resolved for `strategy` (compilation.training_jit_compile):
    True or False; "auto" logs its choice and why. ConfigError for True where XLA cannot
    train, or a value that is not "auto", True or False."""
    requested = config.jit_compile
    policy = strategy_lib.dtype_policy(strategy, config.mixed_precision)
    try:
        choice, reason = compilation.training_jit_compile(
            requested,
            strategy=strategy_lib.kind(strategy),
            device_type=strategy_lib.device_type(strategy),
            replicas=strategy.num_replicas_in_sync,
            compute_dtype=keras.DTypePolicy(policy).compute_dtype,
            cpu_flags=compilation.cpu_flags(),
            deterministic=bool(config.deterministic_ops),
        )
    except compilation.JitCompileError as e:
        raise ConfigError(
            f"--config.jit_compile=True: {e.reason}; give --config.jit_compile=auto (or False)"
        ) from None
    except ValueError as e:
        raise _flag_error(e) from None
    if requested == "auto":
        log.info("jit_compile=auto -> %s: %s", "XLA" if choice else "no XLA", reason)
    return choice


def check(config, strategy, objective):
    """Raises ConfigError for the first mistake in `config` that `check_values` (run
    before the strategy was made) could not see; returns the `jit_compile` to compile with.

    Args:
        config: the resolved config (trainers/train_config.resolve), which
            `check_values` accepted.
        strategy: the run's tf.distribute.Strategy.
        objective: `check_values`' objective.
    """
    check_finetune_controls(config)
    check_input(config, objective)
    if config.get("time_limit") is not None and strategy_lib.kind(strategy) == "multi_worker":
        raise ConfigError(
            f"--config.time_limit={config.time_limit:g}: one process only, not "
            "--strategy=multi_worker (each worker reads its own clock and would stop at "
            "another step)"
        )
    return jit_compile(config, strategy)


@contextlib.contextmanager
def flag_errors():
    """A validator's ValueError raised inside as a ConfigError naming the flag: the
    settings of what train_lib makes from the config (schedule, optimizer, evaluators)
    are checked by making it."""
    try:
        yield
    except ConfigError:
        raise
    except ValueError as e:
        raise _flag_error(e) from None
