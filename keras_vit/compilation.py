"""Which compilation `predict` and `fit` use by default: XLA or not.

Keras resolves `jit_compile="auto"` (the default of `compile`, so of `fit`, and what
`predict` uses on a model that was never compiled) with one rule for every model: always
XLA under JAX, XLA under TensorFlow only when a GPU/TPU is present, never under a
tf.distribute strategy. On CPU-only TensorFlow that is not the fastest choice, and
the faster one depends on the CPU and on the compute dtype. `auto_jit_compile` is the
rule `VisionTransformer` uses instead, a pure function of the facts it depends on;
`resolve_auto_jit_compile(model)` gathers those facts for a model, and the mixin
`AutoJitCompile` (a base of `VisionTransformer`) makes it what "auto" means, through
public Keras API alone: its `compile` resolves `jit_compile="auto"` before Keras sees
it, and the model sets its public `jit_compile` when it is made, which is what
`predict` uses on a model never compiled.

The measurements it comes from (docs/speed.md, "Which compilation `predict` and
`fit` use"; ViT inference, images/s, XLA / no XLA):

- AMD EPYC (Zen 3: AVX2/FMA, no AVX-512, no bfloat16 arithmetic), ViT-B/16 batch 8
  (keras-hub's, the same architecture; keras_vit's `predict` was already XLA): XLA is
  faster in float32 (3.60 / 1.55) and far faster in bfloat16 (3.70 / 0.78): without
  hardware bfloat16 dot products TensorFlow's own bfloat16 kernels are slow, XLA
  computes in float32.
- Intel Xeon Sapphire Rapids (AVX-512, AVX512-BF16, AMX-BF16), ViT-B/16 batch 8:
  mixed_bfloat16 7.87 / 14.35 (no XLA: 1.8x). TensorFlow's oneDNN kernels compute
  bfloat16 dot products in hardware (its 2048^2 bfloat16 matmul: 1.38 TFLOP/s against
  0.34 in float32); XLA's CPU backend does not, so under XLA bfloat16 is even slower
  than float32. float32 was level (8.58 / 8.27) until the attention and MLP matmuls ran
  on 2-D rows, which TensorFlow's oneDNN path fuses with their biases and the GELU;
  since then float32 inference is faster without XLA too: 4.09 / 4.78 and 3.93 / 4.53
  (1.17x, 1.15x, two interleaved runs on 2026-12-01); training was level for ViT-S/16
  (4.50 / 4.41) and 1.1x faster with XLA for the Fashion-MNIST demo's 128-wide model.

Hence: no XLA where the compute dtype is bfloat16 and the CPU has bfloat16
dot-product instructions (`BF16_DOT_FLAGS`), and where the compute dtype is float32 and
the CPU has AVX-512 (`avx512f`: oneDNN's widest float32 kernels); XLA everywhere else on
CPU-only TensorFlow. Measured on a CPU with AMX-BF16, AVX512-BF16 and AVX-512, and on AMD
Zen 4 (AVX512-BF16, no AMX; docs/speed.md, 2026-12-03, ViT-B/16 predict_on_batch, three
runs): bfloat16 1.87x faster without XLA at batch 8, 1.36x at batch 1; float32 0.96x / 0.95x
(XLA ahead by less than the rounds' spread, so the rule stands there). Cooper Lake and Zen 5
(AVX512-BF16, no AMX) are inferred from Zen 4; an AVX-512 CPU without AMX (Skylake-X, Ice
Lake) is inferred for float32, which AMX does not compute.
float16, float32 on AVX2-only CPUs (the EPYC, measured before the fusion) and every
unmeasured case keep XLA, the choice measured as the better one on a CPU without
bfloat16 hardware; so does a CPU whose flags cannot be read (not Linux; ARM): its worst
measured loss is 1.8x, against 4.7x for the other choice. A model's own `fit` uses the
same answer (Keras has one `jit_compile` per model); the rule follows inference, where
the choice matters most on a CPU. The trainers have a rule of their own (below).

Under JAX the rule is Keras' (always XLA); on TensorFlow with a GPU/TPU, under a
tf.distribute strategy and on other backends it defers to Keras (`None`). A
`jit_compile=True/False` given to `compile`, or set as `model.jit_compile`, is never
overridden: this rule only answers "auto".

Training has its own rule, `training_jit_compile`, which the trainers (trainers/
config_checks.py) apply to `config.jit_compile="auto"` from plain facts they gather: the
strategy, the replicas' device type and number, the compute dtype, the CPU flags and whether
TensorFlow's op determinism is on. Measured (TensorFlow 2.21, CPU):

- XLA cannot train more than one replica on CPUs: under MirroredStrategy over logical CPU
  devices the step fails with "Trying to access resource .../replica_1 located in device
  CPU:1 from device CPU:0" (XLA knows one CPU device; xla/known_issues), under
  MultiWorkerMirroredStrategy with "Collectives are not yet implemented for CPU devices
  when compiling with XLA". One replica (the default strategy, or mirrored over one CPU)
  trains under XLA.
- On one CPU replica XLA trained the Fashion-MNIST demo's model 1.05x faster in float32
  (842 against 803 images/s, docs/training.md; ViT-S/16 level, docs/speed.md), so float32
  and float16 train with XLA; bfloat16 on a CPU with bfloat16 dot products
  (`BF16_DOT_FLAGS`) goes without, as inference does (XLA's CPU backend computes bfloat16
  below float32 speed).
- On one GPU XLA (Keras' own choice there); on several GPUs Keras' own choice, no XLA
  (not measured here); on TPUs XLA, which a TPU runs whatever is asked.
- Keras compiles no XLA while op determinism is on (its `jit_compile` setter refuses it).

An explicit `jit_compile=True` where XLA cannot train is an error (`JitCompileError`);
an explicit `False`, or `True` elsewhere, is kept.

Stdlib and Keras only, and TensorFlow's public `tf.distribute` where the backend is
TensorFlow (loaded by Keras then); no private Keras API.
"""

