"""The hybrids' ResNet (paper §3.1 "Hybrid Architecture"): BiT's ResNet v1.5 with
weight-standardised convolutions and group normalisation, as the official
`vit_jax/models_resnet.py` and the root block of `vit_jax/models_vit.py`.

Layer and sub-layer names are the checkpoint's module names: the stem 'root'
holds 'conv_root' and 'gn_root'; stage 'block{s}' holds units 'unit{u}', each
with 'conv1', 'gn1', 'conv2', 'gn2', 'conv3', 'gn3' and, where the unit changes
the shape, 'conv_proj' and 'gn_proj'.
"""

import numbers

import keras
from keras import ops

from keras_vit.layers.group_norm import group_norm
from keras_vit.layers.patch_embedding import to_pair
from keras_vit.layers.std_conv import StdConv2D

ROOT_WIDTH = 64  # stem width; stage s (0-based) has bottleneck width 64 * 2**s
EXPANSION = 4  # a unit's output width is 4x its bottleneck width


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetStem(keras.layers.Layer):
    """The root block: StdConv 7x7 / 2 'conv_root' (no bias) -> GroupNorm
    'gn_root' -> ReLU -> max-pool 3x3 / 2, all with TF-style 'SAME' padding.

    Input shape: (batch, height, width, channels). Output shape:
    (batch, ceil(ceil(height / 2) / 2), ceil(ceil(width / 2) / 2), width).
    """

    def __init__(self, width=ROOT_WIDTH, **kwargs):
        super().__init__(**kwargs)
        self.width = int(width)
        self.conv_root = StdConv2D(
            self.width, 7, strides=2, name="conv_root", dtype=self.dtype_policy
        )
        self.gn_root = group_norm("gn_root", dtype=self.dtype_policy)

    def build(self, input_shape):
        self.conv_root.build(input_shape)
        self.gn_root.build(self.conv_root.compute_output_shape(input_shape))

    def call(self, inputs):
        x = ops.relu(self.gn_root(self.conv_root(inputs)))
        return ops.max_pool(x, pool_size=3, strides=2, padding="same")

    def compute_output_shape(self, input_shape):
        batch, height, width = input_shape[:3]
        return (batch, _halve(_halve(height)), _halve(_halve(width)), self.width)

    def get_config(self):
        return {**super().get_config(), "width": self.width}


