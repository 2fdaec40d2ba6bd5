"""The paper's §4.5 figures (Fig. 6, Fig. 7) as PNG files, from the numpy arrays of
keras_vit.inspect. matplotlib with the Agg backend; no display needed."""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from keras_vit import inspect as vit_inspect


def _save(fig, path):
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def _display(image):
    """[-1, 1] (H, W, 3) -> [0, 1], for imshow."""
    return np.clip((np.asarray(image, np.float64) + 1) / 2, 0, 1)


def attention_overlays(images, maps, path, titles=None, source=None):
    """Fig. 6: per image, the input, the rollout heat-map over it, and the input
    weighted by the map (normalised to a maximum of 1).

    Args:
      images: (B, H, W, 3) in [-1, 1].
      maps: (B, rows, cols) rollout maps (keras_vit.inspect.attention_maps).
      source: where the images come from ('the test split of DATA'), in the title.
    """
    images = np.asarray(images)
    upsampled = vit_inspect.upsample(maps, images.shape[1:3])
    fig, axes = plt.subplots(len(images), 3, figsize=(6, 2 * len(images)), squeeze=False)
    for i, (image, heat) in enumerate(zip(images, upsampled)):
        shown = _display(image)
        heat = heat / heat.max()
        axes[i, 0].imshow(shown)
        axes[i, 1].imshow(shown)
        axes[i, 1].imshow(heat, cmap="jet", alpha=0.5)
        axes[i, 2].imshow(shown * heat[..., None])
        if titles is not None:
            axes[i, 0].set_ylabel(str(titles[i]), fontsize=8)
        for ax in axes[i]:
            ax.set_xticks([])
            ax.set_yticks([])
    for ax, title in zip(axes[0], ("input", "attention rollout", "input x rollout")):
        ax.set_title(title, fontsize=9)
    fig.suptitle(
        _of_images(len(images), source) + "; each map scaled to a maximum of 1", fontsize=9
    )
    return _save(fig, path)


def _of_images(count, source):
    """'3 images from the test split of DATA' (the figure's data, for its title)."""
    return f"{count} image{'s' * (count != 1)}" + (f" from {source}" if source else "")


def attention_distance(distance, path, image_size=None, uniform=None, count=None, source=None):
    """Fig. 7 right: mean attention distance (pixels) of each head against depth;
    `uniform`, if given, is drawn as the distance of uniform attention; `count` images
    from `source` (`attention_overlays`) are what the distances are the mean over."""
    distance = np.asarray(distance)
    layers, heads = distance.shape
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    depth = np.repeat(np.arange(1, layers + 1), heads)
    colours = np.tile(np.arange(heads), layers)
    ax.scatter(depth, distance.ravel(), c=colours, cmap="tab20", s=18)
    ax.set_xlabel("network depth (layer)")
    ax.set_ylabel("mean attention distance (pixels)")
    ax.set_xticks(range(1, layers + 1))
    if uniform is not None:
        ax.axhline(uniform, color="grey", linestyle="--", linewidth=1, label="uniform attention")
        ax.legend(fontsize=8, loc="lower right")
    title = [f"{heads} heads"]
    if image_size is not None:
        ax.set_ylim(0, math.hypot(*image_size) / 2)
        title.append(f"{image_size[0]}x{image_size[1]} px input")
    title = ", ".join(title)
    if count is not None:
        title += ",\nmean over " + _of_images(count, source)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def position_similarity(similarity, path):
    """Fig. 7 middle: for each patch (row, column), the cosine similarity of its
    position embedding with every patch's, as a grid of small grids."""
    similarity = np.asarray(similarity)
    rows, cols = similarity.shape[:2]
    fig, axes = plt.subplots(rows, cols, figsize=(0.6 * cols + 1, 0.6 * rows), squeeze=False)
    for r in range(rows):
        for c in range(cols):
            image = axes[r, c].imshow(similarity[r, c], vmin=-1, vmax=1, cmap="viridis")
            axes[r, c].set_xticks([])
            axes[r, c].set_yticks([])
            if c == 0:
                axes[r, c].set_ylabel(str(r + 1), fontsize=7, rotation=0, labelpad=8)
            if r == rows - 1:
                axes[r, c].set_xlabel(str(c + 1), fontsize=7)
    fig.supxlabel("input patch column", fontsize=9)
    fig.supylabel("input patch row", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label="cosine similarity")
    return _save(fig, path)


def embedding_filters(
    components, path, explained=None, columns=7, title="the patch-embedding filters"
):
    """Fig. 7 left: principal components of the filters that read the pixels
    (`title` names them: keras_vit.inspect.pixel_filters), each min-max scaled to
    [0, 1] and shown as an RGB patch ((k, P, P, 3)), or grey ((k, P, P, 1), filters
    summed over the colour channels)."""
    components = np.asarray(components)
    count = len(components)
    rows = -(-count // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(1.1 * columns, 1.2 * rows), squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for i, component in enumerate(components):
        low, high = component.min(), component.max()
        tile = (component - low) / (high - low) if high > low else np.zeros_like(component)
        ax = axes.ravel()[i]
        if tile.shape[-1] == 1:  # summed over colour channels
            ax.imshow(tile[..., 0], cmap="gray", interpolation="nearest")
        else:
            ax.imshow(tile, interpolation="nearest")
        if explained is not None:
            ax.set_title(f"{100 * explained[i]:.1f}%", fontsize=7)
    fig.suptitle(f"principal components of {title}", fontsize=9)
    return _save(fig, path)


def patch_feature_pca(images, colours, path, explained, block_name, source=None):
    """DINOv2's Fig. 1: per image, the input and its patch features' first three
    principal components as red, green and blue (one PCA over all the images' patches).

    Args:
      images: (B, H, W, C) in [-1, 1], C 1 or 3.
      colours: (B, rows, cols, k) in [0, 1] (keras_vit.inspect.patch_feature_pca);
        fewer than 3 components leave the missing colours at 0.
      explained: the variance fraction of each component (k,), in the title.
      block_name: the features' block ('block 12 after the final LayerNorm').
    """
    images = np.asarray(images)
    colours = np.asarray(colours)
    rgb = np.zeros((*colours.shape[:3], 3))
    rgb[..., : min(3, colours.shape[-1])] = colours[..., :3]
    fig, axes = plt.subplots(len(images), 2, figsize=(4, 2 * len(images)), squeeze=False)
    for i, (image, pca) in enumerate(zip(images, rgb)):
        shown = _display(image)
        if shown.shape[-1] == 1:
            axes[i, 0].imshow(shown[..., 0], cmap="gray", vmin=0, vmax=1)
        else:
            axes[i, 0].imshow(shown)
        # each patch one colour, stretched over the image's extent
        axes[i, 1].imshow(pca, interpolation="nearest")
        for ax in axes[i]:
            ax.set_xticks([])
            ax.set_yticks([])
    for ax, title in zip(axes[0], ("input", "patch features: PCA 1-3 as RGB")):
        ax.set_title(title, fontsize=9)
    shares = ", ".join(f"{100 * v:.0f}%" for v in np.asarray(explained)[:3])
    fig.suptitle(
        f"{_of_images(len(images), source)}; {block_name}; one PCA over all their patches "
        f"(variance explained: {shares})",
        fontsize=8,
    )
    return _save(fig, path)
