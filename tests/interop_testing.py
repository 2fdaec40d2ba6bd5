"""timm and transformers as references for the interop tests and the fixture script.

timm imports torchvision. The torchvision wheels the package index serves for
Linux are built against CUDA torch; beside the CPU torch the project pins, their
C++ ops do not load, and `import torchvision` then fails while registering fake
kernels for those ops ("operator torchvision::nms does not exist"). Nothing a
ViT computes uses them, so `import_timm` imports torchvision with those two
registration modules stood in by empty ones, where (and only where) the plain
import fails that way.
"""

import os
import sys
import types

import numpy as np

# torchvision's modules that register kernels for its C++ ops.
_OP_REGISTRATIONS = ("torchvision._meta_registrations", "torchvision._autograd_registrations")


def import_timm():
    """timm, importable beside a torchvision whose C++ ops did not load."""
    try:
        import torchvision  # noqa: F401
    except RuntimeError as e:
        if "torchvision::" not in str(e):
            raise
        for name in [n for n in sys.modules if n.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        for name in _OP_REGISTRATIONS:
            sys.modules[name] = types.ModuleType(name)
        import torchvision  # noqa: F401
    import timm

    return timm


def randomized(module, seed, scale=0.5):
    """`module` (a torch nn.Module) with every parameter drawn from N(0, scale²)
    (a seeded generator), in eval mode: weights far from any initialiser's, so
    a mix-up of two arrays shows in the outputs."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale)
    return module.eval()


def images(batch, height, width, channels=3, seed=0):
    """Images (batch, height, width, channels) in [-1, 1], float32, channels last."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, (batch, height, width, channels)).astype(np.float32)


def torch_forward(module, images):
    """`module`'s output for channels-last numpy images (NCHW in torch), as numpy:
    a transformers output's `logits` or `pooler_output` where it has one, else
    its `last_hidden_state`'s class token; a tensor as it is."""
    import torch

    with torch.no_grad():
        out = module(torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2))))
    for name in ("logits", "pooler_output"):
        value = getattr(out, name, None)
        if value is not None:
            return value.numpy()
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state[:, 0].numpy()
    return out.numpy()


# The tiny ViT every interop test builds (keras_vit's arguments): a 4x4 grid of 4x4
# patches, two blocks of two heads.
TINY = dict(image_size=16, patch_size=4, hidden_size=8, mlp_dim=16, num_heads=2, num_layers=2)
NUM_CLASSES = 3
# The committed fixtures (tests/fixtures/make_interop_fixtures.py): one block, a few KB a file.
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "interop")
FIXTURE_SIZES = {**TINY, "num_layers": 1}


def timm_vit(seed, sizes=TINY, **options):
    """A timm VisionTransformer of `sizes` (keras_vit's names), random weights
    (`randomized`), timm's `options` (global_pool, class_token, fc_norm, ...)."""
    return timm_family("vit_tiny_patch16_224", seed, sizes, **options)


def timm_family(architecture, seed, sizes=TINY, image_size=None, **options):
    """timm's `architecture` (a family's: 'vit_small_patch14_reg4_dinov2', ...) at
    `sizes` (keras_vit's names; `image_size` instead of theirs where given), random
    weights (`randomized`), timm's `options`; NUM_CLASSES classes unless they say."""
    timm = import_timm()
    options.setdefault("num_classes", NUM_CLASSES)
    model = timm.create_model(
        architecture,
        pretrained=False,
        img_size=image_size or sizes["image_size"],
        patch_size=sizes["patch_size"],
        embed_dim=sizes["hidden_size"],
        depth=sizes["num_layers"],
        num_heads=sizes["num_heads"],
        mlp_ratio=sizes["mlp_dim"] / sizes["hidden_size"],
        **options,
    )
    return randomized(model, seed)


def transformers_vit(
    seed, model_class="ViTForImageClassification", sizes=TINY, model_options=None, **options
):
    """A transformers ViT (`model_class`: 'ViTModel', 'ViTForImageClassification', ...)
    of `sizes`, random weights, ViTConfig `options` (hidden_act, layer_norm_eps, ...)
    and the class's own `model_options` (ViTModel's add_pooling_layer)."""
    import transformers

    options.setdefault("num_labels", NUM_CLASSES)
    config = transformers.ViTConfig(
        hidden_size=sizes["hidden_size"],
        num_hidden_layers=sizes["num_layers"],
        num_attention_heads=sizes["num_heads"],
        intermediate_size=sizes["mlp_dim"],
        image_size=sizes["image_size"],
        patch_size=sizes["patch_size"],
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        **options,
    )
    return randomized(getattr(transformers, model_class)(config, **(model_options or {})), seed)


# The families (tests/test_interop_families.py; fixtures in tests/fixtures/interop).
# timm architecture -> (its options beside the sizes, the keras_vit options the file gives)
TIMM_FAMILIES = {
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


# transformers model class -> (its config class, config options, keras_vit options)
TRANSFORMERS_FAMILIES = {
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


def transformers_family(model_class, seed, sizes=TINY, **options):
    """transformers' `model_class` (a key of TRANSFORMERS_FAMILIES) at `sizes`, random
    weights, its config's options and `options`."""
    import_timm()  # torchvision importable, for transformers' lazy imports
    import transformers

    config_class, config_options, _ = TRANSFORMERS_FAMILIES[model_class]
    config = getattr(transformers, config_class)(
        hidden_size=sizes["hidden_size"],
        num_hidden_layers=sizes["num_layers"],
        num_attention_heads=sizes["num_heads"],
        image_size=sizes["image_size"],
        patch_size=sizes["patch_size"],
        **(
            {"mlp_ratio": sizes["mlp_dim"] // sizes["hidden_size"]}
            if "Dinov2" in config_class
            else {"intermediate_size": sizes["mlp_dim"]}
        ),
        **config_options,
        **options,
    )
    return randomized(getattr(transformers, model_class)(config), seed)


def transformers_family_forward(module, x, **kwargs):
    """A family tower's features for channels-last numpy images: its projected
    `image_embeds` where it has them, else its `pooler_output`."""
    import torch

    with torch.no_grad():
        out = module(torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))), **kwargs)
    value = getattr(out, "image_embeds", None)
    return (value if value is not None else out.pooler_output).numpy()


# The families committed as fixtures (tests/fixtures/make_interop_fixtures.py), read by
# the main suite without torch (tests/test_interop.py): a key of each table above.
FAMILY_FIXTURES = {
    "timm": ("clip_quickgelu", "deit3", "dinov2_reg4", "siglip"),
    "transformers": (
        "CLIPVisionModel",
        "Dinov2Model",
        "Dinov2WithRegistersModel",
        "SiglipVisionModel",
    ),
}
