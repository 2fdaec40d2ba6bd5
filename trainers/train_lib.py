"""The one training loop behind trainers/pretrain.py and trainers/finetune.py.

`run` is its steps: resolve the config (trainers/train_config.py) -> build the
model, optimizer and data -> restore the newest checkpoint (trainers/checkpointing.py)
-> `fit`: the host loop of trainers/controller.py over the step of
trainers/train_step.py, `steps_per_execution` updates per call, with checkpoints, logs,
evaluations (`config.evals`, trainers/evaluators.py), the profiler window, the user's
Keras callbacks and preemption (trainers/faults.py) as its actions at step boundaries
-> the final evaluations -> export into the run directory
(`keras_vit.run_directory`, which alone knows its layout).

Exact resume: the checkpoint holds every variable of the update, the random
generators' states included, and the input pipeline is a pure function of (seed,
step) (trainers/input_pipeline.py), so the resumed run sees the batches and the
dropout masks the interrupted one would have, on any number of workers or replicas
with the same global batch.
"""

import dataclasses
import json
import logging
import os
import time

import keras
import tensorflow as tf

from keras_vit import run_directory
from keras_vit.families import FAMILY_OPTIONS
from keras_vit_data import readers
from keras_vit_trainers import (
    checkpointing,
    config_checks,
    controller,
    curves,
    evaluators,
    faults,
    freeze,
    input_pipeline,
    input_spec,
    keras_callbacks,
    masked_patch,  # noqa: F401  (registers the "masked_patch" objective)
    objectives,
    optimizers,
    profiling,
    schedules,
    time_limit,
    timeline,
    train_log,
)
from keras_vit_trainers import strategy as strategy_lib
from keras_vit_trainers import train_step as train_step_lib
from keras_vit_trainers.train_log import TrainingDivergedError

log = logging.getLogger("trainers")


# --- model ------------------------------------------------------------------------


def _to_dict(value):
    return value.to_dict() if hasattr(value, "to_dict") else value


def builder_name(config):
    """config.model when it names a builder ('ViT_B16', 'DINOv2_B14_reg'), else None."""
    return config.model if isinstance(config.model, str) else None


def model_factory(config, init=None):
    """`make_model(**overrides)` for the objective.

    The model is `keras_vit.build_model(config.model, image_size=..., **model_overrides)`;
    with `init` a run directory (`open_init`), it is that run's exported model (the
    config its model_config.json records) instead, with this config's image size
    and overrides.
    """
    import keras_vit

    spec = _to_dict(config.model)
    init = open_init(init, builder_name(config))
    # None: not set (configs/common.py declares every override, unset).
    overrides = {k: v for k, v in (_to_dict(config.model_overrides) or {}).items() if v is not None}
    if isinstance(init, keras_vit.checkpoint.Source):
        if init.kind == RUN_DIRECTORY_KIND:
            spec = init.config
        else:  # a timm / transformers checkpoint: its sizes, family options, normalisation
            from_file = {**sizes_of_init(init, overrides), **options_of_init(init, overrides)}
            overrides = {**from_file, **overrides}
    overrides["image_size"] = config.image_size

    def make_model(**kwargs):
        if isinstance(spec, dict):
            return keras_vit.build_model({**spec, **overrides, **kwargs})
        return keras_vit.build_model(spec, **{**overrides, **kwargs})

    return make_model


RUN_DIRECTORY_KIND = "run directory"  # keras_vit.checkpoint.source's Kind of a run
# What a timm / transformers --init gives the model built from the config, where
# config.model_overrides does not set it: the options on which its family computes
# (keras_vit.families: LayerScale, registers, DeiT III's position embeddings, ...) and
# its input normalisation (a DINOv2 file's ImageNet mean and std).
INIT_OPTIONS = (*FAMILY_OPTIONS, "preprocessing")


