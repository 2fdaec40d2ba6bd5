"""Learned 1-D position embeddings (paper Eq. 1) and their resizing (§3.2)."""

import logging

import keras
import numpy as np
import scipy.ndimage

from keras_vit import initializers

logger = logging.getLogger("keras_vit")


@keras.saving.register_keras_serializable(package="keras_vit")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned position embedding to a token sequence.

    Input shape: (batch, num_prefix_tokens + rows*cols, hidden); same output shape.
    Weight: `pos_embedding` (1, num_prefix_tokens + rows*cols, hidden),
    initialised normal(stddev=0.02).

    Args:
        grid_size: (rows, cols) of the patch grid the embedding covers.
        num_prefix_tokens: tokens before the grid (1 with a class token, else 0).
    """

    def __init__(self, grid_size, num_prefix_tokens=1, embeddings_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = tuple(int(g) for g in grid_size)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or initializers.position_embedding()
        )

    @property
    def num_tokens(self):
        return self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]

    def build(self, input_shape):
        if input_shape[1] is not None and input_shape[1] != self.num_tokens:
            raise ValueError(
                f"{self.name}: the sequence has {input_shape[1]} tokens but the "
                f"embedding covers {self.num_tokens} ({self.num_prefix_tokens} prefix + "
                f"{self.grid_size[0]}x{self.grid_size[1]} grid)."
            )
        self.pos_embedding = self.add_weight(
            name="pos_embedding",
            shape=(1, self.num_tokens, input_shape[-1]),
            initializer=self.embeddings_initializer,
        )

    def call(self, tokens):
        return tokens + keras.ops.cast(self.pos_embedding, tokens.dtype)

    def resized(self, grid_size):
        """This layer's embedding (numpy) resized to a new (rows, cols) grid."""
        return resize_position_embedding(
            keras.ops.convert_to_numpy(self.pos_embedding),
            self.grid_size,
            tuple(grid_size),
            self.num_prefix_tokens,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "grid_size": self.grid_size,
                "num_prefix_tokens": self.num_prefix_tokens,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            }
        )
        return config


def resize_position_embedding(posemb, old_grid, new_grid, num_prefix_tokens):
    """Resizes a (1, prefix + rows*cols, D) embedding to another grid.

    Exactly the official `checkpoint.interpolate_posembed`: the prefix (class
    token) embeddings are kept; the grid is reshaped to (rows, cols, D) and
    resampled with `scipy.ndimage.zoom(order=1)` (linear, corner-aligned);
    non-square grids use a zoom factor per axis.

    Args:
        posemb: array (1, num_prefix_tokens + rows*cols, D).
        old_grid: (rows, cols) of `posemb`, or None for a square grid.
        new_grid: (rows, cols) wanted.
        num_prefix_tokens: 1 for class-token models, 0 for GAP models.
    Returns:
        float array (1, num_prefix_tokens + new_rows*new_cols, D).
    """
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
    logger.info("Resizing position embeddings from a %dx%d grid to %dx%d.", *old_grid, *new_grid)
    grid = grid.reshape(old_grid[0], old_grid[1], -1)
    zoom = (new_grid[0] / old_grid[0], new_grid[1] / old_grid[1], 1)
    grid = scipy.ndimage.zoom(grid, zoom, order=1)
    grid = grid.reshape(1, new_grid[0] * new_grid[1], -1)
    return np.concatenate([prefix, grid], axis=1).astype(posemb.dtype)
