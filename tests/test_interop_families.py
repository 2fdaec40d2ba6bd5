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

import keras
import numpy as np
import pytest
from interop_testing import NUM_CLASSES, TINY, images, import_timm, randomized, torch_forward

import keras_vit

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


# timm architecture -> (its options beside the sizes, the keras_vit options the file gives)
TIMM = {
    "deit3": (
        "deit3_small_patch16_224",
        dict(),
        dict(position_embedding_for_class_token=False),  # and LayerScale (its init is not in it)
    ),
    "dinov2": ("vit_small_patch14_dinov2", dict(), dict(layer_scale_init=1e-5)),
    "dinov2_reg4": (
        "vit_small_patch14_reg4_dinov2",
        dict(),
        dict(num_registers=4, position_embedding_for_class_token=False),
    ),
    "siglip": ("vit_base_patch16_siglip_224", dict(), dict(classifier="map")),
    "siglip_gelu_tanh": (
        "vit_base_patch32_siglip_256",
        dict(),
        dict(classifier="map", approximate_gelu=True),
    ),
    "siglip headless": (
        "vit_base_patch16_siglip_224",
        dict(num_classes=0),
        dict(classifier="map"),
    ),
    "clip": (
        "vit_base_patch16_clip_224",
        dict(),
        dict(pre_norm=True, patch_embedding_bias=False, layer_norm_epsilon=1e-5),
    ),
    "clip_quickgelu": (
        "vit_base_patch16_clip_quickgelu_224",
        dict(),
        dict(pre_norm=True, quick_gelu=True, layer_norm_epsilon=1e-5),
    ),
    "reg4 gap": (
        "vit_base_patch16_reg4_gap_256",
        dict(),
        dict(num_registers=4, classifier="gap", fc_norm=True),
    ),
}


def _timm_model(architecture, seed, image_size=TINY["image_size"], **options):
    timm = import_timm()
    options.setdefault("num_classes", NUM_CLASSES)
    model = timm.create_model(
        architecture,
        pretrained=False,
        img_size=image_size,
        patch_size=TINY["patch_size"],
        embed_dim=TINY["hidden_size"],
        depth=TINY["num_layers"],
        num_heads=TINY["num_heads"],
        mlp_ratio=TINY["mlp_dim"] / TINY["hidden_size"],
        **options,
    )
    return randomized(model, seed)


@pytest.mark.parametrize("family", sorted(TIMM))
def test_timm_family(family, tmp_path):
    timm = import_timm()
    architecture, options, expected = TIMM[family]
    source = _timm_model(architecture, 1, **options)
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
        theirs = _timm_model(architecture, 0, image_size=size, **options)
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


# transformers model class -> (its config class, config options, keras_vit options)
TRANSFORMERS = {
    "Dinov2Model": ("Dinov2Config", dict(), dict(layer_scale_init=1.0)),
    "Dinov2WithRegistersModel": (
        "Dinov2WithRegistersConfig",
        dict(num_register_tokens=2),
        dict(num_registers=2, position_embedding_for_class_token=True),
    ),
    "SiglipVisionModel": ("SiglipVisionConfig", dict(), dict(classifier="map")),
    "CLIPVisionModel": (
        "CLIPVisionConfig",
        dict(),
        dict(fc_norm=True, pre_norm=True, quick_gelu=True, patch_embedding_bias=False),
    ),
    "CLIPVisionModelWithProjection": (
        "CLIPVisionConfig",
        dict(projection_dim=5, hidden_act="gelu"),
        dict(fc_norm=True, pre_norm=True, quick_gelu=False, num_classes=5),
    ),
}


def _transformers_model(model_class, seed, **options):
    import_timm()  # torchvision importable, for transformers' lazy imports
    import transformers

    config_class, config_options, _ = TRANSFORMERS[model_class]
    config = getattr(transformers, config_class)(
        hidden_size=TINY["hidden_size"],
        num_hidden_layers=TINY["num_layers"],
        num_attention_heads=TINY["num_heads"],
        image_size=TINY["image_size"],
        patch_size=TINY["patch_size"],
        **(
            {"mlp_ratio": TINY["mlp_dim"] // TINY["hidden_size"]}
            if "Dinov2" in config_class
            else {"intermediate_size": TINY["mlp_dim"]}
        ),
        **config_options,
        **options,
    )
    return randomized(getattr(transformers, model_class)(config), seed)


def _transformers_forward(module, x, **kwargs):
    import torch

    with torch.no_grad():
        out = module(torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))), **kwargs)
    value = getattr(out, "image_embeds", None)
    return (value if value is not None else out.pooler_output).numpy()


@pytest.mark.parametrize("model_class", sorted(TRANSFORMERS))
def test_transformers_family(model_class, tmp_path):
    source = _transformers_model(model_class, 1)
    source.save_pretrained(tmp_path / "hf")
    with_head = model_class.endswith("WithProjection")
    model = keras_vit.from_weights(str(tmp_path / "hf"), **SIZES, include_top=with_head)
    for option, value in TRANSFORMERS[model_class][2].items():
        assert getattr(model, option) == value, option
    _close(model(X), _transformers_forward(source, X), f"transformers {model_class}")
    # At another resolution: DINOv2 interpolates by itself, the others when asked.
    kwargs = {} if "Dinov2" in model_class else {"interpolate_pos_encoding": True}
    for size in (24, 12):
        ours = keras_vit.from_weights(
            str(tmp_path / "hf"), **SIZES, image_size=size, include_top=with_head
        )
        x = images(2, size, size, seed=size)
        _close(
            ours(x),
            _transformers_forward(source, x, **kwargs),
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
