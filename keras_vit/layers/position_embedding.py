"""Learned 1-D position embeddings (paper Eq. 1) and their resizing (§3.2): once
at load time (`resize_position_embedding`, numpy), or in the graph for the grid of
each batch (`PositionEmbedding` called on `(tokens, patch_map)`, keras.ops)."""

import logging

import keras
import numpy as np
import scipy.ndimage
from keras import ops

from keras_vit import initializers

logger = logging.getLogger("keras_vit")


@keras.saving.register_keras_serializable(package="keras_vit")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned position embedding to a token sequence.

    Input: tokens (batch, num_prefix_tokens + rows*cols, hidden) of the grid the
    embedding covers, or the pair `(tokens, patch_map)` for a grid known only at
    call time: tokens (batch, num_prefix_tokens + r*c, hidden) and the patch map
    (batch, r, c, any) they were flattened from, of which only the shape is read.
    The embedding is then resized in the graph to (r, c) by `at_grid`, as the
    official `interpolate_posembed` resizes it at load time. Output: the tokens'
    shape.

    Weight: `pos_embedding` (1, num_prefix_tokens + rows*cols, hidden),
    initialised normal(stddev=0.02); (1, rows*cols, hidden) with
    `embed_prefix_tokens=False`.

    Args:
        grid_size: (rows, cols) of the patch grid the embedding covers.
        num_prefix_tokens: tokens before the grid (1 with a class token, else 0).
        embed_prefix_tokens: whether the prefix tokens get an embedding too (the
            original ViT's); False: the patches alone, the prefix passes
            unchanged (DeiT III, timm's no_embed_class).
    """

    def __init__(
        self,
        grid_size,
        num_prefix_tokens=1,
        embeddings_initializer=None,
        embed_prefix_tokens=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.grid_size = tuple(int(g) for g in grid_size)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.embed_prefix_tokens = bool(embed_prefix_tokens)
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or initializers.position_embedding()
        )

    @property
    def num_tokens(self):
        """The tokens of the input sequence at the embedding's own grid."""
        return self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]

    @property
    def num_embedded_prefix_tokens(self):
        """The rows of the weight before the grid's: the prefix tokens that get an
        embedding (all of them, or none with `embed_prefix_tokens=False`)."""
        return self.num_prefix_tokens if self.embed_prefix_tokens else 0

    def build(self, input_shape):
        if _is_shape_pair(input_shape):  # (tokens, patch_map): any grid
            input_shape = input_shape[0]
        elif input_shape[1] is not None and input_shape[1] != self.num_tokens:
            raise ValueError(
                f"{self.name}: the sequence has {input_shape[1]} tokens but the "
                f"embedding covers {self.num_tokens} ({self.num_prefix_tokens} prefix + "
                f"{self.grid_size[0]}x{self.grid_size[1]} grid)."
            )
        rows = self.num_embedded_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        self.pos_embedding = self.add_weight(
            name="pos_embedding",
            shape=(1, rows, input_shape[-1]),
            initializer=self.embeddings_initializer,
        )

    def call(self, inputs):
        if isinstance(inputs, (tuple, list)):
            tokens, patch_map = inputs
            shape = ops.shape(patch_map)
            embedding = self.at_grid((shape[1], shape[2]))
        else:
            tokens, embedding = inputs, self.pos_embedding
        if not self.embed_prefix_tokens and self.num_prefix_tokens:
            prefix = self.num_prefix_tokens
            patches = tokens[:, prefix:] + ops.cast(embedding, tokens.dtype)
            return ops.concatenate([tokens[:, :prefix], patches], axis=1)
        return tokens + ops.cast(embedding, tokens.dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[0] if _is_shape_pair(input_shape) else input_shape)

    def compute_output_spec(self, inputs):
        """The tokens' spec (tracing `call` would relate the unknown sizes of the
        tokens and of the patch map wrongly: they are independent symbols)."""
        tokens = inputs[0] if isinstance(inputs, (tuple, list)) else inputs
        return keras.KerasTensor(tokens.shape, dtype=self.compute_dtype)

    def at_grid(self, grid_size):
        """The embedding (1, num_prefix_tokens + rows*cols, hidden) for a (rows,
        cols) grid, as a tensor in the weight's dtype: the weight itself for its
        own grid; otherwise resized in the graph with the numbers of `resized`
        (the official corner-aligned linear interpolation), the prefix tokens'
        embeddings kept. rows and cols may be Python ints or scalar int tensors
        (a dynamic shape); every op is XLA-compilable.

        The interpolation gathers the two neighbours along each axis and blends
        them elementwise, `(1 - t) * a[lo] + t * a[lo + 1]`, as scipy's order-1
        zoom does: no matrix product, so no reduced-precision matmul mode (TF32 on
        GPUs) can change the result."""
        rows, cols = grid_size
        if (
            isinstance(rows, (int, np.integer))
            and isinstance(cols, (int, np.integer))
            and (int(rows), int(cols)) == self.grid_size
        ):
            return ops.convert_to_tensor(self.pos_embedding)
        table = ops.convert_to_tensor(self.pos_embedding)
        prefix = table[:, : self.num_embedded_prefix_tokens]
        grid = ops.reshape(table[0, self.num_embedded_prefix_tokens :], (*self.grid_size, -1))
        grid = _resize_axis(grid, rows, axis=0)
        grid = _resize_axis(grid, cols, axis=1)
        grid = ops.reshape(grid, (1, -1, ops.shape(table)[-1]))
        return ops.concatenate([prefix, grid], axis=1)

    def resized(self, grid_size):
        """This layer's embedding (numpy) resized to a new (rows, cols) grid."""
        return resize_position_embedding(
            keras.ops.convert_to_numpy(self.pos_embedding),
            self.grid_size,
            tuple(grid_size),
            self.num_embedded_prefix_tokens,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "grid_size": self.grid_size,
                "num_prefix_tokens": self.num_prefix_tokens,
                "embed_prefix_tokens": self.embed_prefix_tokens,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            }
        )
        return config


