"""The one training loop behind trainers/pretrain.py and trainers/finetune.py.

`keras.Model.fit` on a tf.distribute strategy, with callbacks for the run
directory. Layout of RUN (--model_dir):

  RUN/config.json              the run's full ml_collections config
  RUN/checkpoints/             latest.weights.h5 (model + optimizer + EMA state) and
                               training_metadata.json, written every
                               `checkpoint_every` steps; a rerun resumes from them
  RUN/tensorboard/             loss, accuracy, learning_rate, images_per_second
                               (train, every checkpoint interval) and eval metrics
  RUN/train_log.jsonl          one JSON line per checkpoint interval (step, loss, ...)
  RUN/eval_log.jsonl           eval metrics every `eval_every` steps (when > 0)
  RUN/learning_curve.png       train loss and eval accuracy against step
  RUN/metrics.json             step, test_accuracy|eval_accuracy, eval_loss,
                               train_images_per_second, train_loss, wall_seconds, ...
  RUN/model.weights.h5         final model weights (EMA weights when EMA is on);
                               no optimizer state
  RUN/model_config.json        the model's get_config():
                               keras_vit.VisionTransformer(**json.load(f)) rebuilds it

Exact resume: one Keras "epoch" is one checkpoint interval, so BackupAndRestore's
epoch-granular restore lands on the checkpointed step, and the input pipeline is a
pure function of (seed, step) (trainers/input_pipeline.py), so the resumed run
sees the batches the interrupted one would have.
"""

import json
import logging
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf

from trainers import (
    console,
    curves,
    fewshot_callback,
    input_pipeline,
    keras_workarounds,
    masked_patch,  # noqa: F401  (registers the "masked_patch" objective)
    objectives,
    optimizers,
    schedules,
)
from trainers import strategy as strategy_lib
from trainers.summaries import write_scalar

log = logging.getLogger("trainers")

CHECKPOINT_DIR = "checkpoints"
EVAL_LOG = "eval_log.jsonl"
LEARNING_CURVE = "learning_curve.png"
WEIGHTS_FILE = "model.weights.h5"
MODEL_CONFIG_FILE = "model_config.json"


class TrainingDivergedError(RuntimeError):
    """The loss became NaN/inf; training stopped with the last good checkpoint kept."""


# --- callbacks ------------------------------------------------------------------


class PeriodicEval(keras.callbacks.Callback):
    """Evaluates every `eval_every` steps (at checkpoint-interval ends; the current
    weights, not the EMA's) and appends {step, <split> metrics} to RUN/eval_log.jsonl,
    for the learning curve."""

    def __init__(self, eval_ds, steps_per_epoch, eval_every, metric_name, log_path=None):
        super().__init__()
        self.eval_ds, self.steps_per_epoch = eval_ds, int(steps_per_epoch)
        self.eval_every, self.metric_name, self.log_path = int(eval_every), metric_name, log_path

    def on_epoch_end(self, epoch, logs=None):
        step = (epoch + 1) * self.steps_per_epoch
        if step % self.eval_every:
            return
        results = self.model.evaluate(self.eval_ds, return_dict=True, verbose=0)
        record = {"step": step, **{k: float(v) for k, v in results.items()}}
        log.debug("step %d eval %s: %.4f", step, self.metric_name, record[self.metric_name])
        if self.log_path:
            with tf.io.gfile.GFile(self.log_path, "a") as f:
                f.write(json.dumps(record) + "\n")


class NanGuard(keras.callbacks.Callback):
    """Stops training at the first non-finite loss and remembers the step."""

    def __init__(self, steps_per_epoch):
        super().__init__()
        self.steps_per_epoch = steps_per_epoch
        self.bad_step = None
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)) and self.bad_step is None:
            self.bad_step = self._epoch * self.steps_per_epoch + batch + 1
            self.model.stop_training = True


class RunCheckpoint(keras.callbacks.BackupAndRestore):
    """BackupAndRestore that keeps its files and never overwrites a good checkpoint
    with a diverged (NaN) state."""

    def __init__(self, backup_dir, nan_guard):
        super().__init__(
            backup_dir, save_freq="epoch", double_checkpoint=True, delete_checkpoint=False
        )
        self.nan_guard = nan_guard

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("loss")
        if self.nan_guard.bad_step is not None or (loss is not None and not math.isfinite(loss)):
            return
        super().on_epoch_end(epoch, logs)

    @staticmethod
    def saved_epoch(backup_dir):
        path = os.path.join(backup_dir, "training_metadata.json")
        if not tf.io.gfile.exists(path):
            return 0
        with tf.io.gfile.GFile(path) as f:
            return int(json.load(f)["epoch"])


