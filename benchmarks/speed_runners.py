"""What `speed.py` times: one step of a model (or a matmul) on synthetic data.

Each runner is built once (weights, compilation on the first call) and then
`step()` runs one batch and waits until the result exists, so that wall-clock
time between two calls is the device's time for that batch.

Runners:
    KerasRunner   a Keras model (keras_vit, or keras-hub's ViTBackbone with a
                  class-token head) through the Keras trainer: `predict`
                  (default jit_compile, what a user gets), or `predict_on_batch`
                  / `train_on_batch` compiled with jit_compile True ('xla' under
                  TensorFlow and JAX, 'torch_compile' under torch) or False
                  ('graph', TensorFlow only).
    TimmRunner    timm's VisionTransformer in PyTorch, eager or torch.compile,
                  float32 or bfloat16 autocast.
    MatmulRunner  a square matmul in the Keras backend, the device's peak.
"""

import keras
import numpy as np

from keras_vit_benchmarks import speed_flops

# Keras compile mode -> jit_compile, and the backends it exists on (None: every backend).
# jit_compile=True is XLA under TensorFlow and JAX, torch.compile under torch; each mode
# has one meaning, so a label such as keras_vit[xla] names the same compiler everywhere.
JIT_COMPILE = {"default": "auto", "xla": True, "graph": False, "torch_compile": True}
COMPILE_BACKENDS = {
    "default": None,
    "xla": ("tensorflow", "jax"),
    "graph": ("tensorflow",),
    "torch_compile": ("torch",),
}
COMPILE_MODES = tuple(JIT_COMPILE)


def compile_mode_error(compile_mode, backend):
    """Why `compile_mode` cannot run on `backend` (a sentence), or None if it can."""
    if compile_mode not in JIT_COMPILE:
        return f"compile_mode must be one of {COMPILE_MODES}, got {compile_mode!r}."
    backends = COMPILE_BACKENDS[compile_mode]
    if backends is None or backend in backends:
        return None
    return (
        f"compile_mode {compile_mode!r} exists on the {' and '.join(backends)} "
        f"backend{'s' if len(backends) > 1 else ''} only, not {backend!r}."
    )


def synthetic_batch(batch_size, image_size, num_classes, seed=0):
    """Images (B, H, W, 3) float32 in [-1, 1] and int32 labels (B,)."""
    rng = np.random.default_rng(seed)
    images = rng.uniform(-1, 1, (batch_size, image_size, image_size, 3)).astype("float32")
    labels = rng.integers(0, num_classes, (batch_size,)).astype("int32")
    return images, labels


class KerasRunner:
    """One inference or train step of a Keras classifier (B, H, W, 3) -> logits.

    Args:
        model: a keras.Model mapping images to logits (B, num_classes).
        images, labels: the synthetic batch (numpy).
        mode: 'inference' or 'train' (AdamW, sparse softmax cross-entropy).
        compile_mode: 'default' (model.predict / fit defaults: jit_compile="auto":
            keras_vit's rule, XLA wherever it is faster; eager under torch), 'xla'
            (TensorFlow, JAX), 'graph' (no XLA; TensorFlow) or 'torch_compile'
            (torch); `COMPILE_BACKENDS`.
    """

    def __init__(self, model, images, labels, mode, compile_mode):
        error = compile_mode_error(compile_mode, keras.backend.backend())
        if error:
            raise ValueError(error)
        self.model, self.images, self.labels = model, images, labels
        self.mode, self.compile_mode = mode, compile_mode
        if mode == "train" or compile_mode != "default":
            jit = JIT_COMPILE[compile_mode]
            model.compile(
                optimizer=keras.optimizers.AdamW(1e-4),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=jit,
            )

    def step(self):
        if self.mode == "train":
            return self.model.train_on_batch(self.images, self.labels)
        if self.compile_mode == "default":
            return self.model.predict(self.images, batch_size=len(self.images), verbose=0)
        return self.model.predict_on_batch(self.images)

    def describe(self):
        jit = getattr(self.model, "jit_compile", None)
        return {"compile": self.compile_mode, "jit_compile": jit}