def _is_shape_pair(input_shape):
    """Whether `build`'s argument is the shapes of (tokens, patch_map)."""
    return len(input_shape) == 2 and all(isinstance(s, (tuple, list)) for s in input_shape)


def _corner_aligned_sampling(size, source_size):
    """Where corner-aligned linear interpolation from `source_size` samples to
    `size` points takes each output point: output index o reads the source
    coordinate o * (source_size - 1) / (size - 1) (0 for size 1), the mapping of
    `scipy.ndimage.zoom(order=1)` (its default grid_mode=False).

    Args:
        size: the output length, a Python int or a scalar int tensor.
        source_size: the input length, a Python int >= 1.
    Returns:
        (low, high, fraction): int32 indices (size,) of the two neighbours
        (high = min(low + 1, source_size - 1)) and the float32 weight (size,) of
        `high`. The coordinate is split in exact integer arithmetic (numerator
        o * (source_size - 1) and denominator size - 1), so `low` is exact and
        `fraction` is one correctly rounded division.
    """
    index = ops.arange(size, dtype="int32")
    denominator = ops.maximum(ops.convert_to_tensor(size, "int32") - 1, 1)
    numerator = index * (int(source_size) - 1)
    low = ops.floor_divide(numerator, denominator)
    fraction = ops.divide(
        ops.cast(numerator - low * denominator, "float32"), ops.cast(denominator, "float32")
    )
    high = ops.minimum(low + 1, int(source_size) - 1)
    return low, high, fraction


def _resize_axis(values, size, axis):
    """Corner-aligned linear resize of `values` to `size` along `axis` (0 or 1 of a
    (rows, cols, D) grid)."""
    low, high, fraction = _corner_aligned_sampling(size, values.shape[axis])
    fraction = ops.reshape(ops.cast(fraction, values.dtype), (-1, 1, 1) if axis == 0 else (-1, 1))
    return (
        ops.take(values, low, axis=axis) * (1 - fraction)
        + ops.take(values, high, axis=axis) * fraction
    )


# How a checkpoint's position embeddings are resized to another grid, by the code
# that wrote it (the per-source default; `resize_position_embedding`'s `method`).
OFFICIAL, TIMM, TRANSFORMERS = "official", "timm", "transformers"
RESIZE_METHODS = (OFFICIAL, TIMM, TRANSFORMERS)


