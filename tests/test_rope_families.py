"""The RoPE / SwiGLU families (DINOv3, EVA-02, RoPE-ViT axial and mixed) loaded
from a bare timm state dict alone, against an independent NumPy forward
(tests/numpy_eva.py) on every backend; the torch stage checks the same files
against timm itself (tests/test_interop_rope.py).

Each file is a state dict under timm eva.py's keys (the torch stage loads the
same generator's dicts into timm's own models, strictly), random weights at
trained-like scales, two blocks of the architecture's width.
"""

import os

import keras
import numpy as np
import pytest
from eva_families import FAMILIES, state_options
from interop_testing import images
from numpy_eva import eva_forward, random_eva_state

import keras_vit
from keras_vit.checkpoint import CheckpointError

# float32 against float64: a few ulps of O(1) outputs through two blocks.
TOLERANCE = 1e-5
X = images(2, 224, 224, seed=3)
# A second resolution, not square: the rotary angles of a 5 x 7 grid of 16-pixel patches,
# computed for it (no resizing step).
X_OTHER = images(2, 80, 112, seed=4)
ROTARY_ALONE = sorted(f for f, s in FAMILIES.items() if "pos_embed" not in s["state"])


def _saved(family, tmp_path):
    from safetensors.numpy import save_file

    state = random_eva_state(**state_options(family))
    path = os.path.join(tmp_path, f"{family}.safetensors")
    save_file(state, path)
    return state, path


def _reference(family, state, x):
    spec = FAMILIES[family]
    return eva_forward(state, x, heads=spec["sizes"]["heads"], **spec["forward"])


def _check(model, family, state, x):
    ours = keras.ops.convert_to_numpy(model(x))
    worst = float(np.max(np.abs(ours - _reference(family, state, x))))
    assert worst <= TOLERANCE, (family, worst)
    return worst


@pytest.mark.parametrize(
    "family", sorted(f for f in FAMILIES if not FAMILIES[f].get("undetermined"))
)
def test_bare_file_alone(family, tmp_path):
    state, path = _saved(family, tmp_path)
    model = keras_vit.from_weights(path)
    for key, value in FAMILIES[family]["options"].items():
        assert model.get_config()[key] == value, key
    _check(model, family, state, X)


@pytest.mark.parametrize("family", [f for f in ROTARY_ALONE if not FAMILIES[f].get("undetermined")])
def test_bare_file_at_another_resolution(family, tmp_path):
    state, path = _saved(family, tmp_path)
    model = keras_vit.from_weights(path, image_size=X_OTHER.shape[1:3])
    _check(model, family, state, X_OTHER)


def test_what_a_bare_file_cannot_tell_is_named(tmp_path):
    """DINOv3's _qkvb keys are LingBot-Vision's too (which pools the class token):
    one error naming the argument, then the argument settles it."""
    family = "vit_small_patch16_dinov3_qkvb"
    state, path = _saved(family, tmp_path)
    with pytest.raises(CheckpointError, match="classifier") as error:
        keras_vit.from_weights(path)
    assert "\n" not in str(error.value)
    model = keras_vit.from_weights(path, classifier="token_gap")
    _check(model, family, state, X)
