"""The families' short `weights=` names (keras_vit.checkpoint.hub_names): a builder turns
its name into the timm repository on the Hub and the arguments the file omits, the
caller's arguments win, a name of no checkpoint is one error listing the published
ones, and anything else passes through untouched. In the torch stage each name is
checked against timm's own registry: the repository timm downloads for that
pretrained tag, and the architecture it builds has the builder's sizes and options."""

import re

import keras
import pytest

import keras_vit
from keras_vit import builders
from keras_vit.checkpoint import hub, hub_names
from keras_vit.checkpoint.errors import CheckpointError


@pytest.fixture
def from_weights_calls(monkeypatch):
    """The builders' calls of from_weights, recorded instead of made (no download)."""
    calls = []
    monkeypatch.setattr(builders, "from_weights", lambda w, **kw: calls.append((w, kw)))
    return calls


def test_every_family_builder_has_published_names_that_are_hub_names():
    for variant in builders.FAMILY_VARIANTS:
        names = hub_names.names_for(variant)
        assert names, variant
        for name in names:
            weights = hub_names.lookup(variant, name).weights
            assert weights.startswith("hf-hub:timm/"), weights
            hub.repo_id(weights)  # a well-formed Hub name (ValueError otherwise)


def test_a_short_name_builds_from_its_repository_with_the_family_sizes(from_weights_calls):
    keras_vit.DINOv2_B14_reg(weights="lvd142m", include_top=False)
    ((weights, kwargs),) = from_weights_calls
    assert weights == "hf-hub:timm/vit_base_patch14_reg4_dinov2.lvd142m"
    sizes, _ = builders.FAMILY_VARIANTS["DINOv2_B14_reg"]
    assert kwargs == {**sizes, "include_top": False, "name": "dinov2_b14_reg"}


def test_openai_clip_is_built_with_quick_gelu_unless_the_caller_says_otherwise(
    from_weights_calls,
):
    keras_vit.CLIP_L14(weights="openai-336")
    keras_vit.CLIP_L14(weights="openai", quick_gelu=False)
    keras_vit.CLIP_B16(weights="laion2b")
    (w336, kw336), (w_gelu, kw_gelu), (w_laion, kw_laion) = from_weights_calls
    assert w336 == "hf-hub:timm/vit_large_patch14_clip_336.openai" and kw336["quick_gelu"]
    assert w_gelu == "hf-hub:timm/vit_large_patch14_clip_224.openai"
    assert kw_gelu["quick_gelu"] is False
    assert w_laion == "hf-hub:timm/vit_base_patch16_clip_224.laion2b"
    assert "quick_gelu" not in kw_laion  # the file's (timm's config) decides


def test_a_name_of_no_checkpoint_lists_the_published_ones(from_weights_calls):
    with pytest.raises(CheckpointError) as raised:
        keras_vit.SigLIP_L16(weights="webli")  # published at 256 and 384 px only
    message = str(raised.value)
    assert "'webli'" in message and "SigLIP_L16" in message
    assert "webli-256" in message and "siglip2-512" in message
    assert not from_weights_calls


@pytest.mark.parametrize(
    "weights",
    ["hf-hub:timm/vit_small_patch14_dinov2.lvd142m", "some/dir", "model.safetensors"],
)
def test_paths_and_hub_names_pass_through(weights, from_weights_calls):
    keras_vit.DINOv2_S14(weights=weights)
    assert from_weights_calls[0][0] == weights


def test_without_weights_the_family_options_are_used(from_weights_calls):
    keras_vit.SigLIP_B16()
    ((weights, kwargs),) = from_weights_calls
    assert weights is None and kwargs["classifier"] == "map"


def _mlp_width(mlp):
    """The hidden width of a timm MLP: Mlp's fc1; a split SwiGLU's gate (fc1_g); a fused
    GluMlp's fc1 holds the gate and the value, half each."""
    if hasattr(mlp, "fc1_g"):
        return mlp.fc1_g.out_features
    if type(mlp).__name__ == "GluMlp":
        return mlp.fc1.out_features // 2
    return mlp.fc1.out_features