def open_init(init, variant=None):
    """--init, opened once where it says what model to build: a run directory
    (`keras_vit.checkpoint.open_source` reads its model_config.json, for
    `model_factory`, and its weights when `load_init` loads them), a timm /
    transformers file, folder or Hub name, or a published name of the family builder
    `variant` (config.model: `DINOv2_B14_reg` and 'lvd142m', `keras_vit.checkpoint.
    hub_names`) (their family's options). Anything else is returned as given (opened by
    `load_init`, for the model built from the config), as are None and what this
    returned."""
    import keras_vit
    from keras_vit.checkpoint import hub_names, interop

    if not isinstance(init, (str, os.PathLike)):
        return init
    published = hub_names.lookup(variant, os.fspath(init)) if variant else None
    if published is not None:  # what the file omits (OpenAI CLIP's QuickGELU) joins its record
        opened = keras_vit.checkpoint.open_source(published.weights)
        metadata = {**opened.metadata, **dict(published.arguments)}
        return dataclasses.replace(opened, metadata=metadata)
    if run_directory.is_run(init) or interop.claims(os.fspath(init)):
        return keras_vit.checkpoint.open_source(init)
    return init


def sizes_of_init(init, overrides):
    """The sizes (`keras_vit.checkpoint.sizes.SIZE_KEYS`) the opened timm /
    transformers `init` records (its config's, else its shapes') that `overrides`
    (config.model_overrides) leave open: a family config fits a file of any size."""
    from keras_vit.checkpoint.sizes import SIZE_KEYS

    found = {**(init.metadata.get("sizes") or {}), **(init.config or {})}
    return {k: found[k] for k in SIZE_KEYS if found.get(k) is not None and k not in overrides}


def options_of_init(init, overrides):
    """`INIT_OPTIONS` that the opened timm / transformers `init` states and
    `overrides` (config.model_overrides) leave open, logged in one line."""
    options = {
        key: init.metadata[key]
        for key in INIT_OPTIONS
        if init.metadata.get(key) is not None and key not in overrides
    }
    if options:
        shown = ", ".join(f"{k}={v!r}" for k, v in sorted(options.items()))
        log.info("model options from --init: %s", shown)
    return options


def load_init(model, init):
    """Loads --init (as given, or `open_init`'s) into `model` (a task model's
    `backbone`) with `keras_vit.load_weights`: an official .npz, a registry name, a
    .keras or .weights.h5 file or a run directory; a head of another width is
    re-initialised and position embeddings are interpolated."""
    import keras_vit

    keras_vit.load_weights(getattr(model, "backbone", model), init)


def init_hint(init):
    """' (it is a ViT_Ti16: --config.model=ViT_Ti16)' when `init` is an official .npz
    of a named plain variant, for the message of a checkpoint that does not fit."""
    if not (init and str(init).endswith(".npz") and os.path.isfile(init)):
        return ""
    from keras_vit.checkpoint import npz
    from keras_vit.variants import VARIANTS

    try:
        params = npz.read_npz(init)
        kernel = params["embedding/kernel"]
        blocks = {k.split("/")[1] for k in params if k.startswith("Transformer/encoderblock_")}
        arch = dict(
            patch_size=int(kernel.shape[0]),
            hidden_size=int(kernel.shape[-1]),
            mlp_dim=int(params["Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"].shape[-1]),
            num_layers=len(blocks),
        )
    except (KeyError, ValueError, IndexError):
        return ""
    for name, spec in VARIANTS.items():
        if all(spec[k] == v for k, v in arch.items()) and "conv_root/kernel" not in params:
            return f" (that checkpoint is a {name}: give --config.model={name})"
    return ""


# --- the run's parts --------------------------------------------------------------


@dataclasses.dataclass
class Plan:
    """The run's sizes: the global batch of one update, micro-batches per update,
    updates per call of the step function, steps, the checkpoint interval, the step
    training resumes at (0: a fresh run) and the checkpoint folder; `shortened`: the
    (at, end, learning rate) a time limit recorded when it brought the schedule's end
    forward (checkpointing.shortening), None where it did not."""

    batch: int
    accum: int
    steps_per_execution: int
    total_steps: int
    every: int
    start_step: int
    checkpoint_dir: str
    shortened: tuple = None


class PlanError(ValueError):
    """A step plan that cannot be followed: sizes that do not fit together, or
    checkpoints that cannot be resumed under it."""


