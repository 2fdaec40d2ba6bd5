"""Rotary position embeddings (RoPE; Su et al., "RoFormer", 2021) in two dimensions,
as the ViT families that use them compute them (timm 1.0.31's
`layers/pos_embed_sincos.py`, transformers' `dinov3_vit`):

    axial   EVA-02 (Fang et al. 2023), RoPE-ViT-Axial (Heo et al., ECCV 2024): half
            of each head's frequency pairs turn with the row, half with the column,
            at frequencies 1 / temperature ** (j / (head_dim / 4)), at integer
            positions (rescaled to `reference_grid` where one is given: EVA-02's
            16 x 16, so that a grid of another size spans the same range).
    mixed   RoPE-ViT-Mixed: each pair turns with f_x * x + f_y * y, learned
            frequencies (2, heads, head_dim / 2) per block.
    dinov3  DINOv3 (Simeoni et al. 2025): axial, at the patch centres normalised
            to [-1, 1] on each axis, periods temperature ** (2 j / (head_dim / 2)).

The angles are computed from the grid of each call: a model made at one
resolution runs at another with no resizing step. Only the patch tokens turn;
the class token and registers before them keep their queries and keys.
"""

import math
import numbers

import keras
import numpy as np
from keras import ops

KINDS = ("axial", "mixed", "dinov3")
# Each kind's settings where a spec leaves them out (timm's defaults for its families).
_DEFAULTS = {
    "axial": dict(temperature=10000.0, grid_indexing="ij", rotate_half=False, reference_grid=None),
    "mixed": dict(temperature=10.0, grid_indexing="xy", rotate_half=False, reference_grid=None),
    "dinov3": dict(temperature=100.0, grid_indexing="ij", rotate_half=True, reference_grid=None),
}
SPEC_KEYS = ("kind", "temperature", "grid_indexing", "rotate_half", "reference_grid")


