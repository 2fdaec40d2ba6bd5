"""The training step, ours: one update of a Keras model under any tf.distribute strategy.

`TrainStep(...).run(iterator, n)` runs n updates inside one `tf.function` (the
strategy's `run` looped n times, as Orbit's `StandardTrainer` does), so that a host
drives a TPU or a GPU with one call per n steps. Each update, on every replica:

1. its share of the global batch is split into `accum` micro-batches; the gradient of
   each (of the Keras loss, which under a strategy is already the replica's share of
   the global mean) is computed one after another in a `tf.while_loop` (one
   micro-batch's activations alive at a time) and averaged: the update equals the big
   batch's;
2. the replicas' gradients are summed with `ReplicaContext.all_reduce` (public
   tf.distribute API): the gradient of the global-batch loss, the same on every
   replica;
3. its global norm is taken (train/gradient_norm) and, with `clip_norm`, every
   replica scales its own gradient by clip_by_global_norm's factor for that norm;
4. the Keras optimizer's `apply` (public API) all-reduces the scaled gradients, which
   gives the global-batch gradient clipped by its own norm: the official semantics,
   which Keras' `global_clipnorm` cannot give under a strategy (it clips each
   replica's partial gradient before its all-reduce). The schedule, coupled weight
   decay and EMA then run as Keras has them. The norm costs one all-reduce of the
   gradients more than Keras' own step under several replicas (none on one).

The global-batch means of the loss and of each metric function are summed into
`sums` (one slot each, plus a step count), which the host reads at its step
boundaries (trainers/train_lib.py) and resets.

Mixed precision: the trainers compute in bfloat16 (trainers/strategy.py), which
needs no loss scaling.
"""

import keras
import tensorflow as tf

from keras_vit_trainers import tracing


def _first_tensor(structure):
    return next(t for t in tf.nest.flatten(structure) if t is not None)