class RunLogger(keras.callbacks.Callback):
    """One log line and TensorBoard scalars per checkpoint interval; images/s."""

    def __init__(self, steps_per_epoch, global_batch, total_steps, summary_dir=None, log_path=None):
        super().__init__()
        self.log_path = log_path
        self.steps_per_epoch = steps_per_epoch
        self.global_batch = global_batch
        self.total_steps = total_steps
        self.writer = tf.summary.create_file_writer(summary_dir) if summary_dir else None
        self.rates = []
        self.last_logs = {}

    def on_epoch_begin(self, epoch, logs=None):
        self._t0 = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._t0
        rate = self.steps_per_epoch * self.global_batch / seconds
        self.rates.append(rate)
        logs = dict(logs or {})
        step = (epoch + 1) * self.steps_per_epoch
        lr = self.model.optimizer.learning_rate
        lr = float(lr.numpy() if hasattr(lr, "numpy") else lr)
        self.last_logs = {**logs, "step": step}
        log.debug(
            "step %d/%d: loss %.4f, accuracy %.4f, lr %.3g, %.0f images/s",
            step,
            self.total_steps,
            logs.get("loss", float("nan")),
            logs.get("accuracy", float("nan")),
            lr,
            rate,
        )
        if self.log_path:
            with tf.io.gfile.GFile(self.log_path, "a") as f:
                f.write(
                    json.dumps(
                        {
                            "step": step,
                            **{k: float(v) for k, v in logs.items()},
                            "learning_rate": lr,
                            "images_per_second": rate,
                        }
                    )
                    + "\n"
                )
        if self.writer:
            with self.writer.as_default(step=step):
                for k, v in logs.items():
                    write_scalar(f"train/{k}", v, step)
                write_scalar("train/learning_rate", lr, step)
                write_scalar("train/images_per_second", rate, step)
            self.writer.flush()

    def images_per_second(self):
        """Median over intervals, leaving out the first (tracing/compilation) when possible."""
        rates = self.rates[1:] or self.rates
        return float(np.median(rates)) if rates else None


class TrainingProgress(keras.callbacks.Callback):
    """The live progress bar of `fit` (trainers/console.py): steps of `total_steps`,
    loss, accuracy, images/s and ETA; one plain line every 30 s without a terminal.
    Counts steps itself and reads the logs at most twice a second, so it adds no
    device synchronisation of its own."""

    def __init__(
        self, total_steps, global_batch, initial_step=0, steps_per_execution=1, refresh_seconds=0.5
    ):
        super().__init__()
        self.total_steps, self.global_batch = int(total_steps), int(global_batch)
        self.initial_step, self.spe = int(initial_step), int(steps_per_execution)
        self.refresh_seconds = float(refresh_seconds)
        self.bar = None

    def on_train_begin(self, logs=None):
        self.bar = console.Progress(
            self.total_steps,
            "training",
            unit="step",
            initial=self.initial_step,
            scale=self.global_batch,
            scale_unit="image",
        )
        self._step, self._shown, self._last = self.initial_step, self.initial_step, 0.0

    def on_train_batch_end(self, batch, logs=None):
        self._step = min(self._step + self.spe, self.total_steps)
        now = time.perf_counter()
        if now - self._last >= self.refresh_seconds or self._step == self.total_steps:
            self._last = now
            shown = {k: float(logs[k]) for k in ("loss", "accuracy") if logs and k in logs}
            self.bar.update(self._step - self._shown, **shown)
            self._shown = self._step

    def on_train_end(self, logs=None):
        if self.bar is not None:
            self.bar.close()


# --- model ------------------------------------------------------------------------


def _to_dict(value):
    return value.to_dict() if hasattr(value, "to_dict") else value


def _run_model_config(path):
    """(model_config dict, weights path) if `path` is a trainers RUN directory."""
    cfg = os.path.join(path, MODEL_CONFIG_FILE)
    weights = os.path.join(path, WEIGHTS_FILE)
    if tf.io.gfile.isdir(path) and tf.io.gfile.exists(cfg):
        if not tf.io.gfile.exists(weights):
            raise FileNotFoundError(
                f"--init={path}: {MODEL_CONFIG_FILE} but no {WEIGHTS_FILE}; did that run finish?"
            )
        with tf.io.gfile.GFile(cfg) as f:
            return json.load(f), weights
    return None, None


