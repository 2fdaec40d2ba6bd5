"""Looking inside a ViT (paper §4.5, Fig. 6 and 7), on any Keras backend.

Every function returns numpy arrays. The array functions (`rollout`,
`rollout_maps`, `mean_attention_distance`, `cosine_similarity_grid`,
`principal_components`) take plain arrays, so they can be checked against
hand-made attention matrices; the model functions (`attention_maps`,
`attention_distance`, `position_embedding_similarity`,
`embedding_filter_components`) read a `keras_vit.VisionTransformer`.

    maps = keras_vit.inspect.attention_maps(model, images)         # (B, rows, cols)
    dist = keras_vit.inspect.attention_distance(model, images)     # (layers, heads) px
    sim = keras_vit.inspect.position_embedding_similarity(model)   # (r, c, r, c)
    comps, var = keras_vit.inspect.embedding_filter_components(model)  # (k, P, P, 3)
    rgb, var = keras_vit.inspect.patch_feature_pca(model, images)  # (B, rows, cols, 3)

`images` are (B, H, W, 3) in [-1, 1] (`keras_vit.preprocess_input`), of the
model's size, or of any size for a model of any resolution
(`input_shape=(None, None, 3)`): the grid is then the images' (`token_grid`).
"""

import keras
import numpy as np


class NotMeaningfulError(ValueError):
    """A figure that has no meaning for this model (e.g. filters of a 4-channel input)."""


# -- Attention rollout (Abnar & Zuidema 2020; paper Fig. 6, Appendix D.8) ---------


def rollout(attention_weights):
    """Attention rollout through all layers.

    For each layer the heads are averaged, the identity is added for the
    residual connection and the rows are renormalised to sum to 1:
    A~ = (mean_h A + I) / row sums. The rollout is A~_L @ ... @ A~_1, so row q
    says how much each input token flows into output token q.

    Args:
        attention_weights: list of `layers` arrays (B, heads, T, T) (rows summing
            to 1), first layer first, as `VisionTransformer.attention_weights`.
    Returns:
        float64 array (B, T, T) whose rows sum to 1.
    """
    if not len(attention_weights):
        raise ValueError("rollout: no attention weights (a model with 0 layers?).")
    result = None
    for i, weights in enumerate(attention_weights):
        weights = np.asarray(weights, np.float64)
        if weights.ndim != 4 or weights.shape[-1] != weights.shape[-2]:
            raise ValueError(
                f"rollout: attention weights of layer {i} must be "
                f"(batch, heads, T, T), got shape {weights.shape}."
            )
        if result is not None and weights.shape[-1] != result.shape[-1]:
            raise ValueError(
                f"rollout: layer {i} has {weights.shape[-1]} tokens, "
                f"layer 0 has {result.shape[-1]}."
            )
        joint = weights.mean(axis=1) + np.eye(weights.shape[-1])
        joint /= joint.sum(axis=-1, keepdims=True)
        result = joint if result is None else joint @ result
    return result


def rollout_maps(rollout_matrix, grid_size, num_prefix_tokens, num_registers=0):
    """Heat-maps over the patch grid from a rollout.

    Token models (num_prefix_tokens=1): the class token's row. GAP models
    (num_prefix_tokens=0): the mean of the patches' rows, since the
    representation is the mean over patch tokens. The patch columns are kept
    (register tokens' columns dropped, as their flow reaches no patch) and
    renormalised to sum to 1 over the grid.

    Args:
        rollout_matrix: (B, T, T) from `rollout`, T = prefix + registers +
            rows*cols (the encoder's order: class token, registers, patches).
        grid_size: (rows, cols) of the patch grid.
        num_prefix_tokens: 1 with a class token, else 0.
        num_registers: register tokens after the class token.
    Returns:
        float64 array (B, rows, cols), each map summing to 1.
    """
    rows, cols = grid_size
    rollout_matrix = np.asarray(rollout_matrix, np.float64)
    first_patch = num_prefix_tokens + num_registers
    tokens = first_patch + rows * cols
    if rollout_matrix.ndim != 3 or rollout_matrix.shape[1:] != (tokens, tokens):
        raise ValueError(
            f"rollout_maps: expected (batch, {tokens}, {tokens}) for a "
            f"{rows}x{cols} grid with {num_prefix_tokens} prefix token(s) and "
            f"{num_registers} register(s), got {rollout_matrix.shape}."
        )
    if num_prefix_tokens:
        flow = rollout_matrix[:, 0, first_patch:]
    else:
        flow = rollout_matrix[:, first_patch:, first_patch:].mean(axis=1)
    flow = flow / flow.sum(axis=-1, keepdims=True)
    return flow.reshape(-1, rows, cols)