def test_a_local_path_names_the_timm_model_of_its_file(tmp_path):
    """A file or folder named '<model>[.<tag>]', huggingface_hub's cache folder of a
    published name (`cache_folder`, as `hub.fetch` finds it), names <model>; a name
    without the form of a timm model's ('eva02_runs') names nothing."""
    published = hub_names.lookup("DINOv3_S16", "lvd1689m").weights
    repo = hub.repo_id(published)
    cached = tmp_path / hub_names.cache_folder(repo) / "snapshots" / "0a1b" / "model.safetensors"
    assert (
        str(cached.parent.parent.parent.name) == "models--timm--vit_small_patch16_dinov3.lvd1689m"
    )
    assert hub_names.model_names(cached) == ["vit_small_patch16_dinov3"]
    assert hub_names.model_names(
        tmp_path / "eva02_runs" / "eva02_tiny_patch14_224.mim_in22k" / "eva02.safetensors"
    ) == ["eva02_tiny_patch14_224"]
    assert hub_names.model_names(tmp_path / "vit_small_patch16_lingbot.safetensors") == [
        "vit_small_patch16_lingbot"
    ]
    assert hub_names.model_names(tmp_path / "eva02_runs" / "model.bin") == []


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="the torch stage runs it, with timm")
def test_every_name_is_timms_checkpoint_of_the_builders_architecture():
    """timm's registry downloads each name's repository for that tag, and builds (on
    the meta device: no memory, no weights) the builder's sizes and options."""
    import torch
    from interop_testing import import_timm

    timm = import_timm()
    checked = 0
    for (variant, name), published in sorted(hub_names.HUB_NAMES.items()):
        repo = published.weights.split(":", 1)[1]
        model, tag = repo.split("/", 1)[1].split(".", 1)
        cfg = timm.models.get_pretrained_cfg(f"{model}.{tag}")
        assert cfg is not None and cfg.hf_hub_id == repo, (variant, name, repo)
        # '-384'; 224 unnamed (DINOv2's 518 and DINOv3's 256 too: their native sizes)
        pixels = re.search(r"-(\d+)$", name)
        expected = int(pixels.group(1)) if pixels else cfg.input_size[1]
        assert cfg.input_size[1:] == (expected, expected), name
        assert pixels or expected == 224 or variant.startswith(("DINOv2", "DINOv3")), name
        with torch.device("meta"):
            net = timm.create_model(model, pretrained=False)
        sizes, options = builders.FAMILY_VARIANTS[variant]
        block = net.blocks[0]
        assert (
            net.embed_dim,
            len(net.blocks),
            block.attn.num_heads,
            _mlp_width(block.mlp),
            net.patch_embed.patch_size,
        ) == (
            sizes["hidden_size"],
            sizes["num_layers"],
            sizes["num_heads"],
            sizes["mlp_dim"],
            (sizes["patch_size"],) * 2,
        ), (variant, name)
        registers = getattr(net, "reg_token", None)  # Eva keeps no count of its own
        num_registers = getattr(
            net, "num_reg_tokens", 0 if registers is None else registers.shape[1]
        )
        assert num_registers == options.get("num_registers", 0), (variant, name)
        assert (net.global_pool == "map") == (options.get("classifier") == "map")
        if hasattr(block, "ls1"):  # timm's VisionTransformer block
            has_layer_scale = not isinstance(block.ls1, torch.nn.Identity)
        else:  # its Eva block (DINOv3): LayerScale as gamma_1, None without
            has_layer_scale = block.gamma_1 is not None
        assert has_layer_scale == ("layer_scale_init" in options), (variant, name)
        if dict(published.arguments).get("quick_gelu"):  # the repository is the QuickGELU model's
            quick = timm.models.get_pretrained_cfg(
                f"{model.replace('_clip_', '_clip_quickgelu_')}.{tag}"
            )
            assert quick is not None and quick.hf_hub_id == repo, (variant, name)
        checked += 1
    assert checked == len(hub_names.HUB_NAMES)


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)
def test_a_fine_tune_init_by_published_name_opens_its_repository(monkeypatch):
    """trainers/finetune.py --config.model=CLIP_B16 --init=openai: the repository's
    file, with what the name adds (QuickGELU) in its record for the model's options."""
    from keras_vit.checkpoint.source import Source
    from keras_vit_trainers import train_lib

    opened = []
    record = {"quick_gelu": False, "pre_norm": True}
    fake = Source("snapshot/model.safetensors", record, read=lambda model: {})
    monkeypatch.setattr(keras_vit.checkpoint, "open_source", lambda w: opened.append(w) or fake)
    init = train_lib.open_init("openai", "CLIP_B16")
    assert opened == ["hf-hub:timm/vit_base_patch16_clip_224.openai"]
    assert init.metadata == {"quick_gelu": True, "pre_norm": True}
    assert train_lib.options_of_init(init, {"pre_norm": False}) == {"quick_gelu": True}
    assert train_lib.open_init("openai", "ViT_B16") == "openai"  # not a family's name