@keras.saving.register_keras_serializable(package="keras_vit")
class BottleneckUnit(keras.layers.Layer):
    """A bottleneck residual unit (the official 'ResidualUnit'; stride in the 3x3
    convolution as in ResNet v1.5):

        y = relu(gn1(conv1_1x1(x)))
        y = relu(gn2(conv2_3x3_stride(y)))
        y = gn3(conv3_1x1(y))                 (gn3 scale initialised to zeros)
        residual = gn_proj(conv_proj_1x1_stride(x))  if the shape changes, else x
        out = relu(residual + y)

    The projection exists when the input has not `4 * features` channels or the
    stride is not 1 (decided at build time from the input shape).

    Input shape: (batch, height, width, channels). Output shape:
    (batch, ceil(height / stride), ceil(width / stride), 4 * features).
    """

    def __init__(self, features, strides=1, **kwargs):
        super().__init__(**kwargs)
        self.features = int(features)
        self.strides = to_pair(strides, "strides")
        policy = self.dtype_policy
        out = EXPANSION * self.features
        self.conv1 = StdConv2D(self.features, 1, name="conv1", dtype=policy)
        self.gn1 = group_norm("gn1", dtype=policy)
        self.conv2 = StdConv2D(self.features, 3, strides=self.strides, name="conv2", dtype=policy)
        self.gn2 = group_norm("gn2", dtype=policy)
        self.conv3 = StdConv2D(out, 1, name="conv3", dtype=policy)
        self.gn3 = group_norm("gn3", zero_scale=True, dtype=policy)
        self.conv_proj = None
        self.gn_proj = None

    def build(self, input_shape):
        if input_shape[-1] != EXPANSION * self.features or self.strides != (1, 1):
            self.conv_proj = StdConv2D(
                EXPANSION * self.features,
                1,
                strides=self.strides,
                name="conv_proj",
                dtype=self.dtype_policy,
            )
            self.gn_proj = group_norm("gn_proj", dtype=self.dtype_policy)
            self.conv_proj.build(input_shape)
            self.gn_proj.build(self.conv_proj.compute_output_shape(input_shape))
        shape = input_shape
        for conv, norm in self.conv_norm_pairs()[:3]:
            conv.build(shape)
            shape = conv.compute_output_shape(shape)
            norm.build(shape)

    def conv_norm_pairs(self):
        """[(conv1, gn1), (conv2, gn2), (conv3, gn3)] + [(conv_proj, gn_proj)] if any."""
        pairs = [(self.conv1, self.gn1), (self.conv2, self.gn2), (self.conv3, self.gn3)]
        if self.conv_proj is not None:
            pairs.append((self.conv_proj, self.gn_proj))
        return pairs

    def call(self, inputs):
        residual = inputs
        if self.conv_proj is not None:
            residual = self.gn_proj(self.conv_proj(inputs))
        y = ops.relu(self.gn1(self.conv1(inputs)))
        y = ops.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        return ops.relu(residual + y)

    def compute_output_shape(self, input_shape):
        batch, height, width = input_shape[:3]
        rows, cols = (
            None if n is None else -(-n // s) for n, s in zip((height, width), self.strides)
        )
        return (batch, rows, cols, EXPANSION * self.features)

    def get_config(self):
        return {**super().get_config(), "features": self.features, "strides": self.strides}


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetStage(keras.layers.Layer):
    """A stage of `num_units` bottleneck units 'unit1'.. of bottleneck width
    `features`; the first unit has stride `first_stride` (and a projection).

    Input shape: (batch, height, width, channels). Output shape:
    (batch, ceil(height / first_stride), ceil(width / first_stride), 4 * features).
    """

    def __init__(self, num_units, features, first_stride=1, **kwargs):
        super().__init__(**kwargs)
        self.num_units = int(num_units)
        if self.num_units < 1:
            raise ValueError(f"{self.name}: a stage needs at least one unit, got {num_units}.")
        self.features = int(features)
        self.first_stride = to_pair(first_stride, "first_stride")
        self.units = [
            BottleneckUnit(
                self.features,
                strides=self.first_stride if i == 0 else 1,
                name=f"unit{i + 1}",
                dtype=self.dtype_policy,
            )
            for i in range(self.num_units)
        ]

    def build(self, input_shape):
        for unit in self.units:
            unit.build(input_shape)
            input_shape = unit.compute_output_shape(input_shape)

    def call(self, inputs):
        x = inputs
        for unit in self.units:
            x = unit(x)
        return x

    def compute_output_shape(self, input_shape):
        return self.units[0].compute_output_shape(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "num_units": self.num_units,
            "features": self.features,
            "first_stride": self.first_stride,
        }


def resnet_spec(value):
    """Normalises a `resnet=` argument: None (no ResNet), a sequence of units per
    stage (`(3, 4, 9)`; `()` for the stem alone) or a mapping like the official
    config {'num_layers': (3, 4, 9), 'width_factor': 1}.

    Returns:
        None or {'num_layers': tuple of ints >= 1, 'width_factor': number > 0}.
    Raises:
        ValueError naming what is wrong.
    """
    if value is None:
        return None
    if hasattr(value, "to_dict"):  # ml_collections.ConfigDict
        value = value.to_dict()
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"num_layers", "width_factor"})
        if unknown or "num_layers" not in value:
            raise ValueError(
                "resnet must hold 'num_layers' and optionally 'width_factor'; got keys "
                f"{sorted(value)}."
            )
        num_layers, width_factor = value["num_layers"], value.get("width_factor", 1)
    else:
        num_layers, width_factor = value, 1
    if isinstance(num_layers, (str, bytes)) or not hasattr(num_layers, "__iter__"):
        raise ValueError(
            f"resnet num_layers must be a sequence of unit counts per stage, got {num_layers!r}."
        )
    num_layers = tuple(num_layers)
    if not all(
        isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 1 for n in num_layers
    ):
        raise ValueError(f"resnet num_layers must be positive integers, got {num_layers!r}.")
    if (
        isinstance(width_factor, bool)
        or not isinstance(width_factor, numbers.Real)
        or width_factor <= 0
        or (ROOT_WIDTH * width_factor) % 32
    ):
        raise ValueError(
            f"resnet width_factor must be a positive number with 64 * width_factor a "
            f"multiple of 32 (the GroupNorm groups), got {width_factor!r}."
        )
    if float(width_factor).is_integer():
        width_factor = int(width_factor)
    return {"num_layers": tuple(int(n) for n in num_layers), "width_factor": width_factor}


def resnet_stride(spec):
    """Total downsampling of a normalised spec: 4 for the stem, x2 per stage
    after the first."""
    return 4 * 2 ** max(len(spec["num_layers"]) - 1, 0)


def resnet_layers(spec, dtype=None):
    """The stem 'root' and the stages 'block1'.. of a normalised spec, in order."""
    width = int(ROOT_WIDTH * spec["width_factor"])
    layers = [ResNetStem(width, name="root", dtype=dtype)]
    for i, num_units in enumerate(spec["num_layers"]):
        layers.append(
            ResNetStage(
                num_units,
                width * 2**i,
                first_stride=1 if i == 0 else 2,
                name=f"block{i + 1}",
                dtype=dtype,
            )
        )
    return layers


def _halve(size):
    return None if size is None else -(-size // 2)
