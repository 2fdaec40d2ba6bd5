"""DINOv3, EVA-02 and the RoPE-ViTs against timm 1.0.31's own forward, and a
transformers DINOv3 folder against transformers' (the torch stage,
tests/torch_stage.txt: KERAS_BACKEND=torch, timm and transformers installed).

timm's model of each architecture (pretrained=False, two blocks of its width) takes
the random state dict of tests/numpy_eva.py strictly (so that the main pass's
files, tests/test_rope_families.py, are timm's own layout); its `state_dict()` saved
to a bare .safetensors named after it (DINOv3's _qkvb keys are LingBot-Vision's too:
the name tells them apart) and loaded by `keras_vit.from_weights(path)` alone gives
timm's logits within 1e-5, float32; so does the NumPy reference; and at another
resolution, against timm made at that resolution (`image_size=`).
"""

import os

import keras
import numpy as np
import pytest
from eva_families import DEPTH, FAMILIES, IMAGE_SIZE, WRITTEN, rotary_model, state_options
from interop_testing import images, import_timm, randomized, torch_forward
from numpy_eva import eva_forward, random_eva_state

import keras_vit

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "torch",
    reason="the torch stage runs it (tests/torch_stage.txt), with timm and transformers",
)

TOLERANCE = 1e-5
X = images(2, IMAGE_SIZE, IMAGE_SIZE, seed=5)


def _timm(family, image_size):
    """timm's `family` at `image_size`, two blocks, the NumPy state (its learned
    position embedding resampled by timm's own filter where the size differs)."""
    import torch

    timm = import_timm()  # before any timm module: torchvision's op registrations
    from timm.models import eva

    spec = FAMILIES[family]
    model = timm.create_model(
        family, pretrained=False, img_size=image_size, depth=DEPTH, num_classes=3
    ).eval()
    state = {k: torch.from_numpy(v) for k, v in random_eva_state(**state_options(family)).items()}
    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    if "pos_embed" in spec["state"] and size != (IMAGE_SIZE, IMAGE_SIZE):
        state = eva.checkpoint_filter_fn(state, model)
    model.load_state_dict(state, strict=True)
    return model


def _close(ours, theirs):
    worst = float(np.max(np.abs(ours - theirs)))
    assert worst <= TOLERANCE, worst
    return worst


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_timm_family(family, tmp_path):
    import safetensors.torch

    source = _timm(family, IMAGE_SIZE)
    # named after its architecture: DINOv3's _qkvb keys are LingBot-Vision's too
    path = os.path.join(tmp_path, f"{family}.safetensors")
    safetensors.torch.save_file(source.state_dict(), path)
    model = keras_vit.from_weights(path)
    theirs = torch_forward(source, X)
    _close(keras.ops.convert_to_numpy(model(X)), theirs)
    # the NumPy reference of the main pass, against timm
    state = {k: v.numpy() for k, v in source.state_dict().items()}
    spec = FAMILIES[family]
    _close(eva_forward(state, X, heads=spec["sizes"]["heads"], **spec["forward"]), theirs)
    # another resolution, not square; timm made at it
    patch = spec["sizes"]["patch"]
    other = (5 * patch, 7 * patch)
    x = images(2, *other, seed=6)
    resized = keras_vit.from_weights(path, image_size=other)
    _close(keras.ops.convert_to_numpy(resized(x)), torch_forward(_timm(family, other), x))


def test_timm_hub_folder_names_what_the_bare_file_cannot(tmp_path):
    """timm's save_for_hf writes the architecture into config.json: the _qkvb file
    loads from its folder alone."""
    import_timm()
    from timm.models import save_for_hf

    family = "vit_small_patch16_dinov3_qkvb"
    source = _timm(family, IMAGE_SIZE)
    save_for_hf(source, str(tmp_path), safe_serialization=True)
    model = keras_vit.from_weights(str(tmp_path))
    assert model.classifier == "token_gap"
    _close(keras.ops.convert_to_numpy(model(X)), torch_forward(source, X))


def _transformers_dinov3(seed, **options):
    import_timm()  # transformers imports torchvision too: its op registrations
    import transformers

    config = transformers.DINOv3ViTConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        patch_size=8,
        image_size=32,
        num_register_tokens=2,
        **options,
    )
    return randomized(transformers.DINOv3ViTModel(config), seed, scale=0.3)


@pytest.mark.parametrize("gated", [False, True])
def test_transformers_dinov3_folder(gated, tmp_path):
    options = dict(use_gated_mlp=True, hidden_act="silu") if gated else {}
    source = _transformers_dinov3(7, **options)
    source.save_pretrained(str(tmp_path))
    # headless (DINOv3ViTModel, no classifier): the folder alone gives its pooled
    # features, as any file that states it has no head
    model = keras_vit.from_weights(str(tmp_path))
    assert not model.include_top
    assert model.rope["kind"] == "dinov3" and model.gated_mlp == gated
    x = images(2, 32, 32, seed=8)
    _close(keras.ops.convert_to_numpy(model(x)), torch_forward(source, x))
    x = images(2, 40, 56, seed=9)  # transformers' DINOv3 takes any grid as it is
    resized = keras_vit.from_weights(str(tmp_path), image_size=(40, 56))
    _close(keras.ops.convert_to_numpy(resized(x)), torch_forward(source, x))
    # a head asked for: a fresh one, on the same features
    classifier = keras_vit.from_weights(str(tmp_path), include_top=True, classes=5)
    assert classifier.include_top and classifier.num_classes == 5


@pytest.mark.parametrize("case", sorted(WRITTEN))
def test_written_by_keras_vit_run_by_timm(case, tmp_path):
    """save_timm's eva.py folder, built by timm from its config.json alone
    (`timm.create_model('local-dir:' + folder, pretrained=True)`), gives keras_vit's
    logits."""
    from keras_vit.checkpoint import save_timm

    timm = import_timm()
    model = rotary_model(**WRITTEN[case])
    save_timm(model, str(tmp_path))
    source = timm.create_model(f"local-dir:{tmp_path}", pretrained=True).eval()
    x = images(2, 16, 24, seed=12)
    _close(torch_forward(source, x), keras.ops.convert_to_numpy(model(x)))
