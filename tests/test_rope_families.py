"""The RoPE / SwiGLU families (DINOv3, EVA-02, RoPE-ViT axial and mixed) loaded
from a bare timm state dict alone, against an independent NumPy forward
(tests/numpy_eva.py) on every backend; the torch stage checks the same files
against timm itself (tests/test_interop_rope.py).

Each file is a state dict under timm eva.py's keys (the torch stage loads the
same generator's dicts into timm's own models, strictly), random weights at
trained-like scales, two blocks of the architecture's width.
"""

import json
import os

import keras
import numpy as np
import pytest
from eva_families import FAMILIES, WRITTEN, rotary_model, state_options
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


def _saved(family, tmp_path, name=None):
    """`family`'s random state dict, saved as `name` (default: named after the
    architecture, '<family>.safetensors', as a file named after its timm model)."""
    from safetensors.numpy import save_file

    state = random_eva_state(**state_options(family))
    path = os.path.join(tmp_path, name or f"{family}.safetensors")
    save_file(state, path)
    return state, path


def _reference(family, state, x):
    spec = FAMILIES[family]
    return eva_forward(state, x, heads=spec["sizes"]["heads"], **spec["forward"])


def _check(model, family, state, x):
    ours, theirs = keras.ops.convert_to_numpy(model(x)), _reference(family, state, x)
    assert ours.shape == theirs.shape, (family, ours.shape, theirs.shape)
    worst = float(np.max(np.abs(ours - theirs)))
    assert worst <= TOLERANCE, (family, worst)
    return worst


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_bare_file_alone(family, tmp_path):
    state, path = _saved(family, tmp_path)
    model = keras_vit.from_weights(path)
    for key, value in FAMILIES[family]["options"].items():
        assert model.get_config()[key] == value, key
    _check(model, family, state, X)


@pytest.mark.parametrize("family", ROTARY_ALONE)
def test_bare_file_at_another_resolution(family, tmp_path):
    state, path = _saved(family, tmp_path)
    model = keras_vit.from_weights(path, image_size=X_OTHER.shape[1:3])
    _check(model, family, state, X_OTHER)


@pytest.mark.parametrize("family", sorted(f for f in FAMILIES if "unnamed" in FAMILIES[f]))
def test_what_an_unnamed_bare_file_cannot_tell_is_named(family, tmp_path):
    """DINOv3's _qkvb keys are LingBot-Vision's too (which pools the class token): a
    file named after neither gives one error naming the argument (and that a file
    named after its architecture loads alone), then the argument settles it."""
    state, path = _saved(family, tmp_path, "model.safetensors")
    with pytest.raises(CheckpointError, match="pass classifier=") as error:
        keras_vit.from_weights(path)
    assert "\n" not in str(error.value)
    assert "vit_small_patch16_dinov3_qkvb.safetensors" in str(error.value)
    model = keras_vit.from_weights(path, **FAMILIES[family]["unnamed"])
    _check(model, family, state, X)


def test_a_path_names_the_architecture(tmp_path):
    """The file's name, a folder's above it, huggingface_hub's cache folder: one
    eva.py architecture named there is the file's; names of two say nothing; a
    config.json beside it wins; a name its keys contradict is one error naming both."""
    family = "vit_small_patch16_lingbot"
    for name in (
        "vit_small_patch16_lingbot.robbyant/model.safetensors",
        "models--belfner--vit_small_patch16_lingbot.robbyant/snapshots/0a1b/model.safetensors",
    ):
        os.makedirs(os.path.dirname(tmp_path / name))
        state, path = _saved(family, tmp_path, name)
        assert keras_vit.from_weights(path).classifier == "token", name
    folder = "vit_small_patch16_dinov3_qkvb.lvd1689m"
    os.makedirs(tmp_path / folder)
    _, named = _saved(family, tmp_path, f"{folder}/model.safetensors")
    assert keras_vit.from_weights(named).classifier == "token_gap"
    _, path = _saved(family, tmp_path, f"{folder}/vit_small_patch16_lingbot.safetensors")
    with pytest.raises(CheckpointError, match="pass classifier="):
        keras_vit.from_weights(path)
    with open(tmp_path / folder / "config.json", "w") as f:
        json.dump({"architecture": "vit_small_patch16_lingbot"}, f)
    assert keras_vit.from_weights(named).classifier == "token"  # config.json over the path
    _, path = _saved(family, tmp_path, "vit_small_patch16_rope_224.safetensors")
    with pytest.raises(
        CheckpointError, match="names timm's 'vit_small_patch16_rope_224', but its keys"
    ) as error:
        keras_vit.from_weights(path)
    assert "rope 'dinov3'" in str(error.value) and "rope 'axial'" in str(error.value)
    assert "\n" not in str(error.value)