def model_factory(config, init=None):
    """`make_model(**overrides)` for the objective, and the weights to load (or None).

    The model is `keras_vit.build_model(config.model, image_size=..., **model_overrides)`;
    with `init` a RUN directory, the model is that run's model_config.json instead,
    with this config's image size / head / overrides.
    """
    import keras_vit

    spec = _to_dict(config.model)
    weights = init
    if init:
        run_config, run_weights = _run_model_config(init)
        if run_config is not None:
            spec, weights = run_config, run_weights
    overrides = dict(_to_dict(config.get("model_overrides")) or {})
    overrides["image_size"] = config.image_size

    def make_model(**kwargs):
        if isinstance(spec, dict):
            return keras_vit.build_model({**spec, **overrides, **kwargs})
        return keras_vit.build_model(spec, **{**overrides, **kwargs})

    return make_model, weights


def load_init(model, init, weights):
    """Loads --init into `model`: a RUN directory via its own model (rebuilt from
    model_config.json) and keras_vit's official-name transfer, which re-initialises a
    head of another width and interpolates position embeddings; anything else
    (registry name, .npz, .keras, .weights.h5) through keras_vit.load_weights."""
    import keras_vit
    from keras_vit import checkpoint

    run_config, _ = _run_model_config(init)
    if run_config is None:
        keras_vit.load_weights(model, weights)
        return
    with tf.device("/cpu:0"):
        source = keras_vit.build_model(run_config)
        source.load_weights(weights)
    checkpoint.assign_params(
        model, checkpoint.model_params(source), origin=weights, grid_size=tuple(source.grid_size)
    )


# --- the run ----------------------------------------------------------------------


def _checkpoint_interval(total_steps, checkpoint_every, steps_per_execution):
    """The largest divisor of total_steps that is <= checkpoint_every and a multiple
    of steps_per_execution (one Keras epoch per checkpoint)."""
    for every in range(min(checkpoint_every, total_steps), 0, -1):
        if total_steps % every == 0 and every % steps_per_execution == 0:
            return every
    raise ValueError(
        f"total_steps={total_steps} has no divisor that is a multiple of "
        f"steps_per_execution={steps_per_execution}"
    )


def _set_precision(config, strategy):
    if not config.get("mixed_precision"):
        return
    on_gpu = bool(tf.config.list_logical_devices("GPU")) and not isinstance(
        strategy, tf.distribute.TPUStrategy
    )
    keras.mixed_precision.set_dtype_policy("mixed_float16" if on_gpu else "mixed_bfloat16")


def _write_json(path, obj):
    with tf.io.gfile.GFile(path, "w") as f:
        json.dump(obj, f, indent=1, default=str)


