"""How the trainers' TensorFlow functions are traced: as written, without AutoGraph.

Every function the trainers hand to tf.data (`map`, `flat_map`, `interleave`,
`filter`) or to `tf.function` is TensorFlow ops with no Python control flow on
tensors (a loop or a branch on a tensor is written `tf.while_loop` / `tf.cond`).
AutoGraph, on by default in both, would rewrite each function's source before
tracing it, for nothing: on the slowest CPU kind (AMD EPYC family 23, AVX2) that
rewriting took 3.8 s of a tiny two-step `pretrain` run's 18 s. A function that
does need AutoGraph says so where it is traced (train_step.TrainStep's host loop).

`keras_vit_data.records.read_records` does the same for its own `flat_map`.
"""

import tensorflow as tf


def as_written(fn):
    """`fn` (for a tf.data transformation) traced as written, without AutoGraph."""
    return tf.autograph.experimental.do_not_convert(fn)


def function(fn, **kwargs):
    """`tf.function(fn, **kwargs)` traced as written, without AutoGraph."""
    return tf.function(fn, autograph=False, **kwargs)