def plan(config, strategy, checkpoint_dir):
    """The run's Plan; the step it resumes at is the newest checkpoint's in
    `checkpoint_dir` (or config.resume_step's). PlanError for sizes that do not fit,
    checkpoints of another global batch or schedule, or of an earlier release."""
    replicas = strategy.num_replicas_in_sync
    batch, accum = int(config.batch_size), int(config.grad_accum_steps or 1)
    if accum < 1 or batch % (replicas * accum):
        raise PlanError(
            f"batch_size={batch} must be divisible by the {replicas} replicas x "
            f"grad_accum_steps={accum}"
        )
    spe, total_steps = int(config.steps_per_execution or 1), int(config.total_steps)
    every = int(config.checkpoint_every)
    if min(total_steps, every, spe) < 1:
        raise PlanError(
            f"total_steps={total_steps}, checkpoint_every={every} and "
            f"steps_per_execution={spe} must all be at least 1."
        )
    start = 0
    try:
        checkpointing.check_not_old(checkpoint_dir)
        wanted = config.get("resume_step")
        if wanted is not None:
            try:
                start, _ = checkpointing.checkpoint_path(checkpoint_dir, int(wanted))
            except checkpointing.CheckpointError as e:
                raise checkpointing.CheckpointError(f"--config.resume_step={wanted}: {e}") from e
        else:
            start = next(iter(checkpointing.saved_steps(checkpoint_dir)), 0)
        checkpointing.check_plan(
            checkpoint_dir, {"batch": batch, "total_steps": total_steps}, start
        )
        shortened = checkpointing.shortening(checkpoint_dir)
    except checkpointing.CheckpointError as e:
        raise PlanError(str(e)) from e
    start = min(start, total_steps)
    return Plan(batch, accum, spe, total_steps, every, start, checkpoint_dir, shortened)


def _set_precision(config, strategy):
    keras.mixed_precision.set_dtype_policy(
        strategy_lib.dtype_policy(strategy, config.mixed_precision)
    )


def make_schedule(config, total_steps, shortened=None):
    """The run's learning-rate schedule over `total_steps` (`schedules.WarmupDecay`):
    one whose end a time limit may bring forward under config.time_limit_anneal, and
    shortened as `shortened` (Plan.shortened: a resume of a run the limit shortened, with
    or without a limit now). Made under the strategy's scope (`make_optimizer`)."""
    schedule = schedules.WarmupDecay(
        config.learning_rate,
        total_steps,
        config.warmup_steps,
        config.decay_type,
        config.linear_end,
    )
    anneal = config.get("time_limit") is not None and config.get("time_limit_anneal")
    if anneal or shortened:
        schedule.allow_shortening()
    if shortened:
        schedule.shorten(*shortened)
    return schedule


def make_optimizer(config, strategy, total_steps, schedule=None):
    """The run's optimizer (`optimizers.make_optimizer`) on its learning-rate schedule
    (`schedule`, else `make_schedule` over `total_steps`), made once under `strategy`'s
    scope (and the precision policy set): a mistake in their settings is one
    ConfigError line naming the flag (config_checks.flag_errors)."""
    with config_checks.flag_errors(), strategy.scope():
        schedule = schedule or make_schedule(config, total_steps)
        return optimizers.make_optimizer(config, schedule)


def make_evaluators(config, context):
    """config.evals' evaluators (`evaluators.build` on `context`), made once: a mistake
    in their settings is one ConfigError line naming the flag."""
    with config_checks.flag_errors():
        return evaluators.build(config.evals, context)


def build(config, strategy, objective, num_classes, plan, init, jit_compile, optimizer):
    """The task model, initialised from `init` on a fresh run, compiled (for its
    evaluations: the objective's loss and metrics, `jit_compile`) with the run's
    `optimizer` (`make_optimizer`) as `model.optimizer`; `jit_compile`:
    config.jit_compile resolved (config_checks.jit_compile)."""
    init = open_init(init, builder_name(config))
    make_model = model_factory(config, init)
    with strategy.scope():
        model = objective.build_model(make_model, config, num_classes)
        if init and not plan.start_step:
            log.info("initialising from %s", init)
            load_init(model, init)
        freeze.apply(model, config.freeze)
        model.compile(
            optimizer=optimizer,
            loss=objective.loss(config),
            # Weighted: Keras applies sample weights to `weighted_metrics` only, and the
            # evaluation batches pad each split with weight-0 rows (input_pipeline).
            weighted_metrics=objective.metrics(config),
            jit_compile=jit_compile,
        )
    return model