def _cubic(x, a):
    """Keys' cubic convolution kernel of parameter `a` at offsets `x` (array)."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1, near, np.where(x < 2, far, 0.0))


def _bicubic_matrix(size, source_size):
    """(size, source_size) weights of torch's `interpolate(mode='bicubic',
    align_corners=False)` along one axis (transformers' `interpolate_pos_encoding`):
    Keys' a=-0.75 at half-pixel sources, edge indices clamped."""
    source = (np.arange(size) + 0.5) * (source_size / size) - 0.5
    floor = np.floor(source)
    matrix = np.zeros((size, source_size))
    for tap in (-1, 0, 1, 2):
        index = np.clip(floor + tap, 0, source_size - 1).astype(int)
        np.add.at(matrix, (np.arange(size), index), _cubic(source - (floor + tap), -0.75))
    return matrix


def _antialiased_bicubic_matrix(size, source_size):
    """(size, source_size) weights of torch's `interpolate(mode='bicubic',
    antialias=True, align_corners=False)` along one axis (timm's
    `resample_abs_pos_embed`): Keys' a=-0.5 (PIL's), stretched by the
    downscaling factor, cut at the edges and renormalised."""
    scale = source_size / size
    stretch = max(scale, 1.0)
    centre = (np.arange(size) + 0.5) * scale
    low = np.maximum((centre - 2 * stretch + 0.5).astype(int), 0)
    high = np.minimum((centre + 2 * stretch + 0.5).astype(int), source_size)
    matrix = np.zeros((size, source_size))
    for row in range(size):
        taps = np.arange(low[row], high[row])
        weights = _cubic((taps - centre[row] + 0.5) / stretch, -0.5)
        matrix[row, taps] = weights / weights.sum()
    return matrix


def _resized_grid(grid, new_grid, method):
    """A (rows, cols, D) grid resized to `new_grid` by `method` (RESIZE_METHODS)."""
    if method == OFFICIAL:
        zoom = (new_grid[0] / grid.shape[0], new_grid[1] / grid.shape[1], 1)
        return scipy.ndimage.zoom(grid, zoom, order=1)
    matrix = _antialiased_bicubic_matrix if method == TIMM else _bicubic_matrix
    rows, cols = (matrix(new, old) for new, old in zip(new_grid, grid.shape[:2]))
    # float64 weights on float32 values: each output a short sum, rounded once.
    return np.einsum("ir,jc,rcd->ijd", rows, cols, grid.astype(np.float64))


def resize_position_embedding(posemb, old_grid, new_grid, num_prefix_tokens, method=OFFICIAL):
    """Resizes a (1, prefix + rows*cols, D) embedding to another grid.

    The prefix (class token) embeddings are kept; the grid is reshaped to (rows,
    cols, D) and resampled by `method`:
        'official'      exactly the official `checkpoint.interpolate_posembed`:
                        `scipy.ndimage.zoom(order=1)` (linear, corner-aligned; a
                        zoom factor per axis)
        'timm'          timm's `resample_abs_pos_embed`: torch's bicubic with
                        antialias, align_corners=False
        'transformers'  transformers' ViT `interpolate_pos_encoding`: torch's
                        bicubic, align_corners=False

    Args:
        posemb: array (1, num_prefix_tokens + rows*cols, D).
        old_grid: (rows, cols) of `posemb`, or None for a square grid.
        new_grid: (rows, cols) wanted.
        num_prefix_tokens: 1 for class-token models, 0 for GAP models.
        method: one of RESIZE_METHODS.
    Returns:
        float array (1, num_prefix_tokens + new_rows*new_cols, D).
    """
    if method not in RESIZE_METHODS:
        raise ValueError(
            f"position embedding resize method {method!r} is not one of {RESIZE_METHODS}."
        )
    posemb = np.asarray(posemb)
    if posemb.ndim != 3 or posemb.shape[0] != 1:
        raise ValueError(f"position embedding must be (1, N, D), got {posemb.shape}.")
    prefix, grid = posemb[:, :num_prefix_tokens], posemb[0, num_prefix_tokens:]
    if old_grid is None:
        side = int(round(np.sqrt(len(grid))))
        old_grid = (side, side)
    old_grid, new_grid = tuple(old_grid), tuple(new_grid)
    if old_grid[0] * old_grid[1] != len(grid):
        raise ValueError(
            f"position embedding has {len(grid)} grid tokens, which is not a "
            f"{old_grid[0]}x{old_grid[1]} grid."
        )
    if old_grid == new_grid:
        return posemb
    logger.info(
        "Resizing position embeddings from a %dx%d grid to %dx%d (%s).",
        *old_grid,
        *new_grid,
        method,
    )
    grid = _resized_grid(grid.reshape(old_grid[0], old_grid[1], -1), new_grid, method)
    grid = grid.reshape(1, new_grid[0] * new_grid[1], -1)
    return np.concatenate([prefix, grid], axis=1).astype(posemb.dtype)
