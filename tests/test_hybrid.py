"""Hybrid ResNet + ViT models: sizes, official-layout checkpoints against the NumPy
reference (numpy_resnet + numpy_vit), serialisation, feature extraction (the ResNet
stages of `VisionTransformer.feature_extractor`), errors."""

import keras
import numpy as np
import pytest
from numpy_resnet import hybrid_forward, random_hybrid_params, resnet_forward
from numpy_vit import to_linen_names

import keras_vit
from keras_vit.checkpoint import registry

# float32 Keras vs float64 NumPy through a ResNet and a Transformer; the
# project's bar is 1e-4 (max abs on logits).
ATOL = 1e-4

# A small hybrid: R(1,1) (stride 8, 512 channels), 2x2 patches, a 2-layer ViT.
SMALL_RESNET = (1, 1)
SMALL_VIT = dict(patch=2, hidden=48, mlp=96, heads=4, layers=2)
SMALL_KW = dict(
    resnet=SMALL_RESNET, patch_size=2, hidden_size=48, mlp_dim=96, num_heads=4, num_layers=2
)


def _images(rng, batch, height, width):
    return rng.uniform(-1, 1, (batch, height, width, 3)).astype(np.float32)


def _run(model, x):
    """The model's outputs as NumPy (an eager call: cheaper than predict here)."""
    return keras.ops.convert_to_numpy(model(x, training=False))


def _save(tmp_path, params, name="ckpt.npz"):
    path = tmp_path / name
    np.savez(path, **params)
    return str(path)


def _small_params(num_classes=5, seed=0, **kwargs):
    return random_hybrid_params(
        resnet=SMALL_RESNET, **SMALL_VIT, grid=(4, 4), num_classes=num_classes, seed=seed, **kwargs
    )


@pytest.mark.parametrize(
    "name,expected",
    [("R50_ViT_B16", 98_659_112), ("R26_ViT_S32", 36_431_912), ("R50_ViT_L32", 328_994_856)],
)
def test_parameter_counts_at_224_with_1000_classes(name, expected):
    with keras.StatelessScope(initialize_variables=False):
        model = keras_vit.build_model(name)
        assert model.count_params() == expected
    assert model.image_size == (224, 224) and model.num_classes == 1000


def test_small_hybrid_from_official_checkpoint(tmp_path, rng):
    params = _small_params(num_classes=5, representation_size=48, seed=1)
    model = keras_vit.from_weights(_save(tmp_path, params), **SMALL_KW)
    # Image size inferred from the checkpoint: grid 4 x patch 2 x ResNet stride 8.
    assert model.image_size == (64, 64) and model.grid_size == (4, 4)
    assert model.num_classes == 5 and model.representation_size == 48
    x = _images(rng, 2, 64, 64)
    expected = hybrid_forward(params, x, num_layers=SMALL_RESNET, vit_layers=2)
    np.testing.assert_allclose(_run(model, x), expected, atol=ATOL, rtol=0)
    # keras_vit.load_weights into a model built without weights.
    fresh = keras_vit.VisionTransformer(
        **SMALL_KW, image_size=64, num_classes=5, representation_size=48
    )
    keras_vit.load_weights(fresh, tmp_path / "ckpt.npz")
    np.testing.assert_array_equal(_run(fresh, x), _run(model, x))
    # Saving gives back the published names and the same arrays.
    saved = keras_vit.checkpoint.read_npz(tmp_path / "ckpt.npz")
    keras_vit.save_checkpoint(model, tmp_path / "again.npz")
    again = keras_vit.checkpoint.read_npz(tmp_path / "again.npz")
    assert sorted(again) == sorted(saved)
    for name in saved:
        np.testing.assert_array_equal(again[name], saved[name], err_msg=name)


def test_old_group_norm_shapes_linen_names_gap_and_resize(tmp_path, rng):
    # An old file: GroupNorm scale/bias (1, 1, 1, C); Linen block names under
    # 'params/'; a gap model; loaded at another resolution (posemb resized).
    params = _small_params(num_classes=3, seed=2, old_gn=True, classifier="gap")
    assert params["block2/unit1/gn_proj/scale"].shape == (1, 1, 1, 512)
    path = _save(tmp_path, to_linen_names(params, prefix="params/"))
    model = keras_vit.from_weights(path, **SMALL_KW, image_size=(96, 80))
    assert model.classifier == "gap" and model.grid_size == (6, 5)
    x = _images(rng, 2, 96, 80)
    expected = hybrid_forward(params, x, num_layers=SMALL_RESNET, vit_layers=2, classifier="gap")
    np.testing.assert_allclose(_run(model, x), expected, atol=ATOL, rtol=0)


