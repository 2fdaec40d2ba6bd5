"""The default compilation (`keras_vit.compilation`): the rule behind `jit_compile="auto"`
with faked CPU flags, and that `VisionTransformer`'s compile/predict use its answer.

Every test fakes the CPU flags (and whether a GPU/TPU is present), so each means the same
on every machine. For example, `lscpu` on the project's Intel Xeon (Sapphire Rapids) lists,
among many others: avx2 fma avx512f avx512_bf16 avx512_vnni avx512_fp16 avx_vnni amx_bf16
amx_tile amx_int8; the project's AMD EPYC (Zen 3) has avx2 and fma but no avx512* or amx*.
"""

import warnings

import keras
import numpy as np
import pytest
import tiny_models

from keras_vit import VisionTransformer, compilation

TF = keras.backend.backend() == "tensorflow"
# The rule answers for TensorFlow and JAX; under torch "auto" is Keras' own (eager), which
# test_with_an_accelerator_keras_decides and the rule's torch row check there.
RULE_APPLIES = pytest.mark.skipif(
    keras.backend.backend() == "torch", reason="under torch 'auto' is Keras' (eager)"
)
SAPPHIRE_RAPIDS = frozenset(
    "sse4_2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 avx512_fp16 avx_vnni "
    "amx_bf16 amx_tile amx_int8".split()
)
ZEN4 = frozenset("sse4_2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16".split())
SKYLAKE_X = frozenset("sse4_2 avx avx2 fma avx512f avx512bw".split())  # AVX-512, no bf16
ZEN3 = frozenset("sse4_2 avx avx2 fma".split())
TINY = dict(tiny_models.BLOCK, image_size=8, patch_size=4)


@pytest.mark.parametrize(
    "backend, dtype, flags, accelerator, distributed, expected",
    [
        # CPU-only TensorFlow: no XLA for bfloat16 with hardware bf16 dot products ...
        ("tensorflow", "bfloat16", SAPPHIRE_RAPIDS, False, False, False),
        ("tensorflow", "bfloat16", ZEN4, False, False, False),
        ("tensorflow", "bfloat16", frozenset({"amx_bf16"}), False, False, False),
        # ... XLA for bfloat16 without them, or when the flags are unknown ...
        ("tensorflow", "bfloat16", ZEN3, False, False, True),
        ("tensorflow", "bfloat16", SKYLAKE_X, False, False, True),
        ("tensorflow", "bfloat16", None, False, False, True),
        # ... no XLA for float32 on AVX-512 CPUs, XLA on AVX2-only ones or unknown flags ...
        ("tensorflow", "float32", SAPPHIRE_RAPIDS, False, False, False),
        ("tensorflow", "float32", SKYLAKE_X, False, False, False),
        ("tensorflow", "float32", ZEN4, False, False, False),
        ("tensorflow", "float32", ZEN3, False, False, True),
        ("tensorflow", "float32", None, False, False, True),
        # ... and XLA for float16 on every CPU.
        ("tensorflow", "float16", SAPPHIRE_RAPIDS, False, False, True),
        ("tensorflow", "float16", ZEN3, False, False, True),
        # JAX: always XLA, as in Keras.
        ("jax", "bfloat16", SAPPHIRE_RAPIDS, False, False, True),
        ("jax", "float32", None, True, False, True),
        # Keras' own choice: TensorFlow with a GPU/TPU, a tf.distribute strategy, torch.
        ("tensorflow", "bfloat16", SAPPHIRE_RAPIDS, True, False, None),
        ("tensorflow", "float32", ZEN3, False, True, None),
        ("tensorflow", "bfloat16", SAPPHIRE_RAPIDS, False, True, None),
        ("torch", "float32", ZEN3, False, False, None),
    ],
)
def test_rule(backend, dtype, flags, accelerator, distributed, expected):
    assert compilation.auto_jit_compile(backend, dtype, flags, accelerator, distributed) is expected


def test_cpu_flags_reads_the_first_processors_flags_line(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 amx_bf16\n\n"
        "processor\t: 1\nflags\t\t: fpu\n"
    )
    assert compilation.cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "amx_bf16"}
    arm = tmp_path / "arm"  # aarch64 lists `Features`, not `flags`: unknown
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")
    assert compilation.cpu_flags(str(arm)) is None
    assert compilation.cpu_flags(str(tmp_path / "missing")) is None


def test_has_accelerator_reads_keras_device_list(monkeypatch):
    monkeypatch.setattr(keras.distribution, "list_devices", lambda: ["gpu:0", "gpu:1"])
    assert compilation.has_accelerator() is True
    monkeypatch.setattr(keras.distribution, "list_devices", lambda: ["cpu:0"])
    assert compilation.has_accelerator() is False


