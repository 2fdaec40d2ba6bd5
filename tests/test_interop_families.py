"""The ViT families people fine-tune today against timm's and transformers' own
forward (the torch stage, tests/torch_stage.txt): DeiT III, DINOv2 (with and
without registers), SigLIP's and CLIP's vision towers. Each: a tiny model built
by timm / transformers with random weights (no download), saved in its own
format, loaded by keras_vit through `weights=` with nothing but the sizes given:
outputs (logits, or the pooled features of a headless tower) within 1e-5 of the
source's at the checkpoint's resolution and at another one (position embeddings
resized as the source resizes them); then written back (`save_timm`,
`save_transformers` where the format allows) and computed by the source's code.
The worst |Δ| of each case is printed (`-s`)."""

import json

import keras
import numpy as np
import pytest
from interop_testing import (
    TIMM_FAMILIES,
    TINY,
    TRANSFORMERS_FAMILIES,
    images,
    import_timm,
    timm_family,
    torch_forward,
    transformers_family,
    transformers_family_forward,
)

import keras_vit
from keras_vit.checkpoint import CheckpointError

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "torch",
    reason="the torch stage runs it (tests/torch_stage.txt), with timm and transformers",
)

TOLERANCE = 1e-5
X = images(3, TINY["image_size"], TINY["image_size"], seed=11)
SIZES = {k: TINY[k] for k in ("patch_size", "hidden_size", "mlp_dim", "num_heads", "num_layers")}


def _close(ours, theirs, what):
    ours = keras.ops.convert_to_numpy(ours)
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    worst = float(np.max(np.abs(ours - theirs)))
    print(f"\n{what}: worst |Δ| {worst:.2e}")
    assert worst <= TOLERANCE, worst
    return worst


@pytest.mark.parametrize("family", sorted(TIMM_FAMILIES))
def test_timm_family(family, tmp_path):
    timm = import_timm()
    architecture, options, expected = TIMM_FAMILIES[family]
    source = timm_family(architecture, 1, **options)
    timm.models.save_for_hf(source, tmp_path / "timm", safe_serialization=True)
    headless = options.get("num_classes") == 0
    model = keras_vit.from_weights(str(tmp_path / "timm"), **SIZES, include_top=not headless)
    for option, value in expected.items():
        assert getattr(model, option) == value, option
    assert (model.layer_scale_init is not None) == (
        "siglip" not in architecture
        and "clip" not in architecture
        and "reg4_gap" not in architecture
    )
    assert model.image_size == (TINY["image_size"],) * 2
    _close(model(X), torch_forward(source, X), f"timm {family}")

    # At another resolution: timm's own filter resizes the file for a model of that size.
    for size in (24, 12):
        theirs = timm_family(architecture, 0, image_size=size, **options)
        filtered = timm.models.vision_transformer.checkpoint_filter_fn(source.state_dict(), theirs)
        theirs.load_state_dict(filtered)
        ours = keras_vit.from_weights(
            str(tmp_path / "timm"), **SIZES, image_size=size, include_top=not headless
        )
        x = images(2, size, size, seed=size)
        _close(ours(x), torch_forward(theirs.eval(), x), f"timm {family} at {size}")

    # Written back: timm's own loader and forward.
    keras_vit.checkpoint.save_timm(model, tmp_path / "back")
    again = timm.create_model(f"local-dir:{tmp_path / 'back'}", pretrained=True).eval()
    _close(model(X), torch_forward(again, X), f"timm {family} written back")


@pytest.mark.parametrize("model_class", sorted(TRANSFORMERS_FAMILIES))
def test_transformers_family(model_class, tmp_path):
    source = transformers_family(model_class, 1)
    source.save_pretrained(tmp_path / "hf")
    with_head = model_class.endswith("WithProjection")
    model = keras_vit.from_weights(str(tmp_path / "hf"), **SIZES, include_top=with_head)
    for option, value in TRANSFORMERS_FAMILIES[model_class][2].items():
        assert getattr(model, option) == value, option
    _close(model(X), transformers_family_forward(source, X), f"transformers {model_class}")
    # At another resolution: DINOv2 interpolates by itself, the others when asked.
    kwargs = {} if "Dinov2" in model_class else {"interpolate_pos_encoding": True}
    for size in (24, 12):
        ours = keras_vit.from_weights(
            str(tmp_path / "hf"), **SIZES, image_size=size, include_top=with_head
        )
        x = images(2, size, size, seed=size)
        _close(
            ours(x),
            transformers_family_forward(source, x, **kwargs),
            f"transformers {model_class} at {size}",
        )
    # Written back for timm, whose own forward gives the same features.
    if not with_head:
        timm = import_timm()
        keras_vit.checkpoint.save_timm(model, tmp_path / "timm")
        again = timm.create_model(f"local-dir:{tmp_path / 'timm'}", pretrained=True).eval()
        _close(model(X), torch_forward(again, X), f"transformers {model_class} -> timm")


