"""Analytic FLOP counts of a ViT or hybrid forward pass (one multiply-add = 2 FLOPs).

Counts the matrix products and convolutions only (a hybrid's ResNet convolutions,
patch embedding, q/k/v/out projections, the two attention products, the MLP,
pre_logits and head); normalisation, softmax, GELU, pooling and the additions are
a fraction of a percent. ViT-B/16 at 224 px: 35.1 GFLOP.
A training step is counted as 3 forwards (forward + two products per layer in
the backward pass), the usual convention.
"""

TRAIN_FACTOR = 3


def vit_forward_flops(
    image_size,
    patch_size,
    hidden_size,
    mlp_dim,
    num_layers,
    class_token=True,
    num_classes=0,
    representation_size=None,
    channels=3,
    **_,
):
    """FLOPs of one plain ViT image's forward pass.

    Args:
        image_size: int or (height, width), multiples of patch_size.
        patch_size, hidden_size, mlp_dim, num_layers: the architecture.
        class_token: whether a class token is prepended (adds one token).
        num_classes: head width (0 for no head).
        representation_size: pre_logits width or None.
        channels: channels of what the patch embedding reads.

    Returns:
        float, FLOPs per image.
    """
    height, width = _pair(image_size)
    patch_h, patch_w = _pair(patch_size)
    patches = (height // patch_h) * (width // patch_w)
    tokens = patches + (1 if class_token else 0)
    embedding = 2 * patches * (patch_h * patch_w * channels) * hidden_size
    projections = 2 * tokens * hidden_size * hidden_size * 4  # q, k, v, out
    attention = 2 * tokens * tokens * hidden_size * 2  # q k^T and w v
    mlp = 2 * tokens * hidden_size * mlp_dim * 2
    width_in = hidden_size
    top = 0
    if representation_size:
        top += 2 * hidden_size * representation_size
        width_in = representation_size
    if num_classes:
        top += 2 * width_in * num_classes
    return float(embedding + num_layers * (projections + attention + mlp) + top)


def resnet_forward_flops(image_size, num_layers, width_factor=1, channels=3):
    """FLOPs of a hybrid's ResNet (keras_vit/layers/resnet.py): the stem's 7x7 / 2
    convolution (the max-pool counts none), then per bottleneck unit its 1x1, 3x3
    (carrying the unit's stride) and 1x1 convolutions and, where the shape changes,
    the 1x1 projection.

    Returns:
        (FLOPs, (height, width, channels) of the feature map).
    """
    from keras_vit.layers.resnet import EXPANSION, ROOT_WIDTH

    def down(size, stride):
        return -(-size // stride)

    height, width = _pair(image_size)
    stem = int(ROOT_WIDTH * width_factor)
    height, width = down(height, 2), down(width, 2)
    flops = 2 * height * width * 7 * 7 * channels * stem
    height, width, channels = down(height, 2), down(width, 2), stem
    for stage, units in enumerate(num_layers):
        features = stem * 2**stage
        for unit in range(units):
            stride = 2 if stage > 0 and unit == 0 else 1
            out_h, out_w = down(height, stride), down(width, stride)
            flops += 2 * height * width * channels * features  # conv1, 1x1
            flops += 2 * out_h * out_w * 9 * features * features  # conv2, 3x3 / stride
            flops += 2 * out_h * out_w * features * EXPANSION * features  # conv3, 1x1
            if channels != EXPANSION * features or stride != 1:
                flops += 2 * out_h * out_w * channels * EXPANSION * features  # conv_proj
            height, width, channels = out_h, out_w, EXPANSION * features
    return float(flops), (height, width, channels)


def _pair(value):
    return (value, value) if isinstance(value, int) else tuple(value)


def model_forward_flops(spec, image_size, num_classes=0, channels=3):
    """FLOPs of one image's forward pass of a `keras_vit.build_model` dict spec,
    plain ViT (`vit_forward_flops`) or hybrid (its `resnet` counted by
    `resnet_forward_flops`, the Transformer on the ResNet's feature map)."""
    spec = dict(spec)
    resnet = spec.pop("resnet", None)
    channels = spec.pop("channels", channels)
    class_token = spec.get("classifier", "token") == "token"
    flops = 0.0
    if resnet:
        resnet = dict(resnet)
        flops, (height, width, channels) = resnet_forward_flops(
            image_size, tuple(resnet["num_layers"]), resnet.get("width_factor", 1), channels
        )
        image_size = (height, width)
    return flops + vit_forward_flops(
        image_size=image_size,
        class_token=class_token,
        num_classes=num_classes,
        channels=channels,
        **{k: v for k, v in spec.items() if k not in ("image_size", "num_classes")},
    )


def step_flops(forward_flops, batch_size, mode):
    """FLOPs of one step over a batch: 'inference' (1x) or 'train' (3x)."""
    if mode not in ("inference", "train"):
        raise ValueError(f"mode must be 'inference' or 'train', got {mode!r}.")
    return forward_flops * batch_size * (TRAIN_FACTOR if mode == "train" else 1)