import inspect
import warnings

import keras

from keras_vit.sublayers import sublayers

# /proc/cpuinfo flags of the instructions that give TensorFlow's oneDNN kernels
# hardware bfloat16 dot products: AMX tiles (Sapphire Rapids and later) and AVX-512
# BF16 (Cooper Lake, Sapphire Rapids, AMD Zen 4).
BF16_DOT_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})
# ... and AVX-512 Foundation, on which oneDNN's fused float32 kernels beat XLA's.
FLOAT32_NO_XLA_FLAGS = frozenset({"avx512f"})

CPUINFO = "/proc/cpuinfo"


def cpu_flags(path=CPUINFO):
    """The CPU's instruction-set flags, a frozenset of /proc/cpuinfo names (e.g.
    'avx2', 'avx512_bf16', 'amx_bf16'), read from the first processor's `flags` line;
    None where they cannot be read (not Linux, or no `flags` line, as on ARM)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        return None
    return None


# This machine's flags, read once when the module is imported, so that making a model (which
# resolves "auto", `AutoJitCompile`) reads no file.
MACHINE_CPU_FLAGS = cpu_flags()


def auto_jit_compile(backend, compute_dtype, cpu_flags, accelerator, distributed):
    """What `jit_compile="auto"` should mean for a model.

    Args:
        backend: Keras backend name ('tensorflow', 'jax', ...).
        compute_dtype: the dtype the model's matmuls run in ('float32', 'bfloat16',
            'float16').
        cpu_flags: the CPU's flags (`cpu_flags()`), or None if unknown.
        accelerator: whether a GPU/TPU is present.
        distributed: whether the model was made under a tf.distribute strategy.

    Returns:
        True (XLA), False (no XLA), or None: Keras' own choice stands.
    """
    if backend == "jax":
        return True
    if backend != "tensorflow" or accelerator or distributed:
        return None
    if cpu_flags is not None:
        if compute_dtype == "bfloat16" and BF16_DOT_FLAGS & cpu_flags:
            return False
        if compute_dtype == "float32" and FLOAT32_NO_XLA_FLAGS & cpu_flags:
            return False
    return True


def compute_dtype(model):
    """The dtype a model's matmuls run in: 'bfloat16' or 'float16' where the model or
    one of its layers computes in it (a mixed policy, given to the model or set
    globally), otherwise the model's compute dtype."""
    dtypes = {model.compute_dtype} | {layer.compute_dtype for layer in model.layers}
    for dtype in ("bfloat16", "float16"):
        if dtype in dtypes:
            return dtype
    return model.compute_dtype