def test_named_builder_through_the_registry(tmp_path, rng, monkeypatch):
    # R+Ti/16 (stem only, 8x8 patches; stride 4 so a 7x7 grid at 224 px) as the
    # published AugReg file would be: 21,843 classes, no pre_logits, 224 px.
    params = random_hybrid_params(
        resnet=(),
        patch=8,
        hidden=192,
        mlp=768,
        heads=3,
        layers=12,
        grid=(7, 7),
        num_classes=21843,
        seed=3,
    )
    path = _save(tmp_path, params)
    fetched = []
    monkeypatch.setattr(registry, "fetch", lambda entry: fetched.append(entry.url) or path)
    model = keras_vit.R_Ti16(weights="augreg")
    assert fetched == [
        "https://storage.googleapis.com/vit_models/augreg/"
        "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0.npz"
    ]
    assert model.image_size == (224, 224) and model.grid_size == (7, 7)
    assert model.num_classes == 21843 and model.representation_size is None
    x = _images(rng, 2, 224, 224)
    expected = hybrid_forward(params, x, num_layers=(), vit_layers=12)
    np.testing.assert_allclose(_run(model, x), expected, atol=ATOL, rtol=0)


def test_registry_has_the_published_hybrids():
    assert registry.names_for("R50_ViT_B16") == ["imagenet21k", "imagenet21k+imagenet2012"]
    assert registry.names_for("R26_ViT_B32") == ["imagenet21k"]
    assert registry.names_for("R50_ViT_L32") == ["augreg", "augreg+imagenet2012", "imagenet21k"]
    assert registry.names_for("R26_ViT_S32") == ["augreg", "augreg+imagenet2012"]
    assert registry.names_for("R_Ti16") == ["augreg", "augreg+imagenet2012"]
    i21k = registry.lookup("R50_ViT_B16", "imagenet21k")
    assert i21k.url.endswith("/imagenet21k/R50%2BViT-B_16.npz")
    assert (i21k.image_size, i21k.num_classes, i21k.representation_size) == (224, 21843, 768)
    i1k = registry.lookup("R50_ViT_B16", "imagenet21k+imagenet2012")
    assert i1k.url.endswith("/imagenet21k%2Bimagenet2012/R50%2BViT-B_16.npz")
    assert (i1k.image_size, i1k.num_classes, i1k.representation_size) == (384, 1000, None)
    assert registry.lookup("R50_ViT_L32", "augreg+imagenet2012").url.endswith(
        "R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1"
        "--imagenet2012-steps_20k-lr_0.01-res_384.npz"
    )


def test_keras_round_trip_safe_mode(tmp_path, rng):
    model = keras_vit.from_weights(_save(tmp_path, _small_params()), **SMALL_KW)
    x = _images(rng, 2, 64, 64)
    expected = _run(model, x)
    model.save(tmp_path / "hybrid.keras")
    loaded = keras.saving.load_model(tmp_path / "hybrid.keras", safe_mode=True)
    assert loaded.get_config() == model.get_config()
    assert loaded.get_config()["resnet"] == {"num_layers": [1, 1], "width_factor": 1}
    np.testing.assert_array_equal(_run(loaded, x), expected)
    # ... and as weights= of a fresh model, through the official names.
    again = keras_vit.from_weights(str(tmp_path / "hybrid.keras"), **SMALL_KW)
    np.testing.assert_array_equal(_run(again, x), expected)


