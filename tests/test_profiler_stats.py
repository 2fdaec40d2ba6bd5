"""benchmarks/profiler_stats.py reads TensorFlow's profiler through a private module: this
fails when a TensorFlow release moves it or changes its table."""

import keras
import pytest

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="TensorFlow's profiler"
)


def test_op_stats_reads_a_profile_of_a_function(tmp_path):
    import tensorflow as tf

    from keras_vit_benchmarks import profiler_stats

    product = tf.function(lambda a, b: tf.matmul(a, b) * 2.0)
    a = tf.ones((64, 64))
    product(a, a)
    tf.profiler.experimental.start(str(tmp_path))
    for _ in range(3):
        product(a, a)
    tf.profiler.experimental.stop()

    ops = list(profiler_stats.op_stats(str(tmp_path)))
    matmuls = [op for op in ops if "MatMul" in op["type"]]
    assert matmuls, sorted({op["type"] for op in ops})
    assert sum(op["occurrences"] for op in matmuls) == 3
    assert all(op["total_self_time"] > 0 for op in matmuls)
    assert all(op["type"] != "IDLE" for op in ops)


def test_op_stats_names_a_directory_without_a_profile(tmp_path):
    from keras_vit_benchmarks import profiler_stats

    with pytest.raises(RuntimeError, match=str(tmp_path)):
        list(profiler_stats.op_stats(str(tmp_path)))