def has_accelerator():
    """Whether Keras sees a GPU or TPU (`keras.distribution.list_devices` lists
    those first, and only CPUs where there are none)."""
    return any(not device.lower().startswith("cpu") for device in keras.distribution.list_devices())


def supports_jit(model):
    """Whether every layer of `model` supports XLA: their public `supports_jit`
    (False on Keras' string lookups, random image transforms, cuDNN recurrences), the
    model's own and those of its layers at any depth (`keras_vit.sublayers`).

    Keras' own test (private) also refuses XLA while TensorFlow's op determinism is on,
    which TensorFlow has no public function to read, and on a Mac GPU, where the rule
    defers to Keras anyway. Keras applies that test whenever `jit_compile` is set to
    True, falling back to False; `AutoJitCompile` leaves op determinism to it."""
    return all(layer.supports_jit for layer in [model, *sublayers(model)])


def under_strategy(model):
    """Whether `model` runs under a tf.distribute strategy: the one it was made under
    (TensorFlow's public `Model.distribute_strategy`), or one whose scope is open now.
    Always False on other backends."""
    if keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    if tf.distribute.has_strategy():
        return True
    # Outside every scope `get_strategy()` is the default strategy, which is what
    # `distribute_strategy` gives for a model made outside every scope.
    default = tf.distribute.get_strategy()
    return getattr(model, "distribute_strategy", default) is not default


def auto_jit_compile_here(compute_dtype, distributed=False):
    """`auto_jit_compile` for the Keras backend in use and this machine's CPU flags
    (`MACHINE_CPU_FLAGS`) and devices: True/False, or None where Keras' own choice stands."""
    backend = keras.backend.backend()
    return auto_jit_compile(
        backend,
        compute_dtype,
        MACHINE_CPU_FLAGS,
        accelerator=backend == "tensorflow" and has_accelerator(),
        distributed=distributed,
    )


def resolve_auto_jit_compile(model):
    """`auto_jit_compile` for `model` on this machine: True/False, or None where
    Keras' own choice stands. True only where the model supports XLA."""
    choice = auto_jit_compile_here(compute_dtype(model), distributed=under_strategy(model))
    if choice:
        return supports_jit(model)
    return choice


# Keras' warning when `jit_compile=True` meets a model it cannot XLA-compile (op
# determinism): expected where True is the rule's answer, which Keras' "auto" gives silently.
_REFUSED_JIT = r"Model doesn't support `jit_compile=True`"


