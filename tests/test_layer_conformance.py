"""Every registered keras_vit layer through the generic checks of tests/layer_testing.py,
under this backend and, in one subprocess for all of them, under the other one."""

import importlib
import os
import pkgutil
import subprocess
import sys

import keras
import pytest
from layer_testing import check_layer

import keras_vit
from keras_vit import layers
from keras_vit.fewshot import PatchTokens
from keras_vit.layers.group_norm import group_norm
from keras_vit.layers.patch_embedding import PatchTokenMap
from keras_vit.masked_patch import MaskedPatchHead

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BACKENDS = ("tensorflow", "jax")


def entry(layer_cls, init_kwargs, variant=None, **checks):
    """One pytest case: check_layer(layer_cls, init_kwargs, **checks)."""
    name = getattr(layer_cls, "__name__", None)
    return pytest.param(layer_cls, init_kwargs, checks, id=f"{name}-{variant}" if variant else name)


# Tiny sizes. Dropout and stochastic depth rates are > 0 so that training=True takes the
# random paths; the expected counts are per layer: weights (trainable, non-trainable) and
# seed generators (one per Dropout of rate > 0 and per StochasticDepth of rate > 0).
TOKENS = (2, 7, 8)  # (batch, 1 + 2x3 grid, hidden)
ATTENTION_WEIGHTS = (2, 2, 7, 7)  # (batch, heads, tokens, tokens)
ENTRIES = [
    entry(
        layers.PatchEmbedding,
        dict(patch_size=4, hidden_size=8),
        input_shape=(2, 12, 16, 3),
        expected_output_shape=(2, 12, 8),
        expected_num_trainable_weights=2,
    ),
    entry(
        layers.PatchEmbedding,
        dict(patch_size=(4, 2), hidden_size=8),
        "map",
        input_shape=(2, 12, 8, 3),
        call_kwargs=dict(return_map=True),
        expected_output_shape=((2, 12, 8), (2, 3, 4, 8)),
        expected_num_trainable_weights=2,
    ),
    entry(
        PatchTokenMap,
        dict(grid_size=(2, 3), num_prefix_tokens=1),
        input_shape=TOKENS,
        expected_output_shape=(2, 2, 3, 8),
        expected_num_trainable_weights=0,
    ),
    entry(
        PatchTokenMap,
        dict(num_prefix_tokens=1),
        "map",
        input_shape=((2, 13, 8), (2, 3, 4, 5)),  # (tokens, patch map of a 3x4 grid)
        expected_output_shape=(2, 3, 4, 8),
        expected_num_trainable_weights=0,
    ),
    entry(
        layers.ClassToken,
        {},
        input_shape=(2, 6, 8),
        expected_output_shape=TOKENS,
        expected_num_trainable_weights=1,
    ),
    entry(
        layers.PositionEmbedding,
        dict(grid_size=(2, 3), num_prefix_tokens=1),
        input_shape=TOKENS,
        expected_output_shape=TOKENS,
        expected_num_trainable_weights=1,
    ),
    entry(
        layers.PositionEmbedding,
        dict(grid_size=(2, 3), num_prefix_tokens=1),
        "map",
        input_shape=((2, 13, 8), (2, 3, 4, 5)),  # resized in the graph to a 3x4 grid
        expected_output_shape=(2, 13, 8),
        expected_num_trainable_weights=1,
    ),
    entry(
        layers.MultiHeadSelfAttention,
        dict(num_heads=2, dropout_rate=0.1, pad_tokens_to_multiple=4),
        input_shape=TOKENS,
        expected_output_shape=TOKENS,
        expected_num_trainable_weights=8,
        expected_num_seed_generators=1,
    ),
    entry(
        layers.MultiHeadSelfAttention,
        dict(num_heads=2, use_fused_attention=False),
        "weights",
        input_shape=TOKENS,
        call_kwargs=dict(return_attention_weights=True),
        expected_output_shape=(TOKENS, ATTENTION_WEIGHTS),
        expected_num_trainable_weights=8,
    ),
    entry(
        layers.MlpBlock,
        dict(mlp_dim=16, dropout_rate=0.1, approximate_gelu=False),
        input_shape=TOKENS,
        expected_output_shape=TOKENS,
        expected_num_trainable_weights=4,
        expected_num_seed_generators=1,
    ),
    entry(
        layers.MlpBlock,
        dict(mlp_dim=16, dropout_rate=0.1, gated=True, inner_norm=True, layer_norm_epsilon=1e-5),
        "swiglu-norm",
        input_shape=TOKENS,
        expected_output_shape=TOKENS,
        expected_num_trainable_weights=6,  # Dense_0 (8, 32), norm, Dense_1
        expected_num_seed_generators=1,
    ),
    entry(
        layers.MultiHeadSelfAttention,
        dict(num_heads=2, rope="mixed", grid_size=(2, 3), num_prefix_tokens=1, qk_norm=True),
        "rope-qk_norm",
        input_shape=TOKENS,
        expected_output_shape=TOKENS,
        expected_num_trainable_weights=13,  # 8, two LayerNorms, the mixed frequencies
    ),
    entry(
        layers.RotaryPositionEmbedding,
        dict(spec={"kind": "axial", "reference_grid": (4, 4)}, grid_size=(2, 3)),
        "axial",
        input_shape=(2, 7, 2, 8),  # (batch, 1 + 2x3, heads, head_dim)
        expected_output_shape=(2, 7, 2, 8),
        expected_num_trainable_weights=0,
    ),
    entry(
        layers.RotaryPositionEmbedding,
        dict(spec="dinov3", grid_size=(2, 3), num_prefix_tokens=3),
        "dinov3",
        input_shape=(2, 9, 2, 8),
        expected_output_shape=(2, 9, 2, 8),
        expected_num_trainable_weights=0,
    ),
    entry(
        layers.RotaryPositionEmbedding,
        dict(spec="mixed", grid_size=(2, 3), num_heads=2),
        "mixed",
        input_shape=(2, 7, 2, 8),
        expected_output_shape=(2, 7, 2, 8),
        expected_num_trainable_weights=1,
    ),
    entry(
        layers.StochasticDepth,
        dict(rate=0.5, seed=1),
        input_shape=TOKENS,
        expected_output_shape=TOKENS,
        expected_num_trainable_weights=0,
        expected_num_seed_generators=1,
    ),
    entry(
        layers.EncoderBlock,
        dict(
            num_heads=2,
            mlp_dim=16,
            dropout_rate=0.1,
            attention_dropout_rate=0.1,
            stochastic_depth_rate=0.1,
            layer_norm_epsilon=1e-5,
        ),
        input_shape=TOKENS,
        expected_output_shape=TOKENS,
        expected_num_trainable_weights=16,  # 2 LayerNorms (2 each), attention 8, MLP 4
        expected_num_seed_generators=4,  # drop path, attention, block and MLP dropout
    ),
    entry(
        layers.EncoderBlock,
        dict(num_heads=2, mlp_dim=16),
        "weights",
        input_shape=TOKENS,
        call_kwargs=dict(return_attention_weights=True),
        expected_output_shape=(TOKENS, ATTENTION_WEIGHTS),
        expected_num_trainable_weights=16,
    ),
    entry(
        layers.Encoder,
        dict(
            grid_size=(2, 3),
            num_layers=2,
            num_heads=2,
            mlp_dim=16,
            dropout_rate=0.1,
            stochastic_depth_rate=0.1,
        ),
        input_shape=TOKENS,
        expected_output_shape=TOKENS,
        expected_num_trainable_weights=35,  # position embedding, 2 blocks of 16, encoder_norm
        # Its own dropout, 2 per block (block and MLP), drop path in block 1 (block 0: rate 0).
        expected_num_seed_generators=6,
    ),
    entry(
        layers.Encoder,
        dict(grid_size=(2, 3), num_layers=2, num_heads=2, mlp_dim=16),
        "weights-states",
        input_shape=TOKENS,
        call_kwargs=dict(return_attention_weights=True, return_hidden_states=True),
        expected_output_shape=(TOKENS, [ATTENTION_WEIGHTS] * 2, [TOKENS] * 3),
        expected_num_trainable_weights=35,
    ),
    entry(
        layers.Encoder,
        dict(grid_size=(2, 3), num_layers=1, num_heads=2, mlp_dim=16, num_prefix_tokens=1),
        "map",
        input_shape=((2, 13, 8), (2, 3, 4, 5)),  # position embedding resized to a 3x4 grid
        expected_output_shape=(2, 13, 8),
        expected_num_trainable_weights=19,  # position embedding, 1 block of 16, encoder_norm
    ),
    entry(
        layers.Encoder,
        dict(
            grid_size=(2, 3),
            num_layers=1,
            num_heads=2,
            mlp_dim=16,
            num_registers=2,
            absolute_position_embedding=False,
            rope="dinov3",
            gated_mlp=True,
            layer_scale_init=1e-5,
        ),
        "dinov3",
        input_shape=((2, 13, 8), (2, 3, 4, 5)),  # the rotary angles of a 3x4 grid
        expected_output_shape=(2, 15, 8),
        expected_num_trainable_weights=21,  # registers, a block of 18, encoder_norm
    ),
    entry(
        layers.TokenPooling,
        dict(classifier="token"),
        "token",
        input_shape=TOKENS,
        expected_output_shape=(2, 8),
        expected_num_trainable_weights=0,
    ),
    entry(
        layers.TokenPooling,
        dict(classifier="gap"),
        "gap",
        input_shape=TOKENS,
        expected_output_shape=(2, 8),
        expected_num_trainable_weights=0,
    ),
    entry(
        layers.PatchCorruption,
        dict(corruption_rate=0.5, seed=3),
        input_shape=(2, 6, 8),
        expected_output_shape=((2, 6, 8), (2, 6)),
        expected_num_trainable_weights=1,
        expected_num_seed_generators=1,
    ),
    entry(
        layers.StdConv2D,
        dict(filters=8, kernel_size=3, strides=2),
        "same",
        input_shape=(2, 9, 10, 4),
        expected_output_shape=(2, 5, 5, 8),
        expected_num_trainable_weights=1,
    ),
    entry(
        layers.StdConv2D,
        dict(filters=8, kernel_size=(3, 2), padding="valid"),
        "valid",
        input_shape=(2, 9, 10, 4),
        expected_output_shape=(2, 7, 9, 8),
        expected_num_trainable_weights=1,
    ),
    entry(
        group_norm,
        dict(name="gn", zero_scale=True),
        input_shape=(2, 3, 4, 32),
        expected_output_shape=(2, 3, 4, 32),
        expected_num_trainable_weights=2,
    ),
    entry(
        layers.ResNetStem,
        dict(width=32),
        input_shape=(2, 9, 10, 3),  # 9 -> 5 -> 3 and 10 -> 5 -> 3: odd and even steps
        expected_output_shape=(2, 3, 3, 32),
        expected_num_trainable_weights=3,
    ),
    entry(
        layers.BottleneckUnit,
        dict(features=32, strides=2),
        "projection",
        input_shape=(2, 9, 10, 32),
        expected_output_shape=(2, 5, 5, 128),
        expected_num_trainable_weights=12,  # 4 convolutions (1 each), 4 GroupNorms (2 each)
    ),
    entry(
        layers.ResNetStage,
        dict(num_units=2, features=32, first_stride=2),
        input_shape=(2, 9, 10, 32),
        expected_output_shape=(2, 5, 5, 128),
        # A projection unit (12) and an identity one (9: no conv_proj, gn_proj).
        expected_num_trainable_weights=21,
    ),
    # The family options (keras_vit.families).
    entry(
        layers.PatchEmbedding,
        dict(patch_size=4, hidden_size=8, use_bias=False),
        "no-bias",
        input_shape=(2, 12, 16, 3),
        expected_output_shape=(2, 12, 8),
        expected_num_trainable_weights=1,
    ),
    entry(
        layers.PatchEmbedding,
        dict(patch_size=4, hidden_size=8, norm_epsilon=1e-6),
        "norm",
        input_shape=(2, 12, 16, 3),
        expected_output_shape=(2, 12, 8),
        expected_num_trainable_weights=4,
    ),
    entry(
        layers.PositionEmbedding,
        dict(grid_size=(2, 3), num_prefix_tokens=1, embed_prefix_tokens=False),
        "patches-only",
        input_shape=((2, 13, 8), (2, 3, 4, 5)),  # resized in the graph to a 3x4 grid
        expected_output_shape=(2, 13, 8),
        expected_num_trainable_weights=1,
    ),
    entry(
        layers.LayerScale,
        dict(init_value=0.1),
        input_shape=TOKENS,
        expected_output_shape=TOKENS,
        expected_num_trainable_weights=1,
    ),
    entry(
        layers.RegisterTokens,
        dict(num_registers=2, num_prefix_tokens=1),
        input_shape=TOKENS,
        expected_output_shape=(2, 9, 8),
        expected_num_trainable_weights=1,
    ),
    entry(
        layers.MultiHeadAttentionPooling,
        dict(num_heads=2, mlp_dim=16, layer_norm_epsilon=1e-5, quick_gelu=True),
        input_shape=TOKENS,
        expected_output_shape=(2, 8),
        expected_num_trainable_weights=15,  # probe, attention 8, LayerNorm 2, MLP 4
    ),
    entry(
        layers.MlpBlock,
        dict(mlp_dim=16, quick_gelu=True),
        "quick-gelu",
        input_shape=TOKENS,
        expected_output_shape=TOKENS,
        expected_num_trainable_weights=4,
    ),
    entry(
        layers.EncoderBlock,
        dict(num_heads=2, mlp_dim=16, layer_scale_init=0.1, stochastic_depth_rate=0.1),
        "layer-scale",
        input_shape=TOKENS,
        expected_output_shape=TOKENS,
        expected_num_trainable_weights=18,  # 16 and the two LayerScales
        expected_num_seed_generators=1,  # drop path
    ),
    entry(
        layers.Encoder,
        dict(
            grid_size=(2, 3),
            num_layers=2,
            num_heads=2,
            mlp_dim=16,
            num_registers=2,
            position_embedding_for_class_token=False,
            pre_norm=True,
            layer_scale_init=0.1,
            quick_gelu=True,
        ),
        "families",
        input_shape=TOKENS,
        expected_output_shape=(2, 9, 8),  # the registers join the sequence
        # position embedding, registers, pre-norm 2, 2 blocks of 18, encoder_norm 2
        expected_num_trainable_weights=42,
    ),
    # Registered layers outside keras_vit.layers.
    entry(
        PatchTokens,
        dict(num_prefix_tokens=1),
        input_shape=TOKENS,
        expected_output_shape=(2, 6, 8),
        expected_num_trainable_weights=0,
    ),
    entry(
        MaskedPatchHead,
        dict(num_classes=5, num_prefix_tokens=1),
        input_shape={"tokens": TOKENS, "corrupted": (2, 6)},
        expected_output_shape=(2, 6, 6),
        expected_num_trainable_weights=2,
    ),
]


