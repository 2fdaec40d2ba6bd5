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
    timm = import_timm()
    options.setdefault("num_classes", NUM_CLASSES)
    model = timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        img_size=sizes["image_size"],
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