def run(config, *, data_dir, model_dir, strategy, mode="pretrain", init=None):
    """Trains, evaluates and exports; returns the metrics dict (also RUN/metrics.json)."""
    t_start = time.perf_counter()
    if not model_dir:
        raise ValueError("--model_dir is required")
    manifest = input_pipeline.read_manifest(data_dir)  # clear error for a bad --data_dir
    num_classes = config.get("num_classes") or int(manifest["num_classes"])
    multi_label = bool(manifest.get("multi_label", False))
    input_cfg = _to_dict(config.get("input")) or {}
    strict = bool(input_cfg.get("strict", False))
    verify = int(input_cfg.get("verify_max_bytes", 4 << 30))
    train_info = input_pipeline.get_split(
        data_dir, config.get("train_split", "train"), strict, verify
    )
    chief = strategy_lib.is_chief(strategy)
    replicas = strategy.num_replicas_in_sync
    batch = int(config.batch_size)  # the global batch of one update
    accum = int(config.get("grad_accum_steps") or 1)  # micro-batches per update
    if accum < 1 or batch % (replicas * accum):
        raise ValueError(
            f"batch_size={batch} must be divisible by the {replicas} replicas x "
            f"grad_accum_steps={accum}"
        )
    spe = int(config.get("steps_per_execution") or 1)
    total_steps = int(config.total_steps)
    every = _checkpoint_interval(total_steps, int(config.checkpoint_every), spe)
    if every != config.checkpoint_every:
        log.warning(
            "checkpoint_every=%d does not divide total_steps=%d: checkpointing every %d steps",
            config.checkpoint_every,
            total_steps,
            every,
        )
    epochs = total_steps // every

    ckpt_dir = os.path.join(model_dir, CHECKPOINT_DIR)
    if not chief:  # other workers keep their (identical) state apart from the chief's
        ckpt_dir = os.path.join(
            model_dir, "workers", f"worker_{strategy_lib.worker_index(strategy)}"
        )
    tf.io.gfile.makedirs(ckpt_dir)
    start_epoch = min(RunCheckpoint.saved_epoch(ckpt_dir), epochs)
    start_step = start_epoch * every
    if start_step:
        log.info("resumed from step %d", start_step)
    if chief:
        _write_json(
            os.path.join(model_dir, "config.json"), json.loads(config.to_json_best_effort())
        )

    keras.utils.set_random_seed(int(config.get("seed", 0)))
    if config.get("deterministic_ops"):
        tf.config.experimental.enable_op_determinism()
    _set_precision(config, strategy)
    objective = objectives.get(config.get("objective", "classification"))
    make_model, init_weights = model_factory(config, init)
    with strategy.scope():
        model = objective.build_model(make_model, config, num_classes)
        if init_weights and not start_step:
            log.info("initialising from %s", init)
            load_init(model, init, init_weights)
        lr = schedules.WarmupDecay(
            config.learning_rate,
            total_steps,
            config.warmup_steps,
            config.get("decay_type", "cosine"),
            config.get("linear_end", 1e-5),
        )
        optimizer = optimizers.make_optimizer(config, lr)
        model.compile(
            optimizer=optimizer,
            loss=objective.loss(config),
            metrics=objective.metrics(config),
            steps_per_execution=spe,
            jit_compile=config.get("jit_compile", False),
        )
        keras_workarounds.accumulate_gradients(model, accum)

    batch_fn = objective.map_batch(config, num_classes)
    common = dict(
        image_size=config.image_size,
        strict=strict,
        num_classes=num_classes,
        multi_label=multi_label,
        verify_max_bytes=verify,
        batch_fn=batch_fn,
    )
    train_ds = input_pipeline.distributed_train_dataset(
        strategy,
        data_dir,
        batch,
        seed=int(config.get("seed", 0)),
        start_step=start_step,
        split=config.get("train_split", "train"),
        augment=input_cfg.get("augment", "inception_crop"),
        area_range=tuple(input_cfg.get("area_range", (0.05, 1.0))),
        flip=input_cfg.get("flip", True),
        shuffle_buffer=input_cfg.get("shuffle_buffer", 50_000),
        shard_by=input_cfg.get("shard_by", "examples"),
        augmentation=input_cfg,  # RandAugment / Mixup / CutMix (trainers/augment.py)
        max_examples=int(config.get("train_examples") or 0),
        **common,
    )

    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        _prebuild_for_multi_worker(model, strategy, data_dir, config, common, input_cfg)

    eval_split = config.get("eval_split", "test")
    eval_ds = None
    if eval_split and eval_split in manifest.get("splits", {}):
        eval_info = input_pipeline.get_split(data_dir, eval_split, strict, verify)
        eval_batch = min(
            int(config.get("eval_batch_size") or batch),
            -(-eval_info.num_examples // replicas) * replicas,
        )
        eval_batch = max(eval_batch - eval_batch % replicas, replicas)
        eval_ds = input_pipeline.eval_dataset(
            data_dir,
            batch_size=eval_batch,
            split=eval_split,
            drop_remainder=isinstance(strategy, tf.distribute.TPUStrategy),
            info=eval_info,
            **common,
        )
    eval_every = int(config.get("eval_every") or 0)
    periodic = (
        PeriodicEval(
            eval_ds,
            every,
            eval_every,
            objective.metric_name,
            os.path.join(model_dir, EVAL_LOG) if chief else None,
        )
        if eval_ds is not None and eval_every
        else None
    )

    guard = NanGuard(every)
    checkpoint = RunCheckpoint(ckpt_dir, guard)
    logger = RunLogger(
        every,
        batch,
        total_steps,
        os.path.join(model_dir, "tensorboard", "train") if chief else None,
        os.path.join(model_dir, "train_log.jsonl") if chief else None,
    )
    fewshot = fewshot_callback.from_config(
        config,
        data_dir,
        num_classes=num_classes,
        summary_dir=os.path.join(model_dir, "tensorboard", "fewshot") if chief else None,
    )
    model.fit(
        train_ds,
        epochs=epochs,
        initial_epoch=start_epoch,
        steps_per_epoch=every,
        callbacks=[guard, checkpoint]
        + ([fewshot] if fewshot else [])
        + [logger]
        + ([periodic] if periodic else [])
        + ([TrainingProgress(total_steps, batch, start_step, spe)] if chief else []),
        verbose=0,
    )
    if guard.bad_step is not None:
        last = RunCheckpoint.saved_epoch(ckpt_dir) * every
        raise TrainingDivergedError(
            f"loss became NaN/inf at step {guard.bad_step}; training stopped. The last good "
            f"checkpoint (step {last}) is kept in {ckpt_dir}; lower the learning rate "
            f"(now {config.learning_rate}) or check the data, then rerun to resume from it."
        )

    if optimizer.use_ema:  # evaluate and export the Polyak-averaged weights
        with strategy.scope():
            optimizer.finalize_variable_values(model.trainable_variables)
    results = {}
    if eval_ds is not None:
        results = model.evaluate(eval_ds, return_dict=True, verbose=0)
    key = "test_accuracy" if eval_split == "test" else "eval_accuracy"
    metrics = {
        "step": int(model.optimizer.iterations.numpy()),
        key: float(results[objective.metric_name]) if results else None,
        "eval_loss": float(results["cross_entropy"]) if results else None,
        "eval_split": eval_split if results else None,
        "train_images_per_second": logger.images_per_second(),
        "train_loss": logger.last_logs.get("loss"),
        "train_accuracy": logger.last_logs.get("accuracy"),
        "resumed_from_step": start_step,
        "total_steps": total_steps,
        "global_batch_size": batch,
        "grad_accum_steps": accum,
        "num_replicas": replicas,
        "strategy": type(strategy).__name__,
        "skipped_records": train_info.skipped_records,
        "corrupt_shards": list(train_info.corrupt_files),
        "wall_seconds": time.perf_counter() - t_start,
        "mode": mode,
    }
    if fewshot is not None and fewshot.history:
        metrics["fewshot"] = fewshot.history
    if chief:
        export(model, model_dir)
        metrics["learning_curve"] = curves.write_learning_curve(
            os.path.join(model_dir, "train_log.jsonl"),
            os.path.join(model_dir, EVAL_LOG),
            os.path.join(model_dir, LEARNING_CURVE),
            final=(metrics["step"], metrics.get(key)),
            metric=objective.metric_name,
            split=eval_split,
        )
        _write_json(os.path.join(model_dir, "metrics.json"), metrics)
        if results:
            with tf.summary.create_file_writer(
                os.path.join(model_dir, "tensorboard", "eval")
            ).as_default():
                for k, v in results.items():
                    write_scalar(f"{eval_split}/{k}", v, metrics["step"])
    if results:
        log.info("%s %s: %.4f", eval_split, objective.metric_name, metrics[key])
    return metrics


def _prebuild_for_multi_worker(model, strategy, data_dir, config, common, input_cfg):
    """Works around Keras 3.15 `fit` under MultiWorkerMirroredStrategy: its
    `_maybe_symbolic_build` calls `strategy.reduce` on the whole (x, y) batch
    structure, which the collective strategy cannot convert ("Attempt to convert a
    value (PerReplica...)"). Build loss/metrics/optimizer from one local batch
    instead and skip that step."""
    local = input_pipeline.train_dataset(
        data_dir,
        batch_size=2,
        split=config.get("train_split", "train"),
        shuffle_buffer=1,
        augment=input_cfg.get("augment", "inception_crop"),
        prefetch=False,
        **common,
    )
    batch = next(iter(local.take(1)))
    with strategy.scope():
        model._symbolic_build(data_batch=batch)
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
    # Same Keras version: `reduce_per_replica` reduces scalar logs with
    # strategy.reduce(MEAN, v, axis=0) under the collective strategy ("Invalid
    # reduction dimension 0 for input with 0 dimensions"); reduce them with axis=None.
    from keras.src.backend.tensorflow import trainer as tf_trainer

    if not getattr(tf_trainer.reduce_per_replica, "_keras_vit_patched", False):
        original = tf_trainer.reduce_per_replica

        def reduce_per_replica(values, strategy, reduction):
            if reduction in ("auto", "mean") and tf_trainer._collective_all_reduce_multi_worker(
                strategy
            ):
                return tf.nest.map_structure(
                    lambda v: strategy.reduce("MEAN", v, axis=None), values
                )
            return original(values, strategy, reduction)

        reduce_per_replica._keras_vit_patched = True
        tf_trainer.reduce_per_replica = reduce_per_replica


def export(model, model_dir):
    """RUN/model.weights.h5 (weights only, no optimizer) + RUN/model_config.json.
    A task model with a `backbone` (e.g. masked patch prediction) exports the backbone."""
    model = getattr(model, "backbone", model)
    config = model.get_config()
    with tf.device("/cpu:0"):
        clean = model.__class__.from_config(config)
        clean.set_weights([np.asarray(w) for w in model.get_weights()])
    clean.save_weights(os.path.join(model_dir, WEIGHTS_FILE))
    _write_json(os.path.join(model_dir, MODEL_CONFIG_FILE), config)