@pytest.mark.parametrize("layer_cls,init_kwargs,checks", ENTRIES)
def test_layer(layer_cls, init_kwargs, checks):
    check_layer(layer_cls, init_kwargs, **checks)


# -- check_layer catches what it is there for ------------------------------------------

_register = keras.saving.register_keras_serializable(package="keras_vit_tests")


@_register
class _ForgetsArgument(layers.MlpBlock):
    def get_config(self):
        config = super().get_config()
        del config["approximate_gelu"]
        return config


@_register
class _WrongShape(layers.ClassToken):
    def compute_output_shape(self, input_shape):
        return tuple(input_shape)


@_register
class _LosesPolicy(layers.MlpBlock):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout")  # float32


@_register
class _WeightInCall(layers.ClassToken):
    def build(self, input_shape):
        pass

    def call(self, tokens):
        if not hasattr(self, "cls"):
            self.cls = self.add_weight(name="cls", shape=(1, 1, tokens.shape[-1]))
        return super().call(tokens)


class _Unregistered(layers.ClassToken):
    pass


@_register
class _TrainsByDefault(layers.MlpBlock):
    def call(self, x, training=True):
        return super().call(x, training=training)


@_register
class _NotSaved(layers.ClassToken):
    def save_own_variables(self, store):
        pass

    def load_own_variables(self, store):
        pass


