"""`.keras` round trips (safe_mode) and backend agreement."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
from numpy_vit import random_params

import keras_vit

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL_KW = dict(patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2)


def test_keras_round_trip_safe_mode(tmp_path, rng):
    model = keras_vit.VisionTransformer(
        **SMALL_KW,
        image_size=(32, 24),
        classifier="gap",
        representation_size=8,
        num_classes=4,
        dropout_rate=0.1,
        name="my_vit",
    )
    for w in model.weights:
        w.assign(rng.standard_normal(w.shape).astype("float32") * 0.2)
    path = str(tmp_path / "vit.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, keras_vit.VisionTransformer)
    assert loaded.get_config() == model.get_config()
    x = rng.uniform(-1, 1, (2, 32, 24, 3)).astype("float32")
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    # The attention API survives the round trip.
    assert len(loaded.attention_weights(x)) == 2


def test_mixed_precision_policy_round_trip(tmp_path):
    model = keras_vit.VisionTransformer(
        **SMALL_KW, image_size=16, num_classes=2, dtype="mixed_bfloat16"
    )
    assert model.get_layer("Transformer").compute_dtype == "bfloat16"
    assert model.get_layer("Transformer").variable_dtype == "float32"
    path = str(tmp_path / "mixed.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.get_layer("Transformer").compute_dtype == "bfloat16"


def test_jax_backend_matches_tensorflow(tmp_path, rng):
    params = random_params(
        patch=8,
        hidden=16,
        mlp=32,
        heads=2,
        layers=2,
        grid=(4, 4),
        num_classes=5,
        representation_size=8,
        seed=3,
    )
    ckpt = tmp_path / "ckpt.npz"
    np.savez(ckpt, **params)
    x = rng.uniform(-1, 1, (3, 32, 32, 3)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    script = (
        "import sys, numpy as np, keras, keras_vit\n"
        "assert keras.backend.backend() == 'jax'\n"
        "assert 'tensorflow' not in sys.modules, 'keras_vit imported TensorFlow'\n"
        f"m = keras_vit.from_weights({str(ckpt)!r}, patch_size=8, hidden_size=16, mlp_dim=32,"
        " num_heads=2, num_layers=2)\n"
        f"x = np.load({str(tmp_path / 'x.npy')!r})\n"
        "np.save(sys.argv[1], np.asarray(m.predict(x, verbose=0)))\n"
        "w = m.attention_weights(x)\n"
        "np.save(sys.argv[2], np.asarray(w[1]))\n"
    )
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    out, att = tmp_path / "jax.npy", tmp_path / "jax_att.npy"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(out), str(att)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    model = keras_vit.from_weights(str(ckpt), **SMALL_KW)
    np.testing.assert_allclose(np.load(out), model.predict(x, verbose=0), atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.load(att), model.attention_weights(x)[1], atol=1e-5, rtol=0)


def test_mixed_policy_keeps_the_head_float32(rng):
    # The policy reaching every layer inside the encoder: tests/test_layer_conformance.py.
    model = keras_vit.VisionTransformer(
        **SMALL_KW, image_size=16, num_classes=2, dtype="mixed_bfloat16"
    )
    assert model.get_layer("head").compute_dtype == "float32"
    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    model.jit_compile = False  # pinned: "auto" for bfloat16 depends on the CPU
    assert model.predict(x, verbose=0).dtype == np.float32


# Configs as keras_vit wrote them before its options were declared in one place
# (keras_vit/options.py; 4d24a44's get_config, JSON form as a `.keras` file holds it):
# every family option, the optional keys (preprocessing, pooling, input_shape, resnet,
# dtype) and both records of the family options (always, only where set).
WRITTEN_CONFIGS = [
    {
        "name": "vit",
        "trainable": True,
        "image_size": [16, 16],
        "channels": 3,
        "patch_size": [8, 8],
        "hidden_size": 16,
        "mlp_dim": 32,
        "num_heads": 2,
        "num_layers": 2,
        "classifier": "gap",
        "representation_size": None,
        "num_classes": 3,
        "include_top": True,
        "classifier_activation": "softmax",
        "dropout_rate": 0.0,
        "attention_dropout_rate": 0.0,
        "stochastic_depth_rate": 0.0,
        "approximate_gelu": False,
        "layer_norm_epsilon": 1e-06,
        "fc_norm": False,
        "layer_scale_init": 1e-05,
        "num_registers": 2,
        "absolute_position_embedding": False,
        "rope": {
            "kind": "axial",
            "temperature": 100.0,
            "grid_indexing": "ij",
            "rotate_half": False,
            "reference_grid": None,
        },
        "qk_norm": True,
        "gated_mlp": True,
        "mlp_norm": True,
        "preprocessing": {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
        "dtype": {
            "module": "keras",
            "class_name": "DTypePolicy",
            "config": {"name": "mixed_bfloat16"},
            "registered_name": None,
        },
    },
    {
        "name": "tower",
        "trainable": False,
        "image_size": [32, 32],
        "channels": 1,
        "patch_size": [4, 4],
        "hidden_size": 16,
        "mlp_dim": 32,
        "num_heads": 2,
        "num_layers": 2,
        "classifier": "token",
        "representation_size": 8,
        "num_classes": 1000,
        "include_top": False,
        "classifier_activation": None,
        "dropout_rate": 0.0,
        "attention_dropout_rate": 0.0,
        "stochastic_depth_rate": 0.0,
        "approximate_gelu": True,
        "layer_norm_epsilon": 1e-05,
        "fc_norm": True,
        "position_embedding_for_class_token": False,
        "pre_norm": True,
        "quick_gelu": True,
        "patch_embedding_bias": False,
        "pooling": None,
        "input_shape": [None, None, 1],
        "resnet": {"num_layers": [], "width_factor": 1},
    },
]


def test_configs_written_before_load_as_the_same_model():
    """A config as keras_vit wrote it before loads, and writes itself back
    unchanged: `.keras` files saved before stay loadable."""
    for written in WRITTEN_CONFIGS:
        model = keras_vit.VisionTransformer.from_config(written)
        assert json.loads(json.dumps(model.get_config())) == written
        assert model.rope == written.get("rope") and model.channels == written["channels"]
