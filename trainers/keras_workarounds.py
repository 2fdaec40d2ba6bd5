"""Workarounds of Keras behaviours the trainers need, fenced in one place.

Each one names the Keras behaviour it answers and is tested (tests/test_grad_accum.py).
They use Keras internals, so they are written against the Keras versions in
TESTED_KERAS; `check_keras_version` warns on any other.

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

import warnings

import keras
import tensorflow as tf

TESTED_KERAS = ("3.15",)  # major.minor versions these workarounds were written against


def check_keras_version(version=None, strict=False):
    """Warns (raises with `strict`, as CI does) when Keras is not a tested version."""
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