class TimmRunner:
    """One step of timm's VisionTransformer (PyTorch, channels-first input).

    Args:
        arch: keras_vit variant dict (patch_size, hidden_size, mlp_dim,
            num_heads, num_layers); image_size, num_classes: as the others.
        images, labels: numpy batch (converted to NCHW tensors once).
        mode: 'inference' (torch.inference_mode) or 'train' (AdamW, CE).
        dtype: 'float32' or 'mixed_bfloat16' (torch.autocast bfloat16).
        compile_model: wrap the model in torch.compile.
    """

    def __init__(
        self, arch, image_size, num_classes, images, labels, mode, dtype, compile_model=False
    ):
        import torch

        timm_vit = import_timm_vit()
        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        model = timm_vit.VisionTransformer(
            img_size=image_size,
            patch_size=arch["patch_size"],
            embed_dim=arch["hidden_size"],
            depth=arch["num_layers"],
            num_heads=arch["num_heads"],
            mlp_ratio=arch["mlp_dim"] / arch["hidden_size"],
            num_classes=num_classes,
        )
        self.model = model.to(self.device).train(mode == "train")
        self.forward = torch.compile(self.model) if compile_model else self.model
        self.images = torch.from_numpy(images.transpose(0, 3, 1, 2).copy()).to(self.device)
        self.labels = torch.from_numpy(labels.astype("int64")).to(self.device)
        self.mode, self.compile_model = mode, compile_model
        self.autocast_dtype = torch.bfloat16 if dtype == "mixed_bfloat16" else None
        if mode == "train":
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)

    def _autocast(self):
        return self.torch.autocast(
            self.device, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None
        )

    def step(self):
        torch = self.torch
        if self.mode == "train":
            self.optimizer.zero_grad(set_to_none=True)
            with self._autocast():
                loss = torch.nn.functional.cross_entropy(self.forward(self.images), self.labels)
            loss.backward()
            self.optimizer.step()
            out = loss
        else:
            with torch.inference_mode(), self._autocast():
                out = self.forward(self.images)
        if self.device == "cuda":
            torch.cuda.synchronize()
        return out

    def describe(self):
        return {
            "compile": "torch.compile" if self.compile_model else "eager",
            "torch_threads": self.torch.get_num_threads(),
        }


def import_timm_vit():
    """`timm.models.vision_transformer`, importable also where torchvision's
    compiled ops do not load (a CUDA torchvision beside a CPU-only torch, as the
    package index here serves them). torchvision then fails at import, registering
    fake kernels for `torchvision::nms` and `qnms`; declaring those two schemas
    first lets it import. A ViT never calls them; any caller gets torch's
    "no kernel" error."""
    import sys

    import torch

    try:
        import timm.models.vision_transformer as timm_vit
    except RuntimeError as error:
        if "torchvision::" not in str(error):
            raise
        for name in [m for m in sys.modules if m.split(".")[0] in ("torchvision", "timm")]:
            del sys.modules[name]
        library = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        import_timm_vit.torchvision_library = library  # keep the registration alive
        import timm.models.vision_transformer as timm_vit
    return timm_vit


class MatmulRunner:
    """`repeats` products of two (n, n) matrices in the compute dtype, compiled as
    keras_vit compiles a model of that dtype in the Keras backend: the practical matmul
    peak of the path the model takes (on TensorFlow's CPU, XLA's dot does not use AMX:
    bfloat16 there is oneDNN's matmul, 2.8x XLA's on the 2-core Xeon: 0.456 against 0.163
    TFLOP/s, docs/speed.md)."""

    def __init__(self, n, dtype, repeats=4):
        self.n, self.dtype, self.repeats = n, dtype, repeats
        rng = np.random.default_rng(0)
        a = keras.ops.convert_to_tensor(rng.standard_normal((n, n)).astype("float32"))
        b = keras.ops.convert_to_tensor(rng.standard_normal((n, n)).astype("float32"))
        self.a, self.b = keras.ops.cast(a, dtype), keras.ops.cast(b, dtype)
        self.fn = _jit(lambda a, b: keras.ops.matmul(a, b), dtype)

    def flops_per_step(self):
        return 2.0 * self.n**3 * self.repeats

    def step(self):
        for _ in range(self.repeats):
            out = self.fn(self.a, self.b)
            _block(out)
        return out

    def describe(self):
        return {"n": self.n, "dtype": self.dtype, "repeats": self.repeats}


def _jit(fn, dtype):
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.jit(fn)
    if backend == "tensorflow":
        import tensorflow as tf

        from keras_vit import compilation

        xla = compilation.auto_jit_compile_here(keras.backend.standardize_dtype(dtype))
        return tf.function(fn, jit_compile=xla is not False)
    if backend == "torch":
        # One matmul is one ATen kernel call: eager is already the kernel's own speed,
        # and torch.compile would only add a graph around it.
        return fn
    raise ValueError(
        f"MatmulRunner supports the jax, tensorflow and torch backends, not {backend!r}."
    )


def _block(x):
    """Waits until x is computed."""
    if hasattr(x, "block_until_ready"):
        x.block_until_ready()
    else:
        keras.ops.convert_to_numpy(x[:1, :1])


def step_flops(runner, forward_flops, batch_size):
    """FLOPs of one `runner.step()`."""
    if isinstance(runner, MatmulRunner):
        return runner.flops_per_step()
    return speed_flops.step_flops(forward_flops, batch_size, runner.mode)