_TOKEN = dict(input_shape=(2, 6, 8), expected_output_shape=TOKENS, expected_num_trainable_weights=1)
_MLP = dict(input_shape=TOKENS, expected_output_shape=TOKENS, expected_num_trainable_weights=4)


def _broken(layer_cls, init_kwargs, checks, match, error=AssertionError):
    return pytest.param(layer_cls, init_kwargs, checks, error, match, id=layer_cls.__name__[1:])


@pytest.mark.parametrize(
    "layer_cls,init_kwargs,checks,error,match",
    [
        _broken(_ForgetsArgument, dict(mlp_dim=4, approximate_gelu=False), _MLP, "lacks"),
        _broken(_WrongShape, {}, _TOKEN, "symbolic call gives"),
        _broken(_LosesPolicy, dict(mlp_dim=4), _MLP, "output dtypes .*expected bfloat16"),
        _broken(_WeightInCall, {}, _TOKEN, "after build"),
        _broken(_Unregistered, {}, _TOKEN, "Could not locate class '_Unregistered'", TypeError),
        _broken(
            _TrainsByDefault,
            dict(mlp_dim=4, dropout_rate=0.5),
            {**_MLP, "expected_num_seed_generators": 1},
            "from_config: output 0",
        ),
        _broken(_NotSaved, {}, _TOKEN, ".keras: output 0"),
    ],
)
def test_check_layer_catches(layer_cls, init_kwargs, checks, error, match):
    with pytest.raises(error, match=match):
        check_layer(layer_cls, init_kwargs, **checks)