def open_data(config, data_dir):
    """The run's dataset (`keras_vit_data.readers.open_reader`): --data_dir, or what
    config.input.dataset names (tfds:NAME, imagenet_records), logged in one line."""
    inp = config.input
    reader = readers.open_reader(
        data_dir,
        inp.get("dataset"),
        tfds_data_dir=inp.get("tfds_data_dir"),
        num_classes=config.get("num_classes"),
        label_offset=inp.get("label_offset"),
    )
    log.info("data: %s, %d classes", reader.description, reader.num_classes)
    return reader


def train_data(strategy, data, spec, plan, model_dir=None, start_step=None):
    """The run's distributed training stream: `spec`'s, from `start_step` (default
    plan.start_step; through spec.data_service: the tf.data service job of model_dir,
    seed and step)."""
    start_step = plan.start_step if start_step is None else start_step
    job_name = input_pipeline.service_job_name(model_dir, spec.seed, start_step)
    return input_pipeline.distributed_train_dataset(
        strategy, data, spec, plan.batch, start_step=start_step, job_name=job_name
    )


def fit(model, config, strategy, make_data, plan, run, chief, evals, callbacks=(), schedule=None):
    """Trains `model` (as `build` made it) from plan.start_step to plan.total_steps on
    the stream `make_data(first step)`: the controller (trainers/controller.py) with
    the run's actions, in the order they act at a boundary: checkpoint (saved before
    anything is logged), log, progress bar, the user's Keras callbacks (`callbacks`,
    then config.callbacks'), evaluations, the profiler window, the time limit (it saves
    the step and ends training; with `schedule`, the optimizer's, made by `make_schedule`
    under config.time_limit_anneal, it may first bring the schedule's end forward),
    preemption (last: it saves the step and stops). Raises
    TrainingDivergedError on NaN and faults.Preempted after a SIGTERM. Returns the
    RunLogger (train figures)."""
    optimizer = model.optimizer
    objective = objectives.get(config.objective)
    step_fn = train_step_lib.TrainStep(
        model,
        optimizer,
        objective.loss(config),
        objective.train_metrics(config),
        strategy,
        accum=plan.accum,
        clip_norm=config.grad_clip_norm,
        jit_compile=model.jit_compile,
    )
    step_fn.build()
    checkpoints = checkpointing.CheckpointAction(
        checkpointing.RunCheckpoints(
            plan.checkpoint_dir,
            checkpointing.training_state(model, optimizer),
            chief=chief,
            keep=config.get("checkpoint_keep", 3),
            keep_every=config.get("checkpoint_keep_every", 0),
            async_save=bool(config.get("checkpoint_async", False)),
        ),
        plan.every,
        plan.total_steps,
    )
    try:
        step = checkpoints.restore(plan.start_step)
    except checkpointing.CheckpointError as e:  # another model's checkpoints
        raise PlanError(str(e)) from e
    if step_fn.step() != step:
        raise PlanError(
            f"{plan.checkpoint_dir}: the checkpoint of step {step} holds optimizer step "
            f"{step_fn.step()}; train into a new --model_dir."
        )
    logger = train_log.RunLogger(
        plan.every, plan.batch, plan.total_steps, run if chief else None, config.log_every
    )
    preemption = faults.PreemptionHandler(strategy, checkpoints.save_now, plan.checkpoint_dir)
    user = keras.callbacks.CallbackList(
        [*callbacks, *(make() for make in config_checks.user_callbacks(config))], model=model
    )
    profile = tuple(config.get("profile_steps") or ())
    end = plan.shortened[1] if plan.shortened else plan.total_steps
    shorten = None
    if schedule is not None and schedule.shortenable and not plan.shortened:

        def shorten(at, end):
            learning_rate = schedule.shorten(at, end)
            if chief:  # before the next step trains: a resume follows the same schedule
                checkpointing.record_shortening(plan.checkpoint_dir, at, end, learning_rate)

    deadline = config.get("time_limit")
    limit = deadline and time_limit.TimeLimit(
        deadline,
        checkpoints.save_now,
        plan.total_steps,
        config.get("time_limit_reserve_steps", 0),
        shorten=shorten,
        end_step=end,
    )
    end_step = (lambda: limit.end_step) if limit else None  # the progress bar's total
    actions = [
        checkpoints,
        logger,
        *([train_log.TrainingProgress(logger, end, plan.batch, end_step)] if chief else []),
        keras_callbacks.KerasCallbacks(user, logger, plan.every, plan.total_steps),
        *(
            evaluators.EvaluationAction(e, model, run, chief, preemption.evaluation_should_stop)
            for e in evals
            if e.every > 0
        ),
        *(
            [profiling.ProfileWindow(*profile, run.tensorboard("train"))]
            if chief and profile
            else []
        ),
        *([limit] if limit else []),
        preemption,
    ]
    iterator = iter(make_data(step))

    def read_figures():
        extra = {
            "learning_rate": float(keras.ops.convert_to_numpy(optimizer.learning_rate)),
            "gradient_norm": float(step_fn.gradient_norm.numpy()),
        }
        return step_fn.read_sums(), extra

    host_loop = controller.Controller(
        lambda n: step_fn.run(iterator, n),
        read_figures,
        end,
        plan.steps_per_execution,
        actions,
        should_stop=lambda: model.stop_training or bool(limit and limit.reached),
    )
    try:
        with preemption:
            host_loop.train(step)
    except controller.Diverged as e:
        where = f"at step {e.last}" if e.first == e.last else f"in steps {e.first}-{e.last}"
        raise TrainingDivergedError(
            f"loss became NaN/inf {where}; training stopped. The last good checkpoint "
            f"(step {checkpoints.last_good}) is kept in {plan.checkpoint_dir}; lower the "
            f"learning rate (now {config.learning_rate}) or check the data, then rerun to "
            "resume from it."
        ) from None
    if uses_ema(optimizer):  # evaluate and export the Polyak-averaged weights
        with strategy.scope():
            optimizer.finalize_variable_values(model.trainable_variables)
    return logger


