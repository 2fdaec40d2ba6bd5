"""Any published checkpoint by name: the AugReg file-name parser on real file names,
'augreg:<name>' and https:// / gs:// URLs through the registry's fetch (served from
local files, never the network), what the model takes from the file, and the
offline failure (a refused and an unroutable address, bounded in time).

gs://vit_models/augreg/index.csv itself is out of reach here; the names below are
copied from the official vision_transformer README (the recommended checkpoints'
table), its AugReg colab (vit_jax_augreg.ipynb, the outputs of its model-selection
cells) and timm's URLs of the same bucket (timm/models/vision_transformer.py)."""

import socket
import time

import keras
import numpy as np
import pytest
import tiny_models
from numpy_resnet import random_hybrid_params
from numpy_vit import random_params, vit_forward

import keras_vit
from keras_vit import checkpoint, variants
from keras_vit.checkpoint import augreg, registry
from keras_vit.layers.resnet import resnet_spec

I21K, I1K = 21843, 1000

# (name, variant, upstream data, fine-tune data, resolution, head width); source.
REAL_NAMES = [
    # README, "We recommend using the following checkpoints": pre-trained, fine-tuned.
    ("L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0", "ViT_L16", "i21k", None, 224, I21K),
    ("L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_384", "ViT_L16", "i21k", "imagenet2012", 384, I1K),
    ("B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", "ViT_B16", "i21k", None, 224, I21K),
    ("B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_384", "ViT_B16", "i21k", "imagenet2012", 384, I1K),
    ("S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0", "ViT_S16", "i21k", None, 224, I21K),
    ("S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_384", "ViT_S16", "i21k", "imagenet2012", 384, I1K),
    ("R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1", "R50_ViT_L32", "i21k", None, 224, I21K),
    ("R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.01-res_384", "R50_ViT_L32", "i21k", "imagenet2012", 384, I1K),
    ("R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "R26_ViT_S32", "i21k", None, 224, I21K),
    ("R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_384", "R26_ViT_S32", "i21k", "imagenet2012", 384, I1K),
    ("Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "ViT_Ti16", "i21k", None, 224, I21K),
    ("Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_384", "ViT_Ti16", "i21k", "imagenet2012", 384, I1K),
    ("B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "ViT_B32", "i21k", None, 224, I21K),
    ("B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_384", "ViT_B32", "i21k", "imagenet2012", 384, I1K),
    ("S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0", "ViT_S32", "i21k", None, 224, I21K),
    ("S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_384", "ViT_S32", "i21k", "imagenet2012", 384, I1K),
    ("R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "R_Ti16", "i21k", None, 224, I21K),
    ("R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_384", "R_Ti16", "i21k", "imagenet2012", 384, I1K),
    # The AugReg colab: best ImageNet fine-tune of B/8, the R26+S/32 pet fine-tunes.
    ("B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224", "ViT_B8", "i21k", "imagenet2012", 224, I1K),
    ("R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0--oxford_iiit_pet-steps_0k-lr_0.003-res_384", "R26_ViT_S32", "i21k", "oxford_iiit_pet", 384, 37),
    ("R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0--oxford_iiit_pet-steps_2k-lr_0.03-res_224", "R26_ViT_S32", "i21k", "oxford_iiit_pet", 224, 37),
    # timm's URLs: ImageNet-1k pre-training, other upstream settings and fine-tunes.
    ("S_16-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0", "ViT_S16", "i1k", None, 224, I1K),
    ("R26_S_32-i21k-300ep-lr_0.001-aug_light0-wd_0.03-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.03-res_224", "R26_ViT_S32", "i21k", "imagenet2012", 224, I1K),
    ("L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.01-res_224", "ViT_L16", "i21k", "imagenet2012", 224, I1K),
    ("B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_384", "ViT_B16", "i21k", "imagenet2012", 384, I1K),
    ("Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224", "ViT_Ti16", "i21k", "imagenet2012", 224, I1K),
]  # fmt: skip


@pytest.mark.parametrize("name,variant,upstream,dataset,resolution,classes", REAL_NAMES)
def test_real_names_parse(name, variant, upstream, dataset, resolution, classes):
    parsed = augreg.parse(name)
    assert parsed.name == name and parsed.file_name == name + ".npz"
    assert parsed.variant == variant and parsed.model == name.split("-")[0]
    assert (parsed.upstream, parsed.dataset, parsed.resolution) == (upstream, dataset, resolution)
    assert parsed.num_classes == classes and parsed.fine_tuned == (dataset is not None)
    assert parsed.epochs == 300 and parsed.lr == 0.001
    # The settings are the name's own fields.
    fields = dict(f.split("_", 1) for f in name.split("--")[0].split("-")[3:])
    assert (parsed.aug, parsed.wd, parsed.dropout, parsed.stochastic_depth) == (
        fields["aug"],
        float(fields["wd"]),
        float(fields["do"]),
        float(fields["sd"]),
    )
    if dataset is not None:
        adapt = dict(f.split("_", 1) for f in name.split("--")[1].split("-")[1:])
        assert (parsed.steps, parsed.adapt_lr) == (adapt["steps"], float(adapt["lr"]))
    # With the prefix and the extension too.
    assert augreg.parse(f"{augreg.PREFIX}{name}.npz") == parsed
    # The builder of that variant builds what the file holds.
    assert variant in keras_vit.BUILDERS


def test_registry_short_names_are_parsed_names():
    """'augreg' and 'augreg+imagenet2012' are the README's recommended files; their
    entries come from the parser (resolution, classes), as 'augreg:<name>' does."""
    for (variant, short), entry in registry.REGISTRY.items():
        if not short.startswith("augreg"):
            continue
        file = entry.url.rsplit("/", 1)[1]
        assert file in {name + ".npz" for name, *_ in REAL_NAMES}, file
        parsed = augreg.parse(file)
        assert parsed.variant == variant
        assert parsed.fine_tuned == (short == "augreg+imagenet2012")
        assert registry.resolve(augreg.PREFIX + parsed.name, variant) == entry


def test_models_map_to_the_variants_both_ways():
    for variant in [*variants.VARIANTS, *variants.HYBRID_VARIANTS]:
        assert augreg.variant_of(augreg.model_of(variant)) == variant
    assert augreg.variant_of("R50_B_16") == "R50_ViT_B16"
    assert augreg.variant_of("Q_16") is None and augreg.variant_of("S_15") is None


@pytest.mark.parametrize(
    "name,problem",
    [
        ("B_16-i21k-300ep", r"the pre-training part 'B_16-i21k-300ep' has 3 '-'-separated fields"),
        (
            "S_15-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0",
            r"model 'S_15' is not an architecture keras_vit builds \(known: .*Ti_16",
        ),
        (
            "B_16-i21k-300-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0",
            r"the pre-training field epochs is '300', expected e.g. '300ep'",
        ),
        (
            "B_16-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0--cifar100-steps_2k-lr_0.01"
            "-res_big",
            r"the fine-tune field res is 'res_big', expected e.g. 'res_384'",
        ),
        ("a--b--c", r"at most one '--'"),
        ("", r"at most one '--'"),
    ],
)
def test_malformed_names_say_what_does_not_fit(name, problem):
    with pytest.raises(ValueError, match=r"is not an AugReg checkpoint name: " + problem):
        augreg.parse(name)


# -- loading: the file's arrays decide, the name gives the architecture ---------------

# A 1-block ViT with 16x16 patches: cheap at the published 224 and 384 px. Tests that
# load a 'Ti_16' file let ViT_Ti16 stand for it (the name's architecture check).
TINY = dict(tiny_models.BLOCK, patch_size=16)
# The same sizes under tests/numpy_vit.py's names.
TINY_NP = dict(
    patch=TINY["patch_size"],
    hidden=TINY["hidden_size"],
    mlp=TINY["mlp_dim"],
    heads=TINY["num_heads"],
    layers=TINY["num_layers"],
)
UPSTREAM = "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0"
FINE_TUNE = UPSTREAM + "--imagenet2012-steps_20k-lr_0.03-res_384"


@pytest.fixture
def tiny_ti16(monkeypatch):
    monkeypatch.setitem(variants.VARIANTS, "ViT_Ti16", TINY)


@pytest.fixture
def served(monkeypatch, tmp_path):
    """serve(params) -> the URLs fetched; registry.fetch returns the file written."""
    fetched = []

    def serve(params):
        path = tmp_path / f"served_{len(fetched)}.npz"
        np.savez(path, **params)
        monkeypatch.setattr(registry, "fetch", lambda entry: fetched.append(entry.url) or path)
        return fetched

    return serve


@pytest.mark.parametrize(
    "weights,url,grid,classes,classifier,representation",
    [
        (
            f"augreg:{UPSTREAM}",
            f"{registry.BASE_URL}/augreg/{UPSTREAM}.npz",
            14,
            I21K,
            "token",
            None,
        ),
        (
            f"augreg:{FINE_TUNE}",
            f"{registry.BASE_URL}/augreg/{FINE_TUNE}.npz",
            24,
            I1K,
            "token",
            None,
        ),
        (  # gs:// goes through https; '+' is escaped as the registry's URLs do.
            "gs://vit_models/imagenet21k+imagenet2012/Tiny+ViT.npz",
            f"{registry.BASE_URL}/imagenet21k%2Bimagenet2012/Tiny%2BViT.npz",
            12,
            7,
            "gap",
            8,
        ),
        (
            f"https://storage.googleapis.com/vit_models/augreg/{UPSTREAM}.npz",
            f"{registry.BASE_URL}/augreg/{UPSTREAM}.npz",
            14,
            I21K,
            "token",
            None,
        ),
    ],
)
def test_model_follows_the_file(
    tiny_ti16, served, rng, weights, url, grid, classes, classifier, representation
):
    params = random_params(
        **TINY_NP,
        grid=(grid, grid),
        num_classes=classes,
        classifier=classifier,
        representation_size=representation,
        seed=3,
    )
    fetched = served(params)
    model = keras_vit.from_weights(weights, **TINY)
    assert fetched == [url]
    size = grid * 16
    assert model.image_size == (size, size) and model.num_classes == classes
    assert model.classifier == classifier and model.representation_size == representation
    x = rng.uniform(-1, 1, (1, size, size, 3)).astype("float32")
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model(x)),
        vit_forward(params, x, num_layers=1, classifier=classifier),
        atol=1e-5,
    )


def test_the_file_wins_over_its_name(tiny_ti16, served, caplog):
    served(random_params(**TINY_NP, grid=(14, 14), num_classes=10, seed=4))
    with caplog.at_level("INFO", logger="keras_vit"):
        model = keras_vit.from_weights(f"augreg:{FINE_TUNE}", **TINY)
    assert model.image_size == (224, 224) and model.num_classes == 10
    assert "the file has image_size 224 where its name says 384" in caplog.text
    assert "the file has num_classes 10 where its name says 1000" in caplog.text


def test_a_hybrid_name_gives_the_resnet_stride(monkeypatch, served):
    tiny = dict(patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=1)
    spec = resnet_spec(())
    monkeypatch.setitem(variants.HYBRID_VARIANTS, "R_Ti16", dict(tiny, resnet=spec))
    params = random_hybrid_params(
        resnet=(), patch=8, hidden=16, mlp=32, heads=2, layers=1, grid=(7, 7), num_classes=5
    )
    served(params)
    arch = checkpoint.source.architecture(8, 16, 32, 2, 1, spec)
    source = checkpoint.open_source(f"augreg:R_Ti_16-{UPSTREAM.split('-', 1)[1]}", arch)
    # 7x7 grid x patch 8 x the stem's stride 4.
    assert source.metadata["image_size"] == 224 and source.metadata["num_classes"] == 5


def test_another_architecture_is_refused_before_any_download(tiny_ti16, served):
    fetched = served(random_params(**TINY_NP, grid=(14, 14), num_classes=3))
    other = "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0"
    for weights in (f"augreg:{other}", f"gs://vit_models/augreg/{other}.npz"):
        with pytest.raises(
            ValueError,
            match=r"is a ViT_S16 checkpoint \(AugReg model 'S_16'\); this model is "
            r"ViT_Ti16: build it with keras_vit.build_model\('ViT_S16'",
        ):
            keras_vit.from_weights(weights, **TINY)
    with keras.StatelessScope(initialize_variables=False):
        with pytest.raises(ValueError, match="this model is of another architecture"):
            keras_vit.from_weights(f"augreg:{other}", **{**TINY, "num_layers": 2})
    assert fetched == []


@pytest.mark.parametrize(
    "weights,match",
    [
        ("http://example.com/vit_models/x.npz", "only https:// and gs:// URLs"),
        ("https://example.com/vit_models/model.keras", "must name an official .npz"),
        ("gs://vit_models.npz", r"expected gs://BUCKET/PATH.npz"),
        ("augreg:B_16-i21k", "is not an AugReg checkpoint name"),
    ],
)
def test_bad_urls_and_names_are_refused(weights, match):
    with keras.StatelessScope(initialize_variables=False):
        with pytest.raises(ValueError, match=match):
            keras_vit.ViT_B16(weights=weights)


def test_an_augreg_name_in_the_cache_needs_no_network(tiny_ti16, tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_VIT_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "keras_vit" / "augreg"
    folder.mkdir(parents=True)
    np.savez(folder / f"{UPSTREAM}.npz", **random_params(**TINY_NP, grid=(14, 14), num_classes=3))
    arch = checkpoint.source.architecture(16, 16, 32, 2, 1)
    source = checkpoint.open_source(f"augreg:{UPSTREAM}", arch)
    assert source.origin == str(folder / f"{UPSTREAM}.npz")
    assert source.metadata["num_classes"] == 3 and source.metadata["image_size"] == 224


# -- offline -------------------------------------------------------------------------


def _closed_port():
    """A local port with nothing listening (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_url_fails_fast_naming_url_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_VIT_CACHE_DIR", str(tmp_path / "cache"))
    url = f"https://127.0.0.1:{_closed_port()}/vit_models/augreg/{UPSTREAM}.npz"
    cached = tmp_path / "cache" / "keras_vit" / "augreg" / f"{UPSTREAM}.npz"
    start = time.monotonic()
    with keras.StatelessScope(initialize_variables=False):
        with pytest.raises(registry.DownloadError) as info:
            keras_vit.ViT_Ti16(weights=url)
    assert time.monotonic() - start < 10
    message = str(info.value)
    assert f"cannot download {url} (" in message and str(cached) in message
    assert not cached.exists()
    # Unroutable (TEST-NET-1, RFC 5737): refused by the network or timed out.
    entry = registry.Entry("https://192.0.2.1/vit_models/augreg/x.npz")
    start = time.monotonic()
    with pytest.raises(registry.DownloadError, match=r"cannot download https://192\.0\.2\.1/"):
        registry.fetch(entry, timeout=1.0)
    assert time.monotonic() - start < 10