def _attention_chunks(model, images, batch_size):
    """Yields (number of images, attention weights of every layer) for slices of
    `batch_size` images: the weights of a whole set (layers x heads x T^2 floats
    per image) can be large. The model's cached attention model serves all slices
    and all calls (`VisionTransformer.attention_weights`), so nothing is retraced."""
    if len(images) == 0:
        raise ValueError("no images given.")
    for start in range(0, len(images), batch_size):
        chunk = images[start : start + batch_size]
        yield len(chunk), model.attention_weights(chunk, batch_size=batch_size)


def attention_maps(model, images, batch_size=32):
    """Rollout heat-maps (B, rows, cols) of a model for images (B, H, W, 3) in
    [-1, 1]: the class token's map for token models, the mean over tokens for
    GAP models; (rows, cols) is the images' token grid. Each map sums to 1;
    upsample with `upsample`."""
    encoder = model.get_layer("Transformer")
    grid = model.token_grid(np.shape(images)[1:3])
    return np.concatenate(
        [
            rollout_maps(rollout(weights), grid, encoder.num_prefix_tokens, encoder.num_registers)
            for _, weights in _attention_chunks(model, images, batch_size)
        ]
    )


def upsample(maps, image_size):
    """(B, rows, cols) maps -> (B, height, width), bilinear (scipy.ndimage.zoom,
    order=1), for overlaying on the images."""
    import scipy.ndimage

    maps = np.asarray(maps, np.float64)
    height, width = image_size
    factors = (1, height / maps.shape[1], width / maps.shape[2])
    return scipy.ndimage.zoom(maps, factors, order=1, grid_mode=True, mode="nearest")


# -- Mean attention distance (paper Fig. 7 right, Appendix D.7) --------------------


def patch_centres(grid_size, patch_pixels):
    """(rows*cols, 2) pixel coordinates (y, x) of the patch centres, row-major
    (the token order of the patch embedding)."""
    rows, cols = grid_size
    step_y, step_x = patch_pixels
    y, x = np.meshgrid(
        (np.arange(rows) + 0.5) * step_y, (np.arange(cols) + 0.5) * step_x, indexing="ij"
    )
    return np.stack([y.ravel(), x.ravel()], axis=-1)


def mean_attention_distance(attention_weights, grid_size, patch_pixels, num_prefix_tokens):
    """Attention-weighted distance in pixels between query and key patch centres,
    per layer and head, averaged over the query patches and the images.

    Only patch-to-patch attention has a distance: the class token's row and
    column are dropped and each query's weights over the patches are
    renormalised to sum to 1 (a query that puts all its weight on the class
    token contributes distance 0).

    Args:
        attention_weights: list of `layers` arrays (B, heads, T, T).
        grid_size: (rows, cols) of the patch grid.
        patch_pixels: (height, width) in pixels of one grid cell: the patch size
            for a plain ViT, image size / grid size in general (hybrids).
        num_prefix_tokens: 1 with a class token, else 0.
    Returns:
        float64 array (layers, heads), in pixels.
    """
    centres = patch_centres(grid_size, patch_pixels)
    distance = np.linalg.norm(centres[:, None, :] - centres[None, :, :], axis=-1)
    tokens = num_prefix_tokens + len(centres)
    result = []
    for i, weights in enumerate(attention_weights):
        weights = np.asarray(weights, np.float64)
        if weights.ndim != 4 or weights.shape[-2:] != (tokens, tokens):
            raise ValueError(
                f"mean_attention_distance: layer {i} weights must be (batch, heads, "
                f"{tokens}, {tokens}) for a {grid_size[0]}x{grid_size[1]} grid with "
                f"{num_prefix_tokens} prefix token(s), got {weights.shape}."
            )
        patch = weights[..., num_prefix_tokens:, num_prefix_tokens:]
        mass = patch.sum(axis=-1)
        per_query = np.divide(
            (patch * distance).sum(axis=-1), mass, out=np.zeros_like(mass), where=mass > 0
        )
        result.append(per_query.mean(axis=(0, 2)))
    return np.stack(result)