def test_compute_dtype_follows_the_policy_given_or_global():
    assert compilation.compute_dtype(VisionTransformer(**TINY)) == "float32"
    mixed = VisionTransformer(**TINY, dtype="mixed_bfloat16")
    assert compilation.compute_dtype(mixed) == "bfloat16"
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        globally_mixed = VisionTransformer(**TINY)
    finally:
        keras.config.set_dtype_policy(previous)
    assert compilation.compute_dtype(globally_mixed) == "bfloat16"


@pytest.fixture
def machine(monkeypatch):
    """Fakes the machine the rule sees: `machine(flags, accelerator=False)`."""

    def fake(flags, accelerator=False):
        monkeypatch.setattr(compilation, "MACHINE_CPU_FLAGS", flags)
        monkeypatch.setattr(compilation, "has_accelerator", lambda: accelerator)

    return fake


@RULE_APPLIES
def test_predict_on_an_uncompiled_model_uses_the_rule(machine):
    machine(SAPPHIRE_RAPIDS)
    model = VisionTransformer(**TINY, num_classes=2, dtype="mixed_bfloat16")
    # Set when the model is made: `jit_compile` is what Keras' predict compiles with.
    assert model.jit_compile is (not TF)  # TensorFlow: no XLA; JAX: always XLA
    images = np.random.default_rng(0).uniform(-1, 1, (2, 8, 8, 3)).astype("float32")
    assert model.predict(images, verbose=0).shape == (2, 2)
    assert model.jit_compile is (not TF)
    machine(ZEN3)  # no bf16 hardware: XLA on both backends
    assert VisionTransformer(**TINY, num_classes=2, dtype="mixed_bfloat16").jit_compile is True


@RULE_APPLIES
def test_compile_auto_uses_the_rule(machine):
    machine(ZEN3)
    mixed = VisionTransformer(**TINY, num_classes=2, dtype="mixed_bfloat16")
    mixed.compile(loss="mse")
    assert mixed.jit_compile is True  # no bf16 hardware: XLA on both backends
    machine(SAPPHIRE_RAPIDS)
    mixed.compile(loss="mse")
    assert mixed.jit_compile is (not TF)
    float32 = VisionTransformer(**TINY, num_classes=2)
    float32.compile(loss="mse")
    assert float32.jit_compile is (not TF)  # AVX-512: no XLA on TensorFlow
    machine(ZEN3)
    float32.compile(loss="mse")
    assert float32.jit_compile is True  # Keras alone would say False on CPU-only TF


@RULE_APPLIES
def test_explicit_jit_compile_wins(machine):
    machine(ZEN3)  # the rule: XLA for both dtypes
    mixed = VisionTransformer(**TINY, num_classes=2, dtype="mixed_bfloat16")
    mixed.compile(loss="mse", jit_compile=False)
    assert mixed.jit_compile is False
    float32 = VisionTransformer(**TINY, num_classes=2)
    float32.compile(loss="mse", jit_compile=False)
    assert float32.jit_compile is False
    float32.compile(loss="mse", jit_compile="auto")
    assert float32.jit_compile is True
    machine(SAPPHIRE_RAPIDS)  # the rule: no XLA for either on TensorFlow
    mixed.compile(loss="mse", jit_compile=True)
    assert mixed.jit_compile is True
    float32.compile(loss="mse", jit_compile=True)
    assert float32.jit_compile is True


def test_no_xla_where_the_model_does_not_support_it(machine):
    machine(ZEN3)
    model = VisionTransformer(**TINY, num_classes=2)
    model.get_layer("head").supports_jit = False
    model.compile(loss="mse")
    assert model.jit_compile is False


@pytest.mark.parametrize("path", [("head",), ("Transformer", "blocks", 0, "mlp")])
def test_a_layer_without_xla_at_any_depth_turns_it_off_silently(machine, path):
    machine(ZEN3)
    model = VisionTransformer(**TINY, num_classes=2)
    layer = model.get_layer(path[0])
    for step in path[1:]:
        layer = layer[step] if isinstance(step, int) else getattr(layer, step)
    layer.supports_jit = False
    assert compilation.supports_jit(model) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Keras' "doesn't support jit_compile=True" not reached
        model.compile(loss="mse")
    assert model.jit_compile is False


@RULE_APPLIES
def test_compile_resolves_auto_with_positional_arguments_and_not_when_eager(machine):
    machine(ZEN3)  # the rule: XLA
    model = VisionTransformer(**TINY, num_classes=2)
    model.compile("sgd", "mse")
    assert model.jit_compile is True
    model.compile("sgd", "mse", run_eagerly=True)  # Keras: no XLA when eager
    assert model.jit_compile is False and model.run_eagerly is True


