"""Analytic FLOP counts of a ViT forward pass (one multiply-add = 2 FLOPs).

Counts the matrix products only (patch embedding, q/k/v/out projections, the two
attention products, the MLP, pre_logits and head); LayerNorm, softmax, GELU and
the additions are a fraction of a percent. ViT-B/16 at 224 px: 35.1 GFLOP.
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
    **_,
):
    """FLOPs of one image's forward pass.

    Args:
        image_size: int or (height, width), multiples of patch_size.
        patch_size, hidden_size, mlp_dim, num_layers: the architecture.
        class_token: whether a class token is prepended (adds one token).
        num_classes: head width (0 for no head).
        representation_size: pre_logits width or None.

    Returns:
        float, FLOPs per image.
    """
    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    patches = (height // patch_size) * (width // patch_size)
    tokens = patches + (1 if class_token else 0)
    embedding = 2 * patches * (patch_size * patch_size * 3) * hidden_size
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


def step_flops(forward_flops, batch_size, mode):
    """FLOPs of one step over a batch: 'inference' (1x) or 'train' (3x)."""
    if mode not in ("inference", "train"):
        raise ValueError(f"mode must be 'inference' or 'train', got {mode!r}.")
    return forward_flops * batch_size * (TRAIN_FACTOR if mode == "train" else 1)