def test_feature_extractor_gives_the_resnet_stages(tmp_path, rng):
    params = _small_params(seed=4)
    model = keras_vit.from_weights(_save(tmp_path, params), **SMALL_KW, include_top=False)
    x = _images(rng, 2, 64, 64)
    maps = {
        key: keras.ops.convert_to_numpy(value)
        for key, value in model.feature_extractor(blocks=(), stages=True)(x).items()
    }
    expected = resnet_forward(params, x, SMALL_RESNET, return_stages=True)
    assert {key: value.shape for key, value in maps.items()} == {
        "stem": (2, 16, 16, 64),
        "stage1": (2, 16, 16, 256),
        "stage2": (2, 8, 8, 512),
    }
    for got, want in zip((maps[k] for k in ("stem", "stage1", "stage2")), expected):
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    # keras_vit.hybrid.feature_extractor, kept for older code: the same maps, as a list
    # (stages=True) or the final one alone.
    stages = keras_vit.hybrid.feature_extractor(model, stages=True)(x)
    for got, want in zip(stages, maps.values()):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(got), want)
    final = _run(keras_vit.hybrid.feature_extractor(model), x)
    np.testing.assert_array_equal(final, maps["stage2"])
    with pytest.raises(ValueError, match="not a hybrid"):
        keras_vit.hybrid.feature_extractor(
            keras_vit.VisionTransformer(
                patch_size=8, hidden_size=48, mlp_dim=96, num_heads=4, num_layers=1, image_size=32
            )
        )


def test_attention_model_of_a_hybrid(tmp_path, rng):
    model = keras_vit.from_weights(_save(tmp_path, _small_params()), **SMALL_KW)
    weights = [
        keras.ops.convert_to_numpy(w) for w in model.attention_model()(_images(rng, 1, 64, 64))
    ]
    assert [w.shape for w in weights] == [(1, 4, 17, 17)] * 2
    np.testing.assert_allclose(weights[0].sum(-1), 1, atol=1e-5)


def test_plain_vit_checkpoint_into_a_hybrid_names_keys_and_shapes(tmp_path):
    from numpy_vit import random_params

    plain = random_params(patch=2, hidden=48, mlp=96, heads=4, layers=2, grid=(4, 4), num_classes=5)
    with pytest.raises(keras_vit.CheckpointError) as info:
        keras_vit.from_weights(_save(tmp_path, plain), **SMALL_KW)
    message = str(info.value)
    assert (
        "'embedding/kernel': checkpoint shape (2, 2, 3, 48) vs model shape "
        "(2, 2, 512, 48)" in message
    )
    assert "missing keys" in message and "conv_root/kernel" in message


def test_hybrid_checkpoint_of_other_stages_is_refused(tmp_path):
    params = _small_params()
    with pytest.raises(keras_vit.CheckpointError, match=r"missing keys: block2/unit2/"):
        keras_vit.from_weights(_save(tmp_path, params), **{**SMALL_KW, "resnet": (1, 2)})
    with pytest.raises(
        keras_vit.CheckpointError, match=r"unexpected keys: conv_root/kernel, gn_root/scale"
    ):
        keras_vit.from_weights(
            _save(tmp_path, params),
            patch_size=2,
            hidden_size=48,
            mlp_dim=96,
            num_heads=4,
            num_layers=2,
            image_size=8,
        )


def test_bad_group_norm_shape_is_named(tmp_path):
    params = _small_params()
    params["block1/unit1/gn2/scale"] = np.ones((1, 2, 32), np.float32)
    with pytest.raises(
        keras_vit.CheckpointError,
        match=r"'block1/unit1/gn2/scale': checkpoint shape \(1, 2, 32\) vs "
        r"model shape \(64,\)",
    ):
        keras_vit.from_weights(_save(tmp_path, params), **SMALL_KW)


@pytest.mark.parametrize(
    "resnet,match",
    [
        ((3, 0), "positive integers"),
        ("349", "sequence of unit counts"),
        ({"units": (3, 4)}, "'num_layers'"),
        ({"num_layers": (1,), "width_factor": 0.3}, "width_factor"),
    ],
)
def test_bad_resnet_spec(resnet, match):
    with pytest.raises(ValueError, match=match):
        keras_vit.VisionTransformer(
            resnet=resnet,
            patch_size=1,
            hidden_size=48,
            mlp_dim=96,
            num_heads=4,
            num_layers=1,
            image_size=64,
        )


def test_image_size_whose_feature_map_misses_the_patches():
    with pytest.raises(
        ValueError,
        match=r"image size 100x100 gives a ResNet feature map of "
        r"25x25, not a multiple of the patch size 8x8",
    ):
        keras_vit.VisionTransformer(
            resnet=(),
            patch_size=8,
            hidden_size=48,
            mlp_dim=96,
            num_heads=4,
            num_layers=1,
            image_size=100,
        )