def uses_ema(optimizer):
    """Whether `optimizer` keeps a moving average of the weights. A Keras
    LossScaleOptimizer's own `use_ema` is always False; the wrapped optimizer's is the
    one that counts."""
    return bool(getattr(getattr(optimizer, "inner_optimizer", optimizer), "use_ema", False))


def final_evaluations(model, evals, step, run, chief):
    """Every evaluator once on the final weights: {'<name>_<metric>': value}. An
    evaluator that ran at this very step on these weights (no EMA) is not rerun."""
    figures = {}
    for evaluator in evals:
        if step in evaluator.history and not uses_ema(model.optimizer):
            scalars = evaluator.scalars[step]
        else:
            scalars = evaluators.evaluate(evaluator, model, step, run, chief)
        figures.update({f"{evaluator.name}_{k}": v for k, v in scalars.items()})
    return figures


def run(config, *, data_dir, model_dir, strategy, mode="pretrain", init=None, callbacks=()):
    """Trains, evaluates and exports; returns the metrics dict (also RUN/metrics.json).
    `config`: as trainers/train_config.resolve returns it. `callbacks`: Keras callbacks
    of your own, run after the trainer's (and config.callbacks' after them)."""
    t_start = time.perf_counter()
    run = run_directory.RunDirectory(model_dir)
    reader = open_data(config, data_dir)  # a clear error for a bad --data_dir or dataset
    num_classes = config.num_classes or reader.num_classes
    train_info = reader.split(
        config.train_split, bool(config.input.strict), config.input.verify_max_bytes
    )
    chief = strategy_lib.is_chief(strategy)
    checkpoint_dir = run.checkpoints()  # one copy per job: the chief's
    run_directory.makedirs(checkpoint_dir)
    sizes = plan(config, strategy, checkpoint_dir)
    objective = objectives.get(config.objective)  # config_checks.check_values accepted it
    jit_compile = config_checks.check(config, strategy, objective)

    keras.utils.set_random_seed(int(config.seed))
    if config.deterministic_ops:
        tf.config.experimental.enable_op_determinism()
    _set_precision(config, strategy)
    with config_checks.flag_errors(), strategy.scope():
        schedule = make_schedule(config, sizes.total_steps, sizes.shortened)
    optimizer = make_optimizer(config, strategy, sizes.total_steps, schedule)
    model = build(config, strategy, objective, num_classes, sizes, init, jit_compile, optimizer)
    spec = input_spec.InputSpec.from_config(
        config,
        num_classes,
        reader.multi_label,
        objective,
        preprocessing=getattr(getattr(model, "backbone", model), "preprocessing", None),
    )
    context = evaluators.Context(reader, spec, objective, strategy, sizes.batch, config)
    evals = make_evaluators(config, context)
    # Everything made and checked: only now is the run's directory written.
    if sizes.start_step:
        log.info("resumed from step %d", sizes.start_step)
        if chief:
            timeline.cut_after(run, sizes.start_step)
    if chief:
        run.write_json(run.config, json.loads(config.to_json_best_effort()))
        if reader.class_names:  # the exports' class names (tools/export_savedmodel.py)
            run.write_json(run.class_names, {"class_names": list(reader.class_names)})
        run.write_data(data_dir, config.input.get("dataset"), config.input.get("tfds_data_dir"))

    def make_data(start_step):
        return train_data(strategy, reader, spec, sizes, model_dir, start_step)

    logger = fit(model, config, strategy, make_data, sizes, run, chief, evals, callbacks, schedule)

    step = int(model.optimizer.iterations.numpy())
    metrics = {"step": step, **final_evaluations(model, evals, step, run, chief)}
    metrics.update(
        train_images_per_second=logger.images_per_second(),
        train_loss=logger.last_logs.get("loss"),
        train_accuracy=logger.last_logs.get("accuracy"),
        resumed_from_step=sizes.start_step,
        total_steps=sizes.total_steps,
        global_batch_size=sizes.batch,
        grad_accum_steps=sizes.accum,
        num_replicas=strategy.num_replicas_in_sync,
        strategy=type(strategy).__name__,
        jit_compile=jit_compile,  # what config.jit_compile resolved to (XLA or not)
        skipped_records=train_info.skipped_records,
        corrupt_shards=list(train_info.corrupt_files),
        evals={e.name: {"type": e.type, "history": e.history} for e in evals},
        wall_seconds=time.perf_counter() - t_start,
        mode=mode,
    )
    if chief:
        with tf.device("/cpu:0"):
            run.write_model(model)
        metrics["learning_curve"] = _learning_curve(run, evals, objective, metrics)
        run.write_json(run.metrics, metrics)
    for evaluator in evals:
        for k, v in sorted(evaluator.scalars.get(step, {}).items()):
            log.info("%s %s: %.4f", evaluator.name, k, v)
    return metrics


def _learning_curve(run, evals, objective, metrics):
    """RUN/learning_curve.png from the train log and the results of the first
    classification evaluator that ran periodically (validation, where the data has it),
    else the first one (None without one)."""
    classifiers = [e for e in evals if isinstance(e, evaluators.Classification)]
    first = next((e for e in classifiers if e.every > 0), classifiers[0] if classifiers else None)
    name = first.name if first else None
    return curves.write_learning_curve(
        run,
        name,
        final=(metrics["step"], metrics.get(f"{name}_{objective.metric_name}")),
        metric=objective.metric_name,
        split=first.split if first else None,
    )


def export(model, model_dir):
    """The run's exported model (`keras_vit.run_directory.RunDirectory.write_model`)."""
    with tf.device("/cpu:0"):
        run_directory.RunDirectory(model_dir).write_model(model)


__all__ = ["TrainingDivergedError", "export", "load_init", "model_factory", "run"]
