"""Checkpoints from the file alone (keras_vit.checkpoint.sizes, docs/checkpoints.md):
a bare timm state dict's shapes give the model's sizes; what they cannot tell
(heads, a CLIP tower's QuickGELU, a class-token-free model's GELU form) is inferred
only where every published timm ViT of that shape agrees, else one error naming the
argument; a model of other sizes is refused with the sizes and the flags that fit;
timm's class token with average pooling (`classifier='token_gap'`) computes what its
pieces compute. Files written by save_timm from random keras_vit models; no torch."""

import json

import keras
import numpy as np
import pytest
from interop_testing import images

import keras_vit
from keras_vit.checkpoint import CheckpointError, interop, save_timm
from keras_vit.checkpoint.sizes import PUBLISHED_HEADS

SMALL = dict(image_size=12, patch_size=4, mlp_dim=16, num_layers=1, num_classes=3)
X = images(2, 12, 12, seed=3)


def _random(seed=0, **arguments):
    """A VisionTransformer with every weight drawn from N(0, 0.25) (far from any
    initialiser's, so a weight that is not loaded shows)."""
    model = keras_vit.VisionTransformer(**{**SMALL, **arguments})
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in model.get_weights()])
    return model


def _bare(model, tmp_path):
    """`model` written as a bare timm state dict (no config.json beside it)."""
    return str(save_timm(model, tmp_path / "vit.safetensors"))


def _outputs(model, x=X):
    return keras.ops.convert_to_numpy(model(x))


