"""Workarounds of Keras behaviours the trainers need, fenced in one place.

Each one names the Keras behaviour it answers and has a test that fails when it stops
working and one that fails when Keras no longer needs it (tests/test_keras_workarounds.py,
tests/test_grad_accum.py). They use Keras internals, so they are written against the
Keras versions in TESTED_KERAS; `check_keras_version` warns on any other (and fails in
CI, where CI=true). The library has one more, kept in the library because keras_vit
does not import the trainers: `VisionTransformer._resolve_auto_jit_compile` (its mixin
`AutoJitCompile`, keras_vit/compilation.py).

1. `ClipAfterAllReduce` (trainers/optimizers.py): Keras 3 clips in `Optimizer.apply`
   before the TF backend all-reduces gradients across replicas, so `global_clipnorm`
   clips each replica's partial gradient and a 2-replica run differs from a 1-device
   run on the same global batch. The mixin clips in `_all_reduce_sum_gradients`, after
   the all-reduce: the official semantics (the gradient of the global-batch loss).
2. `prepare_multi_worker_fit`: Keras 3.15's `fit` under MultiWorkerMirroredStrategy
   fails twice; see its docstring.
3. `accumulate_gradients`: below.

Gradient accumulation (`config.grad_accum_steps=N`). Keras has its own
(`Optimizer(gradient_accumulation_steps=N)`), but it does not give the semantics the
trainers need (Keras 3.15):
  - under a tf.distribute strategy it fails: the update runs inside `ops.cond(is_update_step,
    ...)`, and the update's cross-replica merge_call cannot run inside a cond ("`merge_call`
    called while defining a new graph or a tf.function ... control flow statement which
    contains a synchronization point"), so MirroredStrategy, multi-worker and TPU runs break;
  - it counts micro-batches as steps for the learning-rate schedule and updates the EMA after
    every micro-batch, and it needs the input pipeline to deliver micro-batches.
Here instead each `fit` step takes the whole global batch of one update, splits each
replica's share into N micro-batches inside the step, computes their gradients one after
another (a `tf.while_loop` with `parallel_iterations=1`, so one micro-batch's activations are
alive at a time), and applies their mean once. Steps, schedule, EMA, checkpoints and resume
points are then updates with no further change, under every strategy, and the update equals
the big batch's (the mean of N micro-batch means is the batch mean). Global-norm clipping
(trainers/optimizers.py) acts on that mean, after the all-reduce.
"""

import os
import warnings

import keras
import tensorflow as tf

TESTED_KERAS = ("3.15",)  # major.minor versions these workarounds were written against


def check_keras_version(version=None, strict=None):
    """Warns when Keras is not a tested version; raises with `strict` (default: in CI,
    the environment's CI=true)."""
    if strict is None:
        strict = os.environ.get("CI", "").lower() == "true"
    version = version or keras.__version__
    if ".".join(version.split(".")[:2]) not in TESTED_KERAS:
        message = (
            f"trainers/keras_workarounds.py was tested with Keras {TESTED_KERAS}, "
            f"not {version}: check its workarounds still apply"
        )
        if strict:
            raise RuntimeError(message)
        warnings.warn(message, stacklevel=2)


