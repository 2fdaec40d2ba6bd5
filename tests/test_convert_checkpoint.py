"""tools/convert_checkpoint.py end to end."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
from numpy_vit import random_params, vit_forward

import keras_vit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = json.dumps(dict(patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2))


def run_tool(*args):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "convert_checkpoint.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_npz_to_keras_and_weights_h5(tmp_path, rng):
    params = random_params(
        patch=8, hidden=16, mlp=32, heads=2, layers=2, grid=(4, 4), num_classes=3, seed=11
    )
    npz = tmp_path / "ckpt.npz"
    np.savez(npz, **params)
    out = tmp_path / "vit.keras"
    proc = run_tool(f"--model={MODEL}", f"--weights={npz}", f"--output={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Wrote" in proc.stdout
    model = keras.saving.load_model(out, safe_mode=True)
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(
        model.predict(x, verbose=0), vit_forward(params, x, num_layers=2), atol=1e-5
    )

    h5 = tmp_path / "vit.weights.h5"
    proc = run_tool(f"--model={MODEL}", f"--weights={npz}", f"--output={h5}", "--image_size=48")
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = json.load(open(tmp_path / "vit.config.json"))
    assert config["image_size"] == [48, 48]
    rebuilt = keras_vit.VisionTransformer.from_config(config)
    rebuilt.load_weights(h5)
    x = rng.uniform(-1, 1, (1, 48, 48, 3)).astype("float32")
    np.testing.assert_allclose(
        rebuilt.predict(x, verbose=0), vit_forward(params, x, num_layers=2), atol=1e-5
    )


def test_bad_output_suffix_and_bad_weights(tmp_path):
    proc = run_tool(
        f"--model={MODEL}",
        f"--weights={tmp_path / 'missing.npz'}",
        f"--output={tmp_path / 'x.keras'}",
    )
    assert proc.returncode != 0 and "missing.npz" in proc.stderr
