"""The tests' tiny models: one plain ViT and one hybrid (ResNet + ViT) factory, at
sizes where building and running a model takes milliseconds. The Transformer's
sizes are tests/trainer_testing.py's TINY_MODEL (the trainer subprocesses' tiny model),
so there is one owner of them; each test passes the overrides it depends on (an
image size, a second block, another width). tests/conftest.py exposes both
factories as the fixtures `tiny_vit` and `tiny_hybrid`."""

from trainer_testing import TINY_MODEL

import keras_vit

# hidden_size 16, mlp_dim 32, 2 heads, 1 block: the Transformer every tiny model shares.
BLOCK = {key: TINY_MODEL[key] for key in ("hidden_size", "mlp_dim", "num_heads", "num_layers")}


def tiny_vit(**overrides):
    """A `VisionTransformer` on 16x16x3 images, 4x4 patches (16 tokens + class
    token), BLOCK's Transformer, 5 classes; `overrides` are any of its keyword
    arguments. Output: (batch, 5) logits unless overridden."""
    return keras_vit.VisionTransformer(
        **{"image_size": 16, "patch_size": 4, "num_classes": 5, **BLOCK, **overrides}
    )


def tiny_hybrid(**overrides):
    """A hybrid `VisionTransformer` on 16x16x3 images: the ResNet stem (stride 4)
    and one unit of one stage give a 4x4 map, 1x1 patches of it (16 tokens),
    BLOCK's Transformer, 5 classes; `overrides` are any of its keyword arguments."""
    return keras_vit.VisionTransformer(
        **{
            "image_size": 16,
            "resnet": (1,),
            "patch_size": 1,
            "num_classes": 5,
            "name": "tiny_hybrid",
            **BLOCK,
            **overrides,
        }
    )