# -- Every registered layer has an entry, under both backends ---------------------------


def _registered_layers():
    """Every Layer class (not Model) registered under the package 'keras_vit', with every
    module of keras_vit imported; and the Layer classes of keras_vit.layers that are not
    registered."""
    for module_info in pkgutil.walk_packages(keras_vit.__path__, "keras_vit."):
        importlib.import_module(module_info.name)
    unregistered = [
        f"{obj.__module__}.{obj.__name__}"
        for name, module in sys.modules.items()
        if name.startswith("keras_vit.layers.")
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, keras.layers.Layer)
        and obj.__module__ == name
        and keras.saving.get_registered_object(f"keras_vit>{obj.__name__}") is not obj
    ]
    registered = {
        obj
        for key, obj in keras.saving.get_custom_objects().items()
        if key.startswith("keras_vit>")
        and isinstance(obj, type)
        and issubclass(obj, keras.layers.Layer)
        and not issubclass(obj, keras.Model)
    }
    return registered, unregistered


def test_every_registered_layer_has_an_entry():
    registered, unregistered = _registered_layers()
    assert not unregistered, f"layers of keras_vit.layers not registered: {unregistered}"
    assert {layers.Encoder, MaskedPatchHead} <= registered  # the scan sees both places
    covered = {param.values[0] for param in ENTRIES}
    missing = sorted(cls.__name__ for cls in registered - covered)
    assert not missing, f"registered layers without an entry in ENTRIES: {missing}"