def test_with_an_accelerator_keras_decides(machine):
    machine(ZEN3, accelerator=True)
    model = VisionTransformer(**TINY, num_classes=2)
    model.compile(loss="mse")
    # Keras' own answer, that of a plain functional model of the same layers: False on
    # CPU-only TensorFlow (its device check), True under JAX.
    plain = keras.Model(model.inputs, model.outputs)
    plain.compile(loss="mse")
    assert model.jit_compile is plain.jit_compile


@pytest.mark.skipif(not TF, reason="tf.distribute strategies are TensorFlow's")
def test_under_a_tf_distribute_strategy_keras_decides(machine):
    import tensorflow as tf

    machine(ZEN3)
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        model = VisionTransformer(**TINY, num_classes=2)
        model.compile(loss="mse")
    assert compilation.under_strategy(model) is True  # outside its scope too
    assert compilation.resolve_auto_jit_compile(model) is None
    assert model.jit_compile is False  # Keras: no XLA under tf.distribute
    assert compilation.under_strategy(VisionTransformer(**TINY)) is False


# --- training: `training_jit_compile`, the rule the trainers apply to config.jit_compile ---


def _training(requested="auto", strategy="default", device="CPU", replicas=1, **facts):
    facts = {"compute_dtype": "float32", "cpu_flags": SAPPHIRE_RAPIDS, **facts}
    return compilation.training_jit_compile(
        requested, strategy=strategy, device_type=device, replicas=replicas, **facts
    )


@pytest.mark.parametrize(
    "strategy, device, replicas, dtype, flags, expected",
    [
        # One CPU replica: XLA (measured faster for training), float32 even on AVX-512 ...
        ("default", "CPU", 1, "float32", SAPPHIRE_RAPIDS, True),
        ("mirrored", "CPU", 1, "float32", ZEN3, True),
        ("default", "CPU", 1, "float16", SAPPHIRE_RAPIDS, True),
        ("default", "CPU", 1, "bfloat16", None, True),
        ("default", "CPU", 1, "bfloat16", ZEN3, True),
        # ... but not bfloat16 where the CPU has bfloat16 dot products.
        ("default", "CPU", 1, "bfloat16", SAPPHIRE_RAPIDS, False),
        ("default", "CPU", 1, "bfloat16", ZEN4, False),
        # Several CPU replicas: never (mirrored over logical CPUs, or workers).
        ("mirrored", "CPU", 2, "float32", ZEN3, False),
        ("multi_worker", "CPU", 2, "float32", ZEN3, False),
        # One GPU: XLA; several: Keras' choice (none); a TPU: XLA.
        ("default", "GPU", 1, "float16", None, True),
        ("mirrored", "GPU", 1, "float32", None, True),
        ("mirrored", "GPU", 8, "float16", None, False),
        ("tpu", "TPU", 8, "bfloat16", None, True),
    ],
)
def test_training_auto(strategy, device, replicas, dtype, flags, expected):
    jit, reason = _training(
        "auto", strategy, device, replicas, compute_dtype=dtype, cpu_flags=flags
    )
    assert jit is expected
    assert reason and "\n" not in reason


def test_training_auto_without_xla_under_op_determinism():
    jit, reason = _training(deterministic=True)
    assert jit is False and "determinism" in reason


@pytest.mark.parametrize("requested", [True, False])
def test_training_explicit_is_kept_where_xla_can_train(requested):
    assert _training(requested, compute_dtype="bfloat16") == (requested, "as configured")
    assert _training(requested, "mirrored", "GPU", 4) == (requested, "as configured")
    assert _training(requested, "tpu", "TPU", 8)[0] is requested


def test_training_explicit_false_is_kept_where_xla_cannot_train():
    assert _training(False, "mirrored", replicas=2)[0] is False
    assert _training(False, deterministic=True)[0] is False


@pytest.mark.parametrize(
    "strategy, named",
    [
        ("mirrored", "under the mirrored strategy (XLA reaches no variable on another"),
        ("multi_worker", "under the multi_worker strategy (XLA has no CPU collectives)"),
    ],
)
def test_training_true_on_several_cpu_replicas_is_an_error_naming_the_strategy(strategy, named):
    with pytest.raises(compilation.JitCompileError) as error:
        _training(True, strategy, "CPU", 2)
    assert named in error.value.reason
    assert "2 replicas on CPUs" in error.value.reason
    assert str(error.value).startswith("jit_compile=True: XLA cannot train")
    assert "jit_compile='auto' or False" in str(error.value)


def test_training_true_under_op_determinism_is_an_error():
    with pytest.raises(compilation.JitCompileError, match="op determinism"):
        _training(True, deterministic=True)


@pytest.mark.parametrize("requested", ["true", "xla", 1, 0, None])
def test_training_other_values_are_an_error(requested):
    with pytest.raises(ValueError, match=r"jit_compile=.*: expected 'auto', True or False"):
        _training(requested)
