"""timm and transformers ViTs against their own forward (the torch stage,
tests/torch_stage.txt: KERAS_BACKEND=torch with timm and transformers installed).

Each supported family: a tiny model built by timm / transformers with random
weights (no download), saved in its own format, loaded by keras_vit through
`weights=`: logits (or the pooled representation of a headless model) within
1e-5 of the source's forward on the same images, float32. Then the way back:
keras_vit -> their format -> their own loader and forward equals keras_vit's
logits, and -> keras_vit again bitwise. Refused families fail by name before
any model is built.
"""

import os

import keras
import numpy as np
import pytest
from interop_testing import (
    NUM_CLASSES,
    TINY,
    images,
    import_timm,
    timm_family,
    timm_vit,
    torch_forward,
    transformers_vit,
)

import keras_vit
from keras_vit.checkpoint import CheckpointError
from keras_vit.checkpoint.refused import RefusedFeatureError

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "torch",
    reason="the torch stage runs it (tests/torch_stage.txt), with timm and transformers",
)

# float32 sums of a few dozen products of O(1) numbers (weights N(0, 0.25)), in two
# implementations: their rounding differs by a few ulps of the outputs' O(1) scale.
TOLERANCE = 1e-5
X = images(3, TINY["image_size"], TINY["image_size"], seed=11)


def _keras_outputs(model, x=X):
    return keras.ops.convert_to_numpy(model(x))


def _close(ours, theirs):
    """max |Δ| within TOLERANCE; returns it (the closing note reports the worst)."""
    assert ours.shape == theirs.shape
    worst = float(np.max(np.abs(ours - theirs)))
    assert worst <= TOLERANCE, worst
    return worst


def _save_timm(model, path, kind, model_args=None):
    """A timm model saved as timm saves it: 'hub' (save_for_hf: config.json +
    model.safetensors; `model_args` added to its config), 'bin' (save_for_hf's
    pytorch_model.bin), 'file' (a bare .safetensors state dict)."""
    import safetensors.torch
    from timm.models import save_for_hf

    if kind == "file":
        file = os.path.join(path, "vit.safetensors")
        os.makedirs(path, exist_ok=True)
        safetensors.torch.save_file(model.state_dict(), file)
        return file
    save_for_hf(model, path, model_args=model_args, safe_serialization=kind == "hub")
    return str(path)


TIMM_FAMILIES = {
    "class token": (dict(), "hub"),
    "class token, .bin": (dict(), "bin"),
    "class token, bare file": (dict(), "file"),
    "gap + fc_norm": (dict(class_token=False, global_pool="avg"), "hub"),
    # a bare file without a class token does not say its GELU's form: given
    "gap + fc_norm, bare file": (
        dict(class_token=False, global_pool="avg"),
        "file",
        dict(approximate_gelu=False),
    ),
    "gap, final norm before pooling": (
        dict(class_token=False, global_pool="avg", fc_norm=False),
        "hub",
    ),
    "class token + fc_norm": (dict(global_pool="token", fc_norm=True), "hub"),
    # the class token left out of the mean (MAE, BEiT fine-tunes): classifier='token_gap'
    "class token + avg pooling": (dict(global_pool="avg"), "hub"),
    "class token + avg pooling, bare file": (dict(global_pool="avg"), "file"),
    "class token + avg pooling, norm before pooling": (
        dict(global_pool="avg", fc_norm=False),
        "hub",
    ),
    "class token + registers + avg pooling": (
        dict(global_pool="avg", reg_tokens=2, no_embed_class=True),
        "hub",
    ),
    "no_embed_class": (dict(no_embed_class=True), "file"),
    "tanh GELU": (dict(act_layer="gelu_tanh"), "hub"),
    "headless": (dict(num_classes=0), "hub"),
    "headless gap + fc_norm": (dict(num_classes=0, class_token=False, global_pool="avg"), "hub"),
    # timm's options of its plain ViT: qk_norm, embed_norm_layer, final_norm=False.
    "qk_norm": (dict(qk_norm=True), "hub"),
    "qk_norm, bare file": (dict(qk_norm=True), "file"),
    "patch-embedding norm": (dict(embed_norm_layer="layernorm"), "hub"),
    "patch-embedding norm, bare file": (dict(embed_norm_layer="layernorm"), "file"),
    "no final norm": (dict(final_norm=False), "hub"),
    "no final norm + avg pooling": (dict(final_norm=False, global_pool="avg"), "hub"),
    # a bare file with a class token and no final norm does not say its pooling: given
    "no final norm, bare file": (dict(final_norm=False), "file", dict(classifier="token")),
    "qk_norm + patch-embedding norm + no final norm, gap": (
        dict(
            qk_norm=True,
            embed_norm_layer="layernorm",
            final_norm=False,
            class_token=False,
            global_pool="avg",
        ),
        "hub",
    ),
}


