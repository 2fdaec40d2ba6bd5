"""The Keras models `speed.py` compares, built with the same architecture.

Every model maps images (B, H, W, 3) to logits (B, num_classes) under the
global dtype policy, with random weights (speed does not depend on them).
"""

import keras

import keras_vit


def keras_vit_model(
    arch,
    image_size,
    num_classes,
    fused_attention=True,
    pad_tokens_to_multiple=None,
    approximate_gelu=True,
):
    """keras_vit's VisionTransformer; `fused_attention=False` forces the explicit
    softmax path in every block (the path used when attention weights are asked
    for); `pad_tokens_to_multiple` pads the fused path's token axis (masked);
    `approximate_gelu=False` gives every MLP the exact (erf) GELU, timm's, in place
    of the official checkpoints' tanh form: the cost of the GELU kernel alone."""
    model = keras_vit.VisionTransformer(
        image_size=image_size, num_classes=num_classes, representation_size=None, **arch
    )
    for block in model.get_layer("Transformer").blocks:
        block.attention.use_fused_attention = fused_attention
        block.attention.pad_tokens_to_multiple = pad_tokens_to_multiple
        block.mlp.approximate_gelu = approximate_gelu
    return model


def keras_hub_model(arch, image_size, num_classes):
    """keras-hub's ViTBackbone (B, T, D) with the class token fed to a Dense head."""
    import keras_hub

    backbone = keras_hub.models.ViTBackbone(
        image_shape=(image_size, image_size, 3),
        patch_size=arch["patch_size"],
        num_layers=arch["num_layers"],
        num_heads=arch["num_heads"],
        hidden_dim=arch["hidden_size"],
        mlp_dim=arch["mlp_dim"],
    )
    images = keras.Input((image_size, image_size, 3), name="image")
    features = backbone(images)
    logits = keras.layers.Dense(num_classes, name="head")(features[:, 0])
    return keras.Model(images, logits, name="keras_hub_vit")