def test_transformers_dinov2_classifier_refused(tmp_path):
    import_timm()
    import transformers

    from keras_vit.checkpoint.refused import RefusedFeatureError

    config = transformers.Dinov2Config(
        hidden_size=8, num_hidden_layers=1, num_attention_heads=2, image_size=16, patch_size=4
    )
    transformers.Dinov2ForImageClassification(config).save_pretrained(tmp_path / "hf")
    with pytest.raises(RefusedFeatureError, match="class token and patch mean head"):
        keras_vit.from_weights(str(tmp_path / "hf"), **SIZES)


# timm family -> the transformers class its headless model is written as (None: no
# transformers class computes it, and save_transformers says so).
WRITTEN_FOR_TRANSFORMERS = {
    "deit3": None,  # patches-only position embeddings beside a class token
    "dinov2": "Dinov2Model",
    "dinov2_reg4": None,  # transformers' registers model gives the class token a position
    "siglip": "SiglipVisionModel",
    "siglip_gelu_tanh": "SiglipVisionModel",
    "siglip headless": "SiglipVisionModel",
    "clip": "CLIPVisionModel",
    "clip_quickgelu": "CLIPVisionModel",
    "reg4 gap": None,  # registers with average pooling
}


@pytest.mark.parametrize("family", sorted(TIMM_FAMILIES))
def test_timm_family_written_for_transformers(family, tmp_path):
    """save_transformers writes each family as its transformers class, whose own forward
    gives the model's features; what no class computes is refused, naming save_timm."""
    import transformers

    timm = import_timm()
    architecture, options, _ = TIMM_FAMILIES[family]
    source = timm_family(architecture, 1, **options)
    timm.models.save_for_hf(source, tmp_path / "timm", safe_serialization=True)
    model = keras_vit.from_weights(str(tmp_path / "timm"), **SIZES, include_top=False)
    written = WRITTEN_FOR_TRANSFORMERS[family]
    if written is None:
        with pytest.raises(CheckpointError, match="save_timm"):
            keras_vit.checkpoint.save_transformers(model, tmp_path / "hf")
        return
    keras_vit.checkpoint.save_transformers(model, tmp_path / "hf")
    with open(tmp_path / "hf" / "config.json") as f:
        assert json.load(f)["architectures"] == [written]
    theirs = getattr(transformers, written).from_pretrained(tmp_path / "hf").eval()
    _close(model(X), transformers_family_forward(theirs, X), f"timm {family} -> transformers")
    again = keras_vit.from_weights(str(tmp_path / "hf"), **SIZES)
    assert not again.include_top  # a transformers *Model folder (no classifier) is headless
    _close(
        again(X),
        keras.ops.convert_to_numpy(model(X)),
        f"timm {family} -> transformers -> keras_vit",
    )


@pytest.mark.parametrize("model_class", sorted(TRANSFORMERS_FAMILIES))
def test_transformers_family_written_back(model_class, tmp_path):
    """Each transformers tower, read and written by keras_vit, is the same class again
    and computes the source's features; read back, every array is the same."""
    import transformers

    source = transformers_family(model_class, 1)
    source.save_pretrained(tmp_path / "hf")
    with_head = model_class.endswith("WithProjection")
    model = keras_vit.from_weights(str(tmp_path / "hf"), **SIZES, include_top=with_head)
    keras_vit.checkpoint.save_transformers(model, tmp_path / "back")
    again = getattr(transformers, model_class).from_pretrained(tmp_path / "back").eval()
    _close(model(X), transformers_family_forward(again, X), f"{model_class} written back")
    reread = keras_vit.from_weights(str(tmp_path / "back"), **SIZES, include_top=with_head)
    params, reread_params = (keras_vit.checkpoint.model_params(m) for m in (model, reread))
    assert list(reread_params) == list(params)
    for key, value in params.items():
        np.testing.assert_array_equal(reread_params[key], value, err_msg=key)