@pytest.mark.parametrize("family", sorted(TIMM_FAMILIES))
def test_timm_family(family, tmp_path):
    options, kind, *arguments = TIMM_FAMILIES[family]
    source = timm_vit(1, **options)
    weights = _save_timm(source, tmp_path / "timm", kind)
    headless = options.get("num_classes") == 0
    model = keras_vit.from_weights(
        weights, **TINY, include_top=not headless, **(arguments[0] if arguments else {})
    )
    assert model.approximate_gelu == (options.get("act_layer") == "gelu_tanh")
    assert model.fc_norm == (type(source.fc_norm).__name__ != "Identity")  # timm's own choice
    assert model.qk_norm == options.get("qk_norm", False)
    assert model.patch_embedding_norm == ("embed_norm_layer" in options)
    assert model.final_norm == options.get("final_norm", True)
    if source.cls_token is not None and source.global_pool == "avg":
        assert model.classifier == "token_gap"
    _close(_keras_outputs(model), torch_forward(source, X))


def test_timm_bare_clip_file_from_its_shapes(tmp_path):
    """A timm CLIP tower (vit_base_patch32_clip_224's kind, LayerNorm epsilon 1e-5)
    saved as a bare state dict: its sizes from the shapes, the epsilon from the CLIP
    shape (norm_pre, no patch-embedding bias), QuickGELU asked for; then timm's
    logits."""
    source = timm_family("vit_base_patch32_clip_224", 5)
    weights = _save_timm(source, tmp_path / "timm", "file")
    with pytest.raises(CheckpointError, match="does not say quick_gelu"):
        keras_vit.from_weights(weights, num_heads=TINY["num_heads"])
    model = keras_vit.from_weights(weights, num_heads=TINY["num_heads"], quick_gelu=False)
    assert model.layer_norm_epsilon == 1e-5 and model.pre_norm
    for key in ("hidden_size", "mlp_dim", "num_layers"):  # from the shapes
        assert getattr(model, key) == TINY[key], key
    assert tuple(model.patch_size) == (TINY["patch_size"],) * 2
    assert tuple(model.image_size) == (TINY["image_size"],) * 2
    _close(_keras_outputs(model), torch_forward(source, X))


def test_timm_bare_file_without_final_norm_asks_for_its_pooling(tmp_path):
    """A bare state dict of timm's final_norm=False with a class token shows no norm
    that would tell 'token' from 'avg' pooling: one error names classifier."""
    weights = _save_timm(timm_vit(2, final_norm=False, global_pool="avg"), tmp_path, "file")
    with pytest.raises(CheckpointError, match=r"does not say classifier: .*pass classifier="):
        keras_vit.from_weights(weights, **TINY)


TRANSFORMERS_FAMILIES = {
    "ViTForImageClassification": ("ViTForImageClassification", dict()),
    "ViTModel pooler": ("ViTModel", dict()),
    "ViTModel without pooler": ("ViTModel", dict(model_options=dict(add_pooling_layer=False))),
    # An epsilon large enough to show (1e-12 and 1e-6 give logits within 1e-6 here).
    "tanh GELU, epsilon 1e-3": (
        "ViTForImageClassification",
        dict(hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-3),
    ),
    "no qkv bias": ("ViTForImageClassification", dict(qkv_bias=False)),
    "pooler of another width": ("ViTModel", dict(pooler_output_size=5)),
}


@pytest.mark.parametrize("family", sorted(TRANSFORMERS_FAMILIES))
def test_transformers_family(family, tmp_path):
    model_class, options = TRANSFORMERS_FAMILIES[family]
    source = transformers_vit(1, model_class, **options)
    source.save_pretrained(tmp_path / "hf")
    model = keras_vit.from_weights(
        str(tmp_path / "hf"), **TINY, include_top=model_class != "ViTModel"
    )
    assert model.approximate_gelu == (options.get("hidden_act") == "gelu_pytorch_tanh")
    assert model.layer_norm_epsilon == options.get("layer_norm_eps", 1e-12)
    _close(_keras_outputs(model), torch_forward(source, X))