def uniform_attention_distance(grid_size, patch_pixels):
    """The mean attention distance of uniform attention over the patches: the
    mean distance between two cell centres of the grid (a reference line)."""
    centres = patch_centres(grid_size, patch_pixels)
    return float(np.linalg.norm(centres[:, None] - centres[None], axis=-1).mean())


def grid_cell_pixels(model, image_size=None):
    """(height, width) in pixels that one token of the grid covers, for images of
    (height, width) `image_size` (None: the model's `image_size`)."""
    image_size = tuple(model.image_size if image_size is None else image_size)
    grid = model.token_grid(image_size)
    return tuple(size / cells for size, cells in zip(image_size, grid))


def attention_distance(model, images, batch_size=32):
    """Mean attention distance (layers, heads) in pixels of a model over images
    (B, H, W, 3) in [-1, 1]; see `mean_attention_distance`."""
    encoder = model.get_layer("Transformer")
    image_size = np.shape(images)[1:3]
    grid, cell = model.token_grid(image_size), grid_cell_pixels(model, image_size)
    total = sum(
        count * mean_attention_distance(weights, grid, cell, encoder.num_output_prefix_tokens)
        for count, weights in _attention_chunks(model, images, batch_size)
    )
    return total / len(images)


# -- Position-embedding similarity (paper Fig. 7 middle) ---------------------------