_WORKER = """
import sys, traceback
import keras
assert keras.backend.backend() == {backend!r}, keras.backend.backend()
import test_layer_conformance as conformance
# Asked before the checks run: Keras' own .keras saving imports TensorFlow where installed.
if keras.backend.backend() == "jax":
    assert "tensorflow" not in sys.modules, "keras_vit or the checks import TensorFlow"
failures = []
for param in conformance.ENTRIES:
    try:
        conformance.check_layer(*param.values[:2], **param.values[2])
    except Exception:
        failures.append(param.id + ": " + traceback.format_exc())
print(len(conformance.ENTRIES) - len(failures), "of", len(conformance.ENTRIES), "passed")
sys.exit("\\n".join(failures) or None)
"""


def test_every_entry_passes_under_the_other_backend():
    """All entries in one subprocess (one interpreter start and backend import)."""
    other = next(b for b in BACKENDS if b != keras.backend.backend())
    env = {
        **os.environ,
        "KERAS_BACKEND": other,
        "JAX_PLATFORMS": "cpu",
        # JAX runs each eager op as its own XLA program: compiling ~500 of them is most of
        # the time, and LLVM's optimisations are most of that. The checks compare outputs
        # within one process, so they hold at any optimisation level (measured: 40% less).
        "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0",
        "PYTHONPATH": os.pathsep.join([HERE, ROOT, os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-c", _WORKER.format(backend=other)],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"under {other}:\n{result.stderr[-6000:]}"
    assert f"{len(ENTRIES)} of {len(ENTRIES)} passed" in result.stdout, result.stdout