def test_a_headless_bare_file_gives_its_features(tmp_path):
    """A state dict without 'head' keys (timm's num_classes=0, as DINOv3's and
    EVA-02's published files) states it has no head: the file alone builds the
    headless model, whose output is the reference's pooled features; a head asked
    for (include_top=True / classes=) is a fresh one of that width."""
    from safetensors.numpy import save_file

    family = "vit_small_patch16_dinov3"
    state = random_eva_state(**state_options(family), num_classes=0)
    path = os.path.join(tmp_path, f"{family}.safetensors")
    save_file(state, path)
    model = keras_vit.from_weights(path)
    assert not model.include_top
    _check(model, family, state, X)
    for asked in (dict(include_top=True, classes=5), dict(num_classes=5)):
        classifier = keras_vit.from_weights(path, **asked)
        assert classifier.include_top and classifier.num_classes == 5, asked


@pytest.mark.parametrize("case", sorted(WRITTEN))
def test_written_for_timm_and_read_back(case, tmp_path):
    """save_timm writes these models in timm eva.py's layout with the config.json
    that names them; from_weights reads the folder back bitwise, options and all
    (the torch stage runs the written files in timm)."""
    from keras_vit.checkpoint import layout, save_timm

    model = rotary_model(**WRITTEN[case])
    save_timm(model, str(tmp_path))
    back = keras_vit.from_weights(str(tmp_path))
    for key in ("rope", "qk_norm", "gated_mlp", "mlp_norm", "absolute_position_embedding"):
        assert back.get_config().get(key) == model.get_config().get(key), key
    expected, got = layout.model_params(model), layout.model_params(back)
    assert sorted(got) == sorted(expected)
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key], err_msg=key)


def test_transformers_writer_refuses_what_its_layout_would_drop(tmp_path):
    """transformers' ViT has no rotary embeddings: writing one there would drop
    them; the writer names the options instead."""
    from keras_vit.checkpoint import save_transformers

    with pytest.raises(CheckpointError, match=r"rope=\{'kind': 'mixed'.*gated_mlp=True"):
        save_transformers(rotary_model(rope="mixed", gated_mlp=True), str(tmp_path))


def test_attention_weights_with_rotary_embeddings(tmp_path):
    """The views see the turned queries and keys: every block's attention weights as
    the reference computes them, at the model's size and (a model of any size) at
    another grid, where the rotary angles come from the patch map."""
    family = "vit_small_patch16_rope_mixed_224"
    state, path = _saved(family, tmp_path)
    spec = FAMILIES[family]
    for model, x in (
        (keras_vit.from_weights(path), X),
        (keras_vit.from_weights(path, input_shape=(None, None, 3)), X_OTHER),
    ):
        expected = []
        eva_forward(
            state, x, heads=spec["sizes"]["heads"], attention_weights=expected, **spec["forward"]
        )
        got = model.attention_weights(x)
        assert len(got) == len(expected) == 2
        for ours, theirs in zip(got, expected):
            assert ours.shape == theirs.shape
            assert float(np.max(np.abs(ours - theirs))) <= TOLERANCE


@pytest.mark.parametrize("case", sorted(WRITTEN))
def test_keras_file_round_trip(case, tmp_path):
    """A .keras file of a rotary model loads with safe_mode on (every layer
    registered, its config in plain values) and computes the same."""
    model = rotary_model(**WRITTEN[case])
    path = str(tmp_path / "model.keras")
    model.save(path)
    back = keras.saving.load_model(path, safe_mode=True)
    x = images(2, 16, 24, seed=13)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(back(x)), keras.ops.convert_to_numpy(model(x))
    )
    assert back.get_config()["rope"] == model.get_config()["rope"]