def test_timm_file_at_another_resolution(tmp_path):
    """A timm file loaded at another resolution resizes its position embeddings as
    timm does (`resample_abs_pos_embed`, what timm's checkpoint_filter_fn applies
    when it loads the file into a model of that size): timm's logits there."""
    timm = import_timm()
    source = timm_vit(2)
    weights = _save_timm(source, tmp_path / "timm", "hub")
    for size in (24, 12):  # up and down (timm antialiases when it shrinks)
        sizes = dict(TINY, image_size=size)
        theirs = timm_vit(0, sizes=sizes)
        filtered = timm.models.vision_transformer.checkpoint_filter_fn(source.state_dict(), theirs)
        theirs.load_state_dict(filtered)
        model = keras_vit.from_weights(weights, **sizes)
        x = images(2, size, size, seed=size)
        _close(_keras_outputs(model, x), torch_forward(theirs.eval(), x))


def test_transformers_folder_at_another_resolution(tmp_path):
    """A transformers folder loaded at another resolution resizes its position
    embeddings as transformers' ViT does (`interpolate_pos_encoding=True`)."""
    import torch

    source = transformers_vit(2).eval()
    source.save_pretrained(tmp_path / "hf")
    for size in (24, 12):
        model = keras_vit.from_weights(str(tmp_path / "hf"), **dict(TINY, image_size=size))
        x = images(2, size, size, seed=size)
        with torch.no_grad():
            pixels = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
            theirs = source(pixels, interpolate_pos_encoding=True).logits.numpy()
        _close(_keras_outputs(model, x), theirs)


def test_official_resize_chosen_explicitly(tmp_path):
    """posemb_resize='official' resizes a timm file's position embeddings with the
    official method: bitwise what the same weights give as an .npz."""
    weights = _save_timm(timm_vit(2), tmp_path / "timm", "hub")
    at_24 = dict(TINY, image_size=24)
    model = keras_vit.from_weights(weights, **at_24, posemb_resize="official")
    same = keras_vit.from_weights(weights, **TINY)
    # The arrays alone (save_checkpoint refuses a model of timm's options: an .npz has none).
    keras_vit.checkpoint.save_npz(tmp_path / "same.npz", keras_vit.checkpoint.model_params(same))
    from_npz = keras_vit.from_weights(str(tmp_path / "same.npz"), **at_24, approximate_gelu=False)
    assert model.grid_size == (6, 6)
    np.testing.assert_array_equal(
        _keras_outputs(model, images(2, 24, 24)), _keras_outputs(from_npz, images(2, 24, 24))
    )


# -- The way back -------------------------------------------------------------------

WRITTEN = {
    "token, tanh GELU (the official model)": dict(),
    "token, exact GELU": dict(approximate_gelu=False),
    "gap + fc_norm": dict(classifier="gap", fc_norm=True, approximate_gelu=False),
    "gap, norm before pooling": dict(classifier="gap"),
    "token + fc_norm": dict(fc_norm=True),
    "token_gap + fc_norm": dict(classifier="token_gap", fc_norm=True, approximate_gelu=False),
    "headless": dict(include_top=False),
    "qk_norm": dict(qk_norm=True),
    "patch-embedding norm": dict(patch_embedding_norm=True),
    "no final norm": dict(final_norm=False),
    "gap, no final norm, qk_norm, patch-embedding norm": dict(
        classifier="gap",
        final_norm=False,
        qk_norm=True,
        patch_embedding_norm=True,
        approximate_gelu=False,
    ),
}


def _random_keras_vit(seed, **arguments):
    """A keras_vit model with every weight drawn from N(0, 0.25)."""
    model = keras_vit.VisionTransformer(**TINY, num_classes=NUM_CLASSES, **arguments)
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in model.get_weights()])
    return model


@pytest.mark.parametrize("case", sorted(WRITTEN))
def test_written_for_timm(case, tmp_path):
    """save_timm: timm.create_model('local-dir:...', pretrained=True) computes our
    logits; reading the files back gives every array bitwise."""
    timm = import_timm()
    ours = _random_keras_vit(3, **WRITTEN[case])
    keras_vit.checkpoint.save_timm(ours, tmp_path / "timm")
    theirs = timm.create_model(f"local-dir:{tmp_path / 'timm'}", pretrained=True).eval()
    _close(_keras_outputs(ours), torch_forward(theirs, X))
    _same_arrays(
        ours, keras_vit.from_weights(str(tmp_path / "timm"), **TINY, include_top=ours.include_top)
    )