def _same_model(loaded, source):
    for key in ("patch_size", "hidden_size", "mlp_dim", "num_heads", "num_layers"):
        assert getattr(loaded, key) == getattr(source, key), key
    for a, b in zip(loaded.get_weights(), source.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(_outputs(loaded), _outputs(source))


def test_a_published_width_builds_from_the_file_alone(tmp_path):
    # 192 wide with a class token: every such timm ViT (DeiT / ViT Ti) has 3 heads.
    source = _random(hidden_size=192, num_heads=PUBLISHED_HEADS[192], approximate_gelu=False)
    path = _bare(source, tmp_path)
    _same_model(keras_vit.from_weights(path), source)


def test_heads_no_published_model_settles_are_asked_for(tmp_path):
    source = _random(hidden_size=8, num_heads=2, approximate_gelu=False)
    path = _bare(source, tmp_path)
    with pytest.raises(
        CheckpointError, match=r"does not say num_heads: .*; pass num_heads=\.\.\.$"
    ):
        keras_vit.from_weights(path)
    # the other sizes from the shapes, the heads from the caller
    _same_model(keras_vit.from_weights(path, num_heads=2), source)


def test_a_clip_shaped_file_takes_epsilon_from_its_shape_and_asks_for_quick_gelu(tmp_path):
    # norm_pre and no patch-embedding bias: a CLIP tower, all of timm's of epsilon 1e-5
    source = _random(
        hidden_size=192,
        num_heads=3,
        approximate_gelu=False,
        pre_norm=True,
        patch_embedding_bias=False,
        layer_norm_epsilon=1e-5,
    )
    path = _bare(source, tmp_path)
    with pytest.raises(CheckpointError, match=r"does not say quick_gelu: .*LAION"):
        keras_vit.from_weights(path)
    loaded = keras_vit.from_weights(path, quick_gelu=False)
    assert loaded.layer_norm_epsilon == 1e-5 and not loaded.quick_gelu
    _same_model(loaded, source)
    assert keras_vit.from_weights(path, quick_gelu=True).quick_gelu


def test_without_a_class_token_the_gelu_form_is_asked_for(tmp_path):
    source = _random(hidden_size=192, num_heads=3, classifier="gap", approximate_gelu=True)
    path = _bare(source, tmp_path)
    meta = interop.open_file(path)[2]
    assert "approximate_gelu" not in meta  # no value stands for what the file does not say
    with pytest.raises(CheckpointError, match="does not say approximate_gelu"):
        keras_vit.from_weights(path, num_heads=3)
    _same_model(keras_vit.from_weights(path, num_heads=3, approximate_gelu=True), source)


def test_a_file_with_its_config_needs_no_argument(tmp_path):
    source = _random(hidden_size=8, num_heads=2, classifier="gap", approximate_gelu=True)
    save_timm(source, tmp_path / "hub")  # config.json with model_args
    _same_model(keras_vit.from_weights(str(tmp_path / "hub")), source)


def test_a_model_of_other_sizes_is_told_the_files(tmp_path, caplog):
    path = _bare(_random(hidden_size=192, num_heads=3, approximate_gelu=False), tmp_path)
    model = keras_vit.VisionTransformer(**{**SMALL, "hidden_size": 16, "num_heads": 2})
    # the heads every published 192-wide timm ViT has join the sizes to set
    message = (
        r"has hidden_size=192, num_heads=3; the model 'vit' has hidden_size=16, num_heads=2: "
        r"build it with the file's .*--config\.model_overrides\.hidden_size=192 "
        r"--config\.model_overrides\.num_heads=3\)"
    )
    with pytest.raises(CheckpointError, match=message):
        keras_vit.load_weights(model, path)
    # A built model of the file's sizes loads it; what the file leaves open is logged.
    fits = keras_vit.VisionTransformer(**{**SMALL, "hidden_size": 8, "num_heads": 2})
    (tmp_path / "8").mkdir()
    other = _bare(_random(hidden_size=8, num_heads=2, approximate_gelu=False), tmp_path / "8")
    with caplog.at_level("WARNING", logger="keras_vit"):
        keras_vit.load_weights(fits, other)
    assert "does not say num_heads" in caplog.text and "num_heads=2 is used" in caplog.text


@pytest.mark.parametrize("registers", [0, 2])
def test_class_token_with_average_pooling_is_the_mean_of_the_patches(tmp_path, registers):
    """timm's class_token=True, global_pool='avg' with fc_norm (MAE, BEiT fine-tunes):
    a bare file says it (a class token beside fc_norm and no final norm: timm's
    default for 'avg'); the logits are the head of fc_norm of the mean of the patch
    tokens, computed here from the encoder's output in numpy."""
    options = dict(hidden_size=8, num_heads=2, approximate_gelu=False, fc_norm=True)
    if registers:  # timm's registers go with no_embed_class
        options.update(num_registers=registers, position_embedding_for_class_token=False)
    source = _random(classifier="token_gap", **options)
    path = _bare(source, tmp_path)
    model = keras_vit.from_weights(path, num_heads=2)
    assert model.classifier == "token_gap" and model.fc_norm
    _same_model(model, source)
    save_timm(source, tmp_path / "hub")  # config.json: class_token, global_pool='avg'
    _same_model(keras_vit.from_weights(str(tmp_path / "hub")), source)
    encoder = keras.Model(model.input, model.get_layer("Transformer").output)
    tokens = _outputs(encoder).astype(np.float64)  # the blocks' output (fc_norm: no final norm)
    assert tokens.shape == (2, 1 + registers + 9, 8)
    pooled = tokens[:, 1 + registers :].mean(axis=1)  # the patches alone
    norm = model.get_layer("fc_norm")
    gamma, beta = (keras.ops.convert_to_numpy(w).astype(np.float64) for w in norm.weights)
    mean, var = pooled.mean(-1, keepdims=True), pooled.var(-1, keepdims=True)
    normed = (pooled - mean) / np.sqrt(var + norm.epsilon) * gamma + beta
    head = model.get_layer("head")
    kernel, bias = (keras.ops.convert_to_numpy(w).astype(np.float64) for w in head.weights)
    expected = normed @ kernel + bias
    # float32 chains of sums of 8-9 products (relative error ~1e-6 each) on logits of
    # magnitude < 10: within 1e-5; 1e-4 leaves a margin of ten.
    np.testing.assert_allclose(_outputs(model), expected, atol=1e-4, rtol=0)
    # and not the class token's: the pooling leaves it out
    token = keras_vit.from_weights(path, num_heads=2, include_top=False, pooling="token")
    assert not np.allclose(_outputs(token), normed, atol=1e-2)


@pytest.mark.parametrize(
    "architecture, heads",
    [("vit_base_patch16_siglip_224", 12), ("vit_base_patch16_gap_224", 16), (None, None)],
)
def test_heads_of_a_named_architecture_without_a_class_token(tmp_path, architecture, heads):
    """A config.json without model_args' num_heads (the Hub's timm repositories): a
    768-wide model without a class token has the heads timm's architecture of that
    name has; without a name, widths disagree and the heads are asked for."""
    source = _random(hidden_size=768, num_heads=heads or 12, classifier="gap")
    folder = tmp_path / "hub"
    save_timm(source, folder)
    config = json.loads((folder / "config.json").read_text())
    del config["model_args"]["num_heads"]
    if architecture:
        config["architecture"] = architecture
    else:
        del config["architecture"]  # then not a timm folder: the state dict alone, with it
    (folder / "config.json").write_text(json.dumps(config))
    if heads is None:
        path = str(folder / "model.safetensors")
        with pytest.raises(CheckpointError, match="does not say num_heads"):
            keras_vit.from_weights(path, approximate_gelu=True)
        return
    _same_model(keras_vit.from_weights(str(folder)), source)


def test_an_official_npz_gives_every_size_even_the_heads(tmp_path):
    # the query kernel (D, heads, head_dim) says the heads; no argument needed
    source = _random(hidden_size=8, num_heads=2, num_layers=2)
    keras_vit.checkpoint.save_checkpoint(source, tmp_path / "small.npz")
    loaded = keras_vit.from_weights(str(tmp_path / "small.npz"))
    assert tuple(loaded.image_size) == (12, 12) and loaded.num_classes == 3
    _same_model(loaded, source)


def test_a_transformers_family_folder_of_other_sizes_is_told_them(tmp_path):
    # a DINOv2-style transformers folder (its config.json records every size) into a
    # model built at other sizes: the sizes and flags that fit, nothing assigned
    from keras_vit.checkpoint import save_transformers

    options = dict(layer_scale_init=0.1, approximate_gelu=False, include_top=False)
    source = _random(hidden_size=8, num_heads=2, **options)
    save_transformers(source, tmp_path / "hf")
    other = keras_vit.VisionTransformer(**{**SMALL, **options, "hidden_size": 16, "num_heads": 4})
    before = [w.copy() for w in other.get_weights()]
    with pytest.raises(CheckpointError, match=r"has hidden_size=8, num_heads=2; the model"):
        keras_vit.load_weights(other, str(tmp_path / "hf"))
    for a, b in zip(other.get_weights(), before):
        np.testing.assert_array_equal(a, b)
    _same_model(keras_vit.from_weights(str(tmp_path / "hf"), include_top=False), source)


def test_a_token_gap_model_is_saved_and_rebuilt(tmp_path):
    source = _random(hidden_size=8, num_heads=2, classifier="token_gap", fc_norm=True)
    source.save(tmp_path / "m.keras")
    again = keras.saving.load_model(tmp_path / "m.keras")
    assert again.classifier == "token_gap"
    np.testing.assert_array_equal(_outputs(again), _outputs(source))
    # headless: the class token's own output is still there, apart from the pooled mean
    token = keras_vit.VisionTransformer(
        **{**SMALL, "hidden_size": 8, "num_heads": 2, "classifier": "token_gap"},
        include_top=False,
        pooling="token",
    )
    assert tuple(token.output.shape) == (None, 8)
