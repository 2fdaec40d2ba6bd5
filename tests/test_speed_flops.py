"""benchmarks/speed_flops.py's analytic counts against TensorFlow's own: the graph
profiler's FLOPs of every convolution and matrix product in the traced model (each
multiply-add 2 FLOPs), plus the two attention products per block, which run as
einsums the profiler has no count for (2 * 2 * tokens**2 * hidden each block)."""

import keras
import pytest
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

import keras_vit
from keras_vit_benchmarks import speed_flops

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="TensorFlow's graph profiler"
)

CASES = {
    # stem + a stride-1 stage (projection) + a stride-2 stage of two units (one
    # with, one without projection); odd sizes round up: 30 -> 15 -> 8 -> 4 tokens a side.
    "hybrid": (
        dict(
            resnet={"num_layers": (1, 2), "width_factor": 0.5},
            patch_size=1,
            hidden_size=64,
            mlp_dim=96,
            num_heads=2,
            num_layers=2,
            classifier="gap",
        ),
        30,
        16,
    ),
    "vit_token": (
        dict(patch_size=4, hidden_size=64, mlp_dim=128, num_heads=2, num_layers=3),
        28,
        50,
    ),
}


def profiled_products(model, size):
    function = tf.function(lambda x: model(x, training=False))
    graph = convert_variables_to_constants_v2(
        function.get_concrete_function(tf.TensorSpec([1, size, size, 3]))
    ).graph
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options.update(output="none", account_type_regexes=["Conv2D", "MatMul", "BatchMatMul.*"])
    return tf.compat.v1.profiler.profile(graph, options=options).total_float_ops


@pytest.mark.parametrize("case", sorted(CASES))
def test_analytic_flops_equal_tensorflows_count(case):
    spec, size, tokens = CASES[case]
    model = keras_vit.build_model(dict(spec, image_size=size, num_classes=10))
    attention = spec["num_layers"] * 2 * 2 * tokens**2 * spec["hidden_size"]
    expected = profiled_products(model, size) + attention
    assert speed_flops.model_forward_flops(spec, size, num_classes=10) == expected
    # From a trained run's model_config.json too (pairs, channels and extra keys).
    config = model.get_config()
    assert speed_flops.model_forward_flops(config, config["image_size"], 10) == expected