def cosine_similarity_grid(embeddings, grid_size):
    """Cosine similarity of every grid embedding with every other.

    Args:
        embeddings: (rows*cols, D), row-major over the grid.
        grid_size: (rows, cols).
    Returns:
        float64 array (rows, cols, rows, cols): [i, j] is the map of patch
        (i, j)'s similarity with every patch.
    """
    rows, cols = grid_size
    embeddings = np.asarray(embeddings, np.float64)
    if embeddings.ndim != 2 or embeddings.shape[0] != rows * cols:
        raise ValueError(
            f"cosine_similarity_grid: expected ({rows * cols}, D) for a "
            f"{rows}x{cols} grid, got {embeddings.shape}."
        )
    norms = np.linalg.norm(embeddings, axis=-1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError(
            "cosine_similarity_grid: an embedding is all zeros; its cosine "
            f"similarity is undefined (index {int(np.argmin(norms))})."
        )
    unit = embeddings / norms
    return (unit @ unit.T).reshape(rows, cols, rows, cols)


def position_embedding_similarity(model):
    """(rows, cols, rows, cols) cosine similarities of the model's learned
    position embeddings of the patch grid (the class token's is left out)."""
    layer = model.get_layer("Transformer").position_embedding
    table = keras.ops.convert_to_numpy(layer.pos_embedding)[0]
    return cosine_similarity_grid(table[layer.num_embedded_prefix_tokens :], layer.grid_size)


# -- Embedding filters (paper Fig. 7 left) ---------------------------------------


def principal_components(samples, num_components):
    """Principal components of `samples` (N, F): the top right singular vectors
    of the centred matrix.

    Returns:
        components (k, F), orthonormal rows, k = min(num_components, N, F), and
        the fraction of the variance each explains (k,).
    """
    samples = np.asarray(samples, np.float64)
    if samples.ndim != 2:
        raise ValueError(
            f"principal_components: expected (samples, features), got {samples.shape}."
        )
    centred = samples - samples.mean(axis=0, keepdims=True)
    _, singular, vt = np.linalg.svd(centred, full_matrices=False)
    k = min(int(num_components), *samples.shape)
    variance = singular**2
    total = variance.sum()
    explained = variance[:k] / total if total > 0 else np.zeros(k)
    return vt[:k], explained


def pixel_filters(model):
    """The filters that read the pixels, as image patches: a plain ViT's patch
    embedding kernel (P, P, C, D); a hybrid's ResNet stem convolution
    'root/conv_root' (7, 7, C, W), standardised as the convolution applies it (its
    patch embedding projects ResNet features, not pixels).

    Returns:
        (kernel as a NumPy array (H, W, C, D), a title naming what it is).
    Raises:
        NotMeaningfulError: for inputs of other than 1 or 3 channels.
    """
    if (model.get_config().get("resnet") or None) is not None:
        conv = model.get_layer("root").conv_root
        kernel = keras.ops.convert_to_numpy(conv.standardized_kernel())
        size = "x".join(str(n) for n in kernel.shape[:2])
        title = f"the hybrid's ResNet stem filters ({size}, standardised)"
    else:
        kernel = keras.ops.convert_to_numpy(model.get_layer("embedding").kernel)
        title = "the patch-embedding filters"
    if kernel.ndim != 4 or kernel.shape[2] not in (1, 3):
        raise NotMeaningfulError(
            f"embedding filters: the first layer's kernel has shape {kernel.shape}, "
            "not (H, W, 3, D) on RGB or (H, W, 1, D) on grey pixels; its filters are "
            "not image patches."
        )
    return kernel, title


def embedding_filter_components(model, num_components=28, grayscale=False):
    """Top principal components of the filters that read the pixels (`pixel_filters`:
    the patch embedding's, or a hybrid's stem convolution's) as images.

    The D filters of the kernel (H, W, 3, D) are the samples. With `grayscale=True`
    each filter is first summed over its colour channels: what a model trained on
    grey images (R = G = B) actually uses, since the rest of the kernel never
    receives a gradient. A 1-channel model's kernel (H, W, 1, D) is already grey.

    Returns:
        components (k, H, W, 3), or (k, H, W, 1) with `grayscale` or for a
        1-channel model (orthonormal when flattened), k = min(num_components, D,
        H * W * channels), and the explained variance fractions (k,).
    Raises:
        NotMeaningfulError: for inputs of other than 1 or 3 channels.
    """
    kernel, _ = pixel_filters(model)
    if grayscale:
        kernel = kernel.sum(axis=2, keepdims=True)
    filters = kernel.reshape(-1, kernel.shape[-1]).T  # (D, P*P*channels)
    components, explained = principal_components(filters, num_components)
    return components.reshape(-1, *kernel.shape[:3]), explained


# -- Patch-feature PCA (DINOv2, Oquab et al. 2023, Fig. 1) ------------------------


def patch_feature_pca(model, images, block=-1, num_components=3, batch_size=32):
    """The principal components of the patch features of `images`, as colours: one PCA
    fitted over the patches of all the images together, so that a part that looks
    alike across images gets one colour (as DINOv2 shows its dense features).

    The features are the `model.feature_extractor` map of `block` (1..L, or from the
    end: -1 is the last) after the encoder's final LayerNorm (`norm=True`, DINOv2's
    `x_norm_patchtokens`): patch tokens only, without the class token and register
    tokens. Each component is min-max scaled over all the images to [0, 1]; the
    first three read as red, green, blue.

    Args:
        model: a `keras_vit.VisionTransformer`.
        images: (B, H, W, C) in [-1, 1], the model's size or, for a model of any
            resolution, any size its `token_grid` accepts.
    Returns:
        (B, rows, cols, k) in [0, 1], k = min(num_components, B * rows * cols,
        hidden), and the fraction of the variance each component explains (k,).
    """
    if len(images) == 0:
        raise ValueError("patch_feature_pca: no images given.")
    extractor = model.feature_extractor(blocks=(block,), norm=True)
    maps = np.concatenate(
        [
            keras.ops.convert_to_numpy(
                next(iter(extractor(images[start : start + batch_size]).values()))
            )
            for start in range(0, len(images), batch_size)
        ]
    )
    flat = maps.reshape(-1, maps.shape[-1]).astype(np.float64)
    components, explained = principal_components(flat, num_components)
    projected = (flat - flat.mean(axis=0)) @ components.T
    low, high = projected.min(axis=0), projected.max(axis=0)
    scaled = (projected - low) / np.where(high > low, high - low, 1.0)
    return scaled.reshape(*maps.shape[:3], -1).astype(np.float32), explained