def _split(structure, parts):
    """Each tensor of `structure` reshaped to (parts, batch // parts, ...)."""

    def split(t):
        shape = tf.shape(t)
        return tf.reshape(t, tf.concat([[parts, shape[0] // parts], shape[1:]], 0))

    return tf.nest.map_structure(split, structure)


def _pick(structure, i):
    return tf.nest.map_structure(lambda t: t[i], structure)


class TrainStep:
    """The update of `model` by `optimizer` on `loss` (a Keras loss: y_true, y_pred ->
    the batch mean), with `metric_fns` {name: fn(y_true, y_pred) -> per-example values}
    logged beside it.

    accum: micro-batches per update (each replica's batch must divide by it).
    clip_norm: clip the all-reduced gradient to this global norm (None/0: no clipping).
    jit_compile: compile the replica step with XLA.
    """

    def __init__(
        self,
        model,
        optimizer,
        loss,
        metric_fns,
        strategy,
        *,
        accum=1,
        clip_norm=None,
        jit_compile=False,
    ):
        self.model, self.optimizer, self.loss = model, optimizer, loss
        self.metric_names = list(metric_fns)
        self.metric_fns = [metric_fns[k] for k in self.metric_names]
        self.strategy = strategy
        self.accum = int(accum)
        self.clip_norm = float(clip_norm) if clip_norm else None
        first_replica = tf.VariableAggregation.ONLY_FIRST_REPLICA
        with strategy.scope():
            # The last update's global gradient norm before clipping.
            self.gradient_norm = tf.Variable(
                0.0, trainable=False, name="gradient_norm", aggregation=first_replica
            )
            # [loss, *metrics, updates] summed since the last `read_sums`.
            self.sums = tf.Variable(
                tf.zeros([len(self.metric_fns) + 2]),
                trainable=False,
                name="train_sums",
                aggregation=first_replica,
            )
        step = tracing.function(self._replica_step, jit_compile=bool(jit_compile))
        self._replica_fn = step
        self._run = tf.function(self._steps)  # AutoGraph: its `for` over tf.range

    # --- on each replica --------------------------------------------------------------

    def _gradients(self, x, y):
        """(summed gradients, [loss, *metrics]) of one micro-batch; the loss is the
        replica's share of the global mean (Keras scales it under a strategy)."""
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            y_pred = self.model(x, training=True)
            loss = self.loss(y, y_pred)
            if self.model.losses:
                loss = loss + tf.add_n([tf.cast(v, loss.dtype) for v in self.model.losses])
        grads = tape.gradient(loss, variables)
        y_pred = tf.cast(y_pred, tf.float32)
        values = [tf.cast(loss, tf.float32)]
        values += [tf.reduce_mean(tf.cast(fn(y, y_pred), tf.float32)) for fn in self.metric_fns]
        return grads, tf.stack(values)

    def _replica_step(self, batch):
        x, y = batch[0], batch[1]
        variables = self.model.trainable_variables
        steps = self.accum
        if steps == 1:
            grads, values = self._gradients(x, y)
            grads = [tf.zeros_like(v) if g is None else g for g, v in zip(grads, variables)]
        else:
            first = _first_tensor(x)
            if first.shape[0] is not None and first.shape[0] % steps:
                raise ValueError(
                    f"grad_accum_steps={steps} must divide each replica's batch ({first.shape[0]})"
                )
            xs, ys = _split(x, steps), _split(y, steps)

            def body(i, accumulated, values):
                g, v = self._gradients(_pick(xs, i), _pick(ys, i))
                accumulated = [
                    a if gi is None else a + tf.cast(gi, a.dtype) / steps
                    for a, gi in zip(accumulated, g)
                ]
                return i + 1, accumulated, values + v / steps

            zeros = [tf.zeros(v.shape, v.dtype) for v in variables]
            _, grads, values = tf.while_loop(
                lambda i, *_: i < steps,
                body,
                [tf.constant(0), zeros, tf.zeros([len(self.metric_fns) + 1])],
                parallel_iterations=1,
            )
        context = tf.distribute.get_replica_context()
        replicas = self.strategy.num_replicas_in_sync
        # The loss is already a share of the global mean; the metrics are local means.
        scale = tf.constant([1.0] + [1.0 / replicas] * len(self.metric_fns))
        values = context.all_reduce(tf.distribute.ReduceOp.SUM, values * scale)
        # The global-batch gradient, for its norm: one all-reduce more than Keras makes
        # (none on one replica), the price of clipping after the all-reduce.
        reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, grads) if replicas > 1 else grads
        norm = tf.linalg.global_norm(reduced)
        self.gradient_norm.assign(tf.cast(norm, tf.float32))
        self.sums.assign_add(tf.concat([values, [1.0]], 0))
        if self.clip_norm:
            # clip_by_global_norm's factor; Keras' all-reduce of the scaled local
            # gradients gives factor * the global-batch gradient.
            clip = tf.constant(self.clip_norm, norm.dtype)
            factor = clip / tf.maximum(norm, clip)
            grads = [g * tf.cast(factor, g.dtype) for g in grads]
        self.optimizer.apply(grads, variables)

    # --- on the host ----------------------------------------------------------------

    def _steps(self, iterator, n):
        for _ in tf.range(n):
            self.strategy.run(self._replica_fn, args=(next(iterator),))

    def build(self):
        """Creates the optimizer's variables (before a checkpoint is restored)."""
        with self.strategy.scope():
            self.optimizer.build(self.model.trainable_variables)

    def run(self, iterator, n):
        """n updates from `iterator` (a distributed iterator) in one call."""
        self._run(iterator, tf.constant(int(n), tf.int32))

    def read_sums(self):
        """{'loss', metric names..., 'updates'}: sums since the last read; then reset."""
        values = self.sums.numpy()
        self.sums.assign(tf.zeros_like(self.sums))
        names = ["loss", *self.metric_names, "updates"]
        return dict(zip(names, (float(v) for v in values)))

    def step(self):
        return int(keras.ops.convert_to_numpy(self.optimizer.iterations))
