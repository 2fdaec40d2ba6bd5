"""A hybrid gives the same logits under the JAX backend as under TensorFlow, and both
match the NumPy reference, at sizes where every stride-2 'SAME' step sees odd and
even inputs (TF-style padding is where backends could differ)."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from numpy_resnet import hybrid_forward, random_hybrid_params, resnet_forward

import keras_vit

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="compares JAX with the TensorFlow run"
)

ATOL = 1e-4  # float32 vs float64 NumPy, the project's bar
BACKEND_ATOL = 1e-5  # logits (O(1)), float32 TF vs float32 JAX

# 62x59 px: conv_root sees 62 (even) and 59 (odd), the max-pool 31 and 30, the
# stride-2 unit of block2 16 and 15; the 8x8 feature map makes a 4x4 grid.
IMAGE_SIZE = (62, 59)
MODEL_KW = dict(
    resnet=(1, 1),
    patch_size=2,
    hidden_size=48,
    mlp_dim=96,
    num_heads=4,
    num_layers=2,
    image_size=IMAGE_SIZE,
)

# Under JAX every initializer compiles an XLA program per weight shape, and a
# whole-model jit compiles the ResNet again: most of this process's time, spent on
# values the checkpoint replaces. So the model is built and loaded in a stateless
# scope (which records the loader's assignments and initialises no variable), each
# variable then gets its recorded checkpoint value (one the loader did not assign is
# an error), and the model runs eagerly (each op compiled once).
_WORKER = """
import sys
import keras, numpy as np
import keras_vit
assert keras.backend.backend() == "jax", keras.backend.backend()
ckpt, images, out = sys.argv[1:4]
with keras.StatelessScope(initialize_variables=False) as scope:
    model = keras_vit.from_weights(weights=ckpt, **{kw!r})
unloaded = [v.path for v in model.variables if scope.get_current_value(v) is None]
assert not unloaded, f"not in the checkpoint: {{unloaded}}"
for variable in model.variables:
    variable.assign(scope.get_current_value(variable))
extractor = model.feature_extractor(blocks=(), stages=-1)  # the last ResNet stage
x = np.load(images)
features = extractor(x, training=False)["stage2"]
np.savez(out, logits=model(x, training=False), features=features)
"""


def test_jax_backend_equals_tensorflow_backend(tmp_path, rng):
    assert keras.backend.backend() == "tensorflow"
    params = random_hybrid_params(
        resnet=(1, 1),
        patch=2,
        hidden=48,
        mlp=96,
        heads=4,
        layers=2,
        grid=(4, 4),
        num_classes=6,
        seed=11,
    )
    ckpt, images, out = tmp_path / "ckpt.npz", tmp_path / "x.npy", tmp_path / "jax.npz"
    np.savez(ckpt, **params)
    x = rng.uniform(-1, 1, (2, *IMAGE_SIZE, 3)).astype(np.float32)
    np.save(images, x)
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    # Started first: the JAX process's start-up and compiles overlap the
    # TensorFlow model and the NumPy reference computed here meanwhile.
    worker = subprocess.Popen(
        [sys.executable, "-c", _WORKER.format(kw=MODEL_KW), str(ckpt), str(images), str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        model = keras_vit.from_weights(weights=str(ckpt), **MODEL_KW)
        assert model.grid_size == (4, 4)
        tf_logits = keras.ops.convert_to_numpy(model(x, training=False))
        tf_features = keras.ops.convert_to_numpy(
            model.feature_extractor(blocks=(), stages=-1)(x)["stage2"]
        )
        expected = hybrid_forward(params, x, num_layers=(1, 1), vit_layers=2)
        expected_features = resnet_forward(params, x, (1, 1))
        _, stderr = worker.communicate(timeout=300)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, stderr[-3000:]
    jax_out = np.load(out)

    assert jax_out["features"].shape == tf_features.shape == (2, 8, 8, 512)
    # Feature maps (values up to ~5) against the float64 reference.
    np.testing.assert_allclose(tf_features, expected_features, atol=ATOL, rtol=0)
    np.testing.assert_allclose(jax_out["features"], expected_features, atol=ATOL, rtol=0)
    np.testing.assert_allclose(tf_logits, expected, atol=ATOL, rtol=0)
    np.testing.assert_allclose(jax_out["logits"], expected, atol=ATOL, rtol=0)
    np.testing.assert_allclose(jax_out["logits"], tf_logits, atol=BACKEND_ATOL, rtol=0)