class AutoJitCompile:
    """A mixin of `keras.Model` (before it among the bases) that gives "auto" the
    meaning of `resolve_auto_jit_compile`: `VisionTransformer`'s default compilation.

    Two public routes: `compile(jit_compile="auto")` (its default, so `fit`'s) passes
    Keras the rule's True/False; and the model, once made, sets its `jit_compile` to the
    rule's answer, which `predict` uses until `compile` is called.
    Where the rule defers to Keras (a GPU/TPU with TensorFlow, a tf.distribute strategy,
    torch) Keras' "auto" stands. An explicit `jit_compile` always wins.

    The answer for a model never compiled is fixed when the model is made (Keras' own
    resolves at the first `predict`): a layer's `supports_jit` changed afterwards is
    seen at the next `compile`, and op determinism turned on afterwards by Keras, which
    then refuses XLA when `compile` sets it (module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        choice = resolve_auto_jit_compile(self)
        if choice is not None:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_REFUSED_JIT)
                self.jit_compile = choice

    def compile(self, *args, **kwargs):
        """`keras.Model.compile`, with `jit_compile="auto"` (the default) resolved by
        `resolve_auto_jit_compile` where that rule answers (module docstring)."""
        bound = inspect.signature(super().compile).bind(*args, **kwargs)
        arguments = bound.arguments
        auto = arguments.get("jit_compile", "auto") == "auto"
        choice = None
        if auto and not arguments.get("run_eagerly", False):
            choice = resolve_auto_jit_compile(self)
        if choice is None:
            return super().compile(*args, **kwargs)
        arguments["jit_compile"] = choice
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_REFUSED_JIT)
            return super().compile(*bound.args, **bound.kwargs)


# --- training -------------------------------------------------------------------------


class JitCompileError(ValueError):
    """`jit_compile=True` where XLA cannot train; `reason` says why."""

    def __init__(self, reason):
        super().__init__(f"jit_compile=True: {reason}; use jit_compile='auto' or False")
        self.reason = reason


def _no_xla_reason(strategy, device_type, replicas, deterministic):
    """Why XLA cannot train here (module docstring), or None."""
    if device_type == "CPU" and replicas > 1:
        why = (
            "XLA has no CPU collectives"
            if strategy == "multi_worker"
            else "XLA reaches no variable on another logical CPU"
        )
        return f"XLA cannot train {replicas} replicas on CPUs under the {strategy} strategy ({why})"
    if deterministic:
        return "Keras compiles no XLA while op determinism is on (deterministic_ops)"
    return None


def training_jit_compile(
    requested,
    *,
    strategy,
    device_type,
    replicas,
    compute_dtype,
    cpu_flags=None,
    deterministic=False,
):
    """The `jit_compile` a training run compiles with, and why (module docstring).

    Args:
        requested: the config's value: "auto", True or False.
        strategy: the strategy's kind, as the trainers' `--strategy` names it
            ('default', 'mirrored', 'multi_worker', 'tpu'); named in messages.
        device_type: the type of the devices the replicas run on: 'CPU', 'GPU' or 'TPU'.
        replicas: the number of replicas in sync (all workers).
        compute_dtype: the dtype the model's matmuls run in ('float32', 'bfloat16',
            'float16').
        cpu_flags: the CPU's flags (`cpu_flags()`), or None if unknown.
        deterministic: whether TensorFlow's op determinism is on.

    Returns:
        (jit_compile, reason): a bool, and a phrase saying why, for the log.

    Raises:
        ValueError: `requested` is not "auto", True or False.
        JitCompileError: `requested` is True where XLA cannot train; the message names
            the strategy and what to set instead.
    """
    if not (isinstance(requested, bool) or requested == "auto"):
        raise ValueError(f"jit_compile={requested!r}: expected 'auto', True or False")
    cannot = _no_xla_reason(strategy, device_type, replicas, deterministic)
    if requested is True and cannot:
        raise JitCompileError(cannot)
    if isinstance(requested, bool):
        return requested, "as configured"
    if cannot:
        return False, cannot
    if device_type == "TPU":
        return True, "a TPU runs XLA"
    if device_type == "GPU":
        if replicas > 1:
            return False, f"{replicas} GPU replicas, as Keras chooses (XLA not measured there)"
        return True, "one GPU replica, as Keras chooses"
    if compute_dtype == "bfloat16" and cpu_flags is not None and BF16_DOT_FLAGS & cpu_flags:
        return False, "bfloat16 on a CPU with bfloat16 dot products (XLA's CPU backend has none)"
    return True, f"one CPU replica in {compute_dtype}, where XLA trained faster"