TRANSFORMERS_WRITTEN = {
    "ViTForImageClassification": ("ViTForImageClassification", dict(), {}),
    "ViTForImageClassification, exact GELU, epsilon 1e-3": (
        "ViTForImageClassification",
        dict(approximate_gelu=False, layer_norm_epsilon=1e-3),
        {},
    ),
    "ViTModel with pooler": (
        "ViTModel",
        dict(include_top=False, representation_size=6),
        {},
    ),
    "ViTModel": ("ViTModel", dict(include_top=False), dict(add_pooling_layer=False)),
}


@pytest.mark.parametrize("case", sorted(TRANSFORMERS_WRITTEN))
def test_written_for_transformers(case, tmp_path):
    """save_transformers: from_pretrained computes our outputs; back bitwise."""
    import transformers

    model_class, arguments, load_options = TRANSFORMERS_WRITTEN[case]
    ours = _random_keras_vit(4, **arguments)
    keras_vit.checkpoint.save_transformers(ours, tmp_path / "hf")
    theirs = (
        getattr(transformers, model_class).from_pretrained(tmp_path / "hf", **load_options).eval()
    )
    _close(_keras_outputs(ours), torch_forward(theirs, X))
    _same_arrays(
        ours, keras_vit.from_weights(str(tmp_path / "hf"), **TINY, include_top=ours.include_top)
    )


# The norms timm's plain ViT may add or leave out, which a written file must keep.
NORMS = ("qk_norm", "patch_embedding_norm", "final_norm")


def _same_arrays(model, again):
    params, again_params = (keras_vit.checkpoint.model_params(m) for m in (model, again))
    assert list(again_params) == list(params)
    for key, value in params.items():
        np.testing.assert_array_equal(again_params[key], value, err_msg=key)
    for option in ("approximate_gelu", "layer_norm_epsilon", "fc_norm", "classifier", *NORMS):
        assert getattr(again, option) == getattr(model, option), option


# -- Refused families ----------------------------------------------------------------

TIMM_REFUSED = {
    "distillation token": ("deit_tiny_distilled_patch16_224", dict()),
    # Registers, LayerScale, norm_pre, MAP and quick_gelu load: tests/test_interop_families.py.
    "position embeddings on register tokens": ("vit_tiny_patch16_224", dict(reg_tokens=2)),
    # qk_norm, embed_norm_layer='layernorm' and final_norm=False load (TIMM_FAMILIES).
    "patch-embedding norm": ("vit_tiny_patch16_224", dict(embed_norm_layer="rmsnorm")),
    "attention pooling": ("vit_tiny_patch16_224", dict(global_pool="map")),  # beside a class token
    "activation": ("vit_tiny_patch16_224", dict(act_layer="silu")),
    "gated MLP": ("vit_giant_patch14_dinov2", dict()),  # SwiGLU
    # timm's config.json leaves drop rates out unless given: a config that says it.
    "patch dropout": ("vit_tiny_patch16_224", dict(patch_drop_rate=0.1)),
}


@pytest.mark.parametrize("feature", sorted(TIMM_REFUSED))
def test_timm_refused(feature, tmp_path):
    timm = import_timm()
    name, options = TIMM_REFUSED[feature]
    source = timm.create_model(
        name,
        pretrained=False,
        img_size=TINY["image_size"],
        patch_size=TINY["patch_size"],
        embed_dim=TINY["hidden_size"],
        depth=TINY["num_layers"],
        num_heads=TINY["num_heads"],
        mlp_ratio=TINY["mlp_dim"] / TINY["hidden_size"],
        num_classes=NUM_CLASSES,
        **options,
    )
    recorded = {"patch_drop_rate": 0.1} if "patch_drop_rate" in options else None
    weights = _save_timm(source, tmp_path / "timm", "hub", recorded)
    with pytest.raises(RefusedFeatureError, match=feature):
        keras_vit.from_weights(weights, **TINY)


def test_timm_hybrid_refused(tmp_path):
    timm = import_timm()
    source = timm.create_model(
        "vit_tiny_r_s16_p8_224", pretrained=False, img_size=32, depth=1, num_classes=NUM_CLASSES
    )
    weights = _save_timm(source, tmp_path / "timm", "file")
    with pytest.raises(RefusedFeatureError, match="hybrid ResNet"):
        keras_vit.from_weights(weights, **TINY)


def test_transformers_masked_image_modeling_refused(tmp_path):
    source = transformers_vit(1, "ViTForMaskedImageModeling", num_labels=2)
    source.save_pretrained(tmp_path / "hf")
    with pytest.raises(RefusedFeatureError, match="masked image modeling decoder"):
        keras_vit.from_weights(str(tmp_path / "hf"), **TINY)