def _split(steps):
    def split(t):
        if t is None:
            return None
        shape = tf.shape(t)
        return tf.reshape(t, tf.concat([[steps, shape[0] // steps], shape[1:]], 0))

    return split


def accumulate_gradients(model, steps):
    """Makes each training step of the compiled `model` average the gradients of `steps`
    micro-batches of its batch before one optimizer update (module docstring). Each
    replica's batch must be divisible by `steps`. No-op for steps <= 1."""
    steps = int(steps)
    if steps <= 1:
        return
    check_keras_version()
    # Keras internals used below, as Keras' own TensorFlow train_step uses them.
    from keras.src.losses import loss as loss_module

    def train_step(data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        first = next(t for t in tf.nest.flatten(x) if t is not None)
        if first.shape[0] is not None and first.shape[0] % steps:
            raise ValueError(
                f"grad_accum_steps={steps} must divide each replica's batch ({first.shape[0]})"
            )
        tf.debugging.assert_equal(
            tf.shape(first)[0] % steps,
            0,
            message=f"grad_accum_steps={steps} must divide each replica's batch",
        )
        xs, ys, ws = (
            tf.nest.map_structure(_split(steps), v) if v is not None else None
            for v in (x, y, sample_weight)
        )
        variables = model.trainable_weights

        def pick(structure, i):
            return None if structure is None else tf.nest.map_structure(lambda t: t[i], structure)

        def body(i, accumulated):
            xi, yi, wi = pick(xs, i), pick(ys, i), pick(ws, i)
            with tf.GradientTape() as tape:
                y_pred = model(xi, training=True)
                loss = model._compute_loss(
                    x=xi, y=yi, y_pred=y_pred, sample_weight=wi, training=True
                )
                model._loss_tracker.update_state(
                    loss_module.unscale_loss_for_distribution(loss),
                    sample_weight=tf.shape(next(t for t in tf.nest.flatten(xi) if t is not None))[
                        0
                    ],
                )
                loss = model.optimizer.scale_loss(loss)
            grads = tape.gradient(loss, variables)
            model.compute_metrics(xi, yi, y_pred, sample_weight=wi)
            return i + 1, [
                a if g is None else a + tf.cast(g, a.dtype) / steps
                for a, g in zip(accumulated, grads)
            ]

        zeros = [tf.zeros(v.shape, v.dtype) for v in variables]
        _, grads = tf.while_loop(
            lambda i, _: i < steps, body, [tf.constant(0), zeros], parallel_iterations=1
        )
        model.optimizer.apply_gradients(zip(grads, variables))
        return model.get_metrics_result()

    model.train_step = train_step
    model.train_function = None  # rebuilt with this step by the next fit


class ClipAfterAllReduce:
    """Optimizer mixin: `clip_global_norm` applied to the summed (cross-replica)
    gradient (workaround 1 of the module docstring)."""

    def __init__(self, *args, clip_global_norm=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.clip_global_norm = clip_global_norm

    def build(self, var_list):
        super().build(var_list)
        # The global norm of the last step's all-reduced gradient, before clipping (the
        # trainers' train/gradient_norm). A tf.Variable, not one of the optimizer's own:
        # it is no state of the update, and the checkpoints keep the layout they had.
        with tf.init_scope():
            self.gradient_norm = tf.Variable(
                0.0,
                trainable=False,
                name="gradient_norm",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )

    def _all_reduce_sum_gradients(self, grads_and_vars):
        grads_and_vars = super()._all_reduce_sum_gradients(grads_and_vars)
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        norm = tf.linalg.global_norm([g for g, _ in pairs])
        if getattr(self, "gradient_norm", None) is not None:
            self.gradient_norm.assign(tf.cast(norm, tf.float32))
        if not self.clip_global_norm:
            return grads_and_vars
        clipped, _ = tf.clip_by_global_norm(
            [g for g, _ in pairs], self.clip_global_norm, use_norm=norm
        )
        clipped = iter(clipped)
        return [(None, v) if g is None else (next(clipped), v) for g, v in grads_and_vars]

    def get_config(self):
        return {**super().get_config(), "clip_global_norm": self.clip_global_norm}


def prepare_multi_worker_fit(model, strategy, batch):
    """Makes `model.fit` work under MultiWorkerMirroredStrategy (Keras 3.15):

    - its `_maybe_symbolic_build` calls `strategy.reduce` on the whole (x, y) batch
      structure, which the collective strategy cannot convert ("Attempt to convert a
      value (PerReplica...)"): loss, metrics and optimizer are built here from one
      local `batch` instead, and that step is skipped for this model;
    - `reduce_per_replica` reduces scalar logs with strategy.reduce(MEAN, v, axis=0)
      under the collective strategy ("Invalid reduction dimension 0 for input with 0
      dimensions"): scalars are reduced with axis=None instead (patched once per
      process, for every model).
    """
    check_keras_version()
    with strategy.scope():
        model._symbolic_build(data_batch=batch)
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
    from keras.src.backend.tensorflow import trainer as tf_trainer

    if getattr(tf_trainer.reduce_per_replica, "_keras_vit_patched", False):
        return
    original = tf_trainer.reduce_per_replica

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and tf_trainer._collective_all_reduce_multi_worker(
            strategy
        ):
            return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
        return original(values, strategy, reduction)

    reduce_per_replica._keras_vit_patched = True
    tf_trainer.reduce_per_replica = reduce_per_replica