def rope_spec(value):
    """The rotary option in one form: None, or a dict of every key of `SPEC_KEYS`.

    `value`: None (no rotary embedding), a kind ('axial', 'mixed', 'dinov3') or a
    dict with 'kind' and any of:
        temperature     the frequency base (axial, dinov3); for 'mixed' the scale of
                        the initial frequencies alone (they are learned)
        grid_indexing   'ij': the first half of the pairs turns with the row, the
                        second with the column; 'xy': the other way round
        rotate_half     pairs (j, j + head_dim / 2) instead of (2j, 2j + 1)
        reference_grid  (rows, cols): axial positions rescaled to span this grid

    Raises:
        ValueError: an unknown kind or key, or a bad value (named).
    """
    if value is None:
        return None
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, dict):
        raise ValueError(f"rope must be None, one of {KINDS} or a dict, got {value!r}.")
    kind = value.get("kind")
    if kind not in KINDS:
        raise ValueError(f"rope kind must be one of {KINDS}, got {kind!r}.")
    unknown = sorted(set(value) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(f"rope has unknown keys {unknown}; it takes {list(SPEC_KEYS)}.")
    spec = {"kind": kind, **_DEFAULTS[kind]}
    spec.update({k: v for k, v in value.items() if v is not None or k == "reference_grid"})
    temperature = spec["temperature"]
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise ValueError(f"rope temperature must be a positive number, got {temperature!r}.")
    if not temperature > 0:
        raise ValueError(f"rope temperature must be a positive number, got {temperature!r}.")
    spec["temperature"] = float(temperature)
    if spec["grid_indexing"] not in ("ij", "xy"):
        raise ValueError(f"rope grid_indexing must be 'ij' or 'xy', got {spec['grid_indexing']!r}.")
    if not isinstance(spec["rotate_half"], bool):
        raise ValueError(f"rope rotate_half must be True or False, got {spec['rotate_half']!r}.")
    if kind == "mixed" and spec["rotate_half"]:
        raise ValueError("rope kind 'mixed' turns pairs (2j, 2j + 1): rotate_half must be False.")
    reference = spec["reference_grid"]
    if reference is not None:
        if kind != "axial":
            raise ValueError(f"rope reference_grid is the 'axial' kind's, not {kind!r}'s.")
        if isinstance(reference, numbers.Integral) and not isinstance(reference, bool):
            reference = (reference, reference)
        if (
            not isinstance(reference, (tuple, list))
            or len(reference) != 2
            or not all(isinstance(r, numbers.Integral) and r > 0 for r in reference)
        ):
            raise ValueError(
                f"rope reference_grid must be (rows, cols) of positive integers, got {reference!r}."
            )
        spec["reference_grid"] = [int(r) for r in reference]
    return spec


def _axis_positions(size, spec):
    """The positions along one axis of `size` patches (float32, (size,))."""
    steps = ops.cast(ops.arange(size), "float32")
    if spec["kind"] == "dinov3":  # patch centres, normalised to [0, 1], then to [-1, 1]
        return 2.0 * ((steps + 0.5) / ops.cast(size, "float32")) - 1.0
    return steps


def grid_coordinates(rows, cols, spec):
    """The two coordinates of each patch in row-major order: (rows * cols,) each,
    the first of the pair being the row's for 'ij' and the column's for 'xy'."""
    row, col = _axis_positions(rows, spec), _axis_positions(cols, spec)
    reference = spec["reference_grid"]
    if reference is not None:  # EVA-02: x / size * reference, on each axis
        row = row / ops.cast(rows, "float32") * float(reference[0])
        col = col / ops.cast(cols, "float32") * float(reference[1])
    row = ops.reshape(ops.broadcast_to(ops.expand_dims(row, 1), (rows, cols)), (-1,))
    col = ops.reshape(ops.broadcast_to(ops.expand_dims(col, 0), (rows, cols)), (-1,))
    return (row, col) if spec["grid_indexing"] == "ij" else (col, row)


def axial_frequencies(head_dim, spec):
    """The (head_dim / 4,) angular frequencies of the fixed kinds (NumPy float32):
    1 / temperature ** (j / (head_dim / 4)) (axial); 2 pi / temperature **
    (2 j / (head_dim / 2)) (dinov3, its periods)."""
    bands = head_dim // 4
    temperature = np.float32(spec["temperature"])
    if spec["kind"] == "dinov3":
        periods = temperature ** (2.0 * np.arange(bands, dtype=np.float32) / (head_dim // 2))
        return periods.astype(np.float32)
    exponents = np.arange(bands, dtype=np.float32) / np.float32(bands)
    return (np.float32(1.0) / temperature**exponents).astype(np.float32)


@keras.saving.register_keras_serializable(package="keras_vit")
class RotaryPositionEmbedding(keras.layers.Layer):
    """Turns the queries or keys of the patch tokens by angles of their position
    on the grid (`rope_spec`'s kinds). Each pair of channels (x_a, x_b) becomes
    (x_a cos t - x_b sin t, x_b cos t + x_a sin t): the pairs (2j, 2j + 1), or
    (j, j + head_dim / 2) with `rotate_half`.

    Input shape: (batch, num_prefix_tokens + rows * cols, heads, head_dim); the
    first `num_prefix_tokens` tokens (class token, registers) pass unchanged.
    Output shape: the same.
    Weight ('mixed' alone): `frequencies` (2, heads, head_dim / 2), the x and y
    frequencies (timm's `rope.freqs[:, block]`), initialised as RoPE-ViT's: the
    axial magnitudes 1 / temperature ** (4 j / head_dim), turned by a random angle
    per head.

    Args:
        spec: the rotary form (`rope_spec`: a kind or a dict).
        grid_size: (rows, cols) of the patch grid where a call gives none
            (`call(..., patch_map=)` gives it where it is known only then).
        num_prefix_tokens: the tokens before the patches, left unturned.
        num_heads: the heads of 'mixed' frequencies; None: the input's.
    """

    def __init__(self, spec, grid_size=None, num_prefix_tokens=1, num_heads=None, **kwargs):
        super().__init__(**kwargs)
        self.spec = rope_spec(spec)
        if self.spec is None:
            raise ValueError("RotaryPositionEmbedding needs a rope spec, got None.")
        self.grid_size = None if grid_size is None else tuple(int(g) for g in grid_size)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.num_heads = None if num_heads is None else int(num_heads)
        self.frequencies = None

    def build(self, input_shape):
        head_dim = int(input_shape[-1])
        if head_dim % 4:
            raise ValueError(
                f"rotary position embeddings need a head size divisible by 4, got {head_dim}."
            )
        self.head_dim = head_dim
        if self.spec["kind"] == "mixed":
            heads = self.num_heads or int(input_shape[-2])
            self.frequencies = self.add_weight(
                name="frequencies",
                shape=(2, heads, head_dim // 2),
                initializer=self._mixed_initializer,
            )
        else:
            self._bands = axial_frequencies(head_dim, self.spec)

    def _mixed_initializer(self, shape, dtype=None):
        """RoPE-ViT's `init_random_2d_freqs` for one block: (2, heads, head_dim / 2)."""
        _, heads, half = shape
        magnitude = 1.0 / self.spec["temperature"] ** (np.arange(0, 2 * half, 4) / (2 * half))
        angles = keras.random.uniform((heads, 1), maxval=2 * math.pi)
        magnitude = ops.convert_to_tensor(magnitude[None, :], "float32")
        fx = ops.concatenate(
            [magnitude * ops.cos(angles), magnitude * ops.cos(angles + math.pi / 2)], axis=-1
        )
        fy = ops.concatenate(
            [magnitude * ops.sin(angles), magnitude * ops.sin(angles + math.pi / 2)], axis=-1
        )
        return ops.cast(ops.stack([fx, fy]), dtype or "float32")

    def grid(self, patch_map=None):
        """(rows, cols) of the patches: the patch map's (batch, rows, cols, any)
        where one is given, else `grid_size`."""
        if patch_map is not None:
            shape = ops.shape(patch_map)
            return shape[1], shape[2]
        if self.grid_size is None:
            raise ValueError(f"{self.name}: no grid_size and no patch_map to read the grid from.")
        return self.grid_size

    def tables(self, rows, cols):
        """(sin, cos) of the angles, float32: (rows * cols, 1, head_dim / 2) for the
        fixed kinds, (rows * cols, heads, head_dim / 2) for 'mixed'; the first
        head_dim / 4 angles turn with the first coordinate (`grid_coordinates`)."""
        first, second = grid_coordinates(rows, cols, self.spec)
        if self.spec["kind"] == "mixed":
            frequencies = ops.cast(self.frequencies, "float32")  # (2, heads, half)
            angles = first[:, None, None] * frequencies[0] + second[:, None, None] * frequencies[1]
        else:
            coords = ops.stack([first, second], axis=-1)[:, :, None]  # (N, 2, 1)
            if self.spec["kind"] == "dinov3":  # 2 pi * coordinate / period
                angles = (2.0 * math.pi) * coords / self._bands
            else:
                angles = coords * self._bands
            angles = ops.reshape(angles, (-1, 1, self.head_dim // 2))
        return ops.sin(angles), ops.cos(angles)

    def rotate(self, x, sin, cos):
        """`x` (batch, tokens, heads, head_dim) with its patch tokens turned."""
        prefix = self.num_prefix_tokens
        patches = x[:, prefix:]
        sin, cos = ops.cast(sin, x.dtype), ops.cast(cos, x.dtype)
        if self.spec["rotate_half"]:
            a, b = patches[..., : self.head_dim // 2], patches[..., self.head_dim // 2 :]
            turned = ops.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)
        else:
            pairs = ops.reshape(patches, (*ops.shape(patches)[:-1], self.head_dim // 2, 2))
            a, b = pairs[..., 0], pairs[..., 1]
            turned = ops.stack([a * cos - b * sin, b * cos + a * sin], axis=-1)
            turned = ops.reshape(turned, ops.shape(patches))
        return ops.concatenate([x[:, :prefix], turned], axis=1) if prefix else turned

    def call(self, x, patch_map=None):
        sin, cos = self.tables(*self.grid(patch_map))
        return self.rotate(x, sin, cos)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "spec": dict(self.spec),
                "grid_size": self.grid_size,
                "num_prefix_tokens": self.num_prefix_tokens,
                "num_heads": self.num_heads,
            }
        )
        return config
