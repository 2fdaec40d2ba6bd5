"""`VisionTransformer`'s arguments, each declared once.

Each argument is one `Option` in `OPTIONS`: its name and default (the constructor's
signature, `SIGNATURE`), the value that fills it where neither the caller nor a
checkpoint gave one (`official`), its check (the one-line ValueError of a bad
value), the type of the model's attribute, how the model's config records it
(`record`, `to_config`, `from_config`), whether a checkpoint's metadata fills it
(`family`: `keras_vit.families`), and its docstring entry (`describe`, which
writes the constructor's Args). An option is added here, then used in
`VisionTransformer._build`.

This module builds no layer and reads no file. `keras_vit.applications_args` folds
keras.applications' arguments (`input_shape`, `input_tensor`, `classes`) into the
model's own and runs the fills and checks; `keras_vit.vision_transformer` stores
the attributes and writes the config from these declarations.
"""

import dataclasses
import inspect
import numbers
import textwrap
from typing import Any, Callable, Optional

import keras

from keras_vit.layers.encoder_block import LAYER_NORM_EPSILON
from keras_vit.layers.patch_embedding import to_pair
from keras_vit.layers.resnet import resnet_spec
from keras_vit.layers.rotary import rope_spec
from keras_vit.preprocessing import check_preprocessing


class _NotGiven:
    """The default of an argument whose None is a value of its own (e.g.
    `representation_size=None`: no pre_logits layer), so that "not given" (follow
    the checkpoint, or the model's own default) can be told apart from None."""

    __slots__ = ()

    def __repr__(self):
        return "<not given>"

    def __reduce__(self):  # copies and pickles stay the singleton
        return "NOT_GIVEN"


NOT_GIVEN = _NotGiven()

POOLINGS = (None, "token", "avg", "max")
# 'token': the class token; 'gap': no class token, the mean of the patch tokens;
# 'map': no class token, multi-head attention pooling (big_vision's MAPHead, SigLIP);
# 'token_gap': a class token, left out of the mean of the patch tokens (timm's
# class_token=True with global_pool='avg': the MAE and BEiT fine-tunes).
CLASSIFIERS = ("token", "gap", "map", "token_gap")

# How a model config records an option (`Option.record`).
ALWAYS = "always"  # every config has the key
WHERE_SET = "where set"  # only where the value is not `official` (absent: official)
NEVER = "never"  # folded into other options (keras.applications'), or refused

# The sections of the constructor's docstring (`Option.section`).
MODEL = "Args"
FAMILY = (
    "Where the families of published ViTs compute differently, an option says\n"
    "which (keyword only; None: the checkpoint's, else the official model's)"
)
APPLICATIONS = "keras.applications' arguments (keyword only), with its meanings"


@dataclasses.dataclass(frozen=True)
class Option:
    """One argument of `VisionTransformer`.

    Fields:
        name: the argument, the model's attribute (unless `attribute`) and its
            config key.
        default: the signature's default.
        doc: its docstring entry (`describe`).
        section: MODEL (positional, in `OPTIONS`' order), FAMILY or
            APPLICATIONS (keyword only).
        official: what the value becomes where it is still `default` (None or
            NOT_GIVEN) once a checkpoint had its say (`fill`); family options'
            official (authors') values are `keras_vit.families.FAMILY_DEFAULTS`.
        normalise: value -> value, applied to what the caller gave, before a
            checkpoint fills anything (`VisionTransformer.given_arguments`).
        check: (name, value, arguments) -> value, the filled value checked (one
            ValueError naming the argument) and normalised for `_build`;
            `arguments` are the others, filled.
        kind: the attribute's type (int, float, bool, ...), None: as checked.
        attribute: the model's attribute ('' : `name`; None: none is stored,
            or Keras stores it: `name`, `trainable`).
        record: how `get_config` records it: ALWAYS, WHERE_SET (absent where
            `official`), NEVER, or a function model -> value (None: absent).
        to_config, from_config: the config's form of the attribute and back.
        family: a checkpoint's metadata fills it where the caller did not
            (`keras_vit.families`).
    """

    name: str
    default: Any = None
    doc: str = ""
    section: str = FAMILY
    official: Any = None
    normalise: Optional[Callable] = None
    check: Optional[Callable] = None
    kind: Optional[Callable] = None
    attribute: Optional[str] = ""
    record: Any = ALWAYS
    to_config: Optional[Callable] = None
    from_config: Optional[Callable] = None
    family: bool = False

    def attribute_name(self):
        return self.name if self.attribute == "" else self.attribute


# -- checks: (name, value, arguments) -> value -------------------------------------


def _boolean(name, value, arguments):
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}.")
    return value


def _positive_number(name, value, arguments):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}.")
    return value


def _positive_number_or_none(name, value, arguments):
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0
    ):
        raise ValueError(f"{name} must be a positive number or None, got {value!r}.")
    return value


def _final_norm(name, value, arguments):
    _boolean(name, value, arguments)
    if not value and arguments["fc_norm"]:
        raise ValueError(
            "final_norm=False and fc_norm=True disagree: fc_norm moves the final "
            "LayerNorm after pooling, final_norm=False removes it."
        )
    return value


def _count(name, value, arguments):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}.")
    return value


def _pair(name, value, arguments):
    return to_pair(value, name)


def _rope(name, value, arguments):
    return rope_spec(value)


def _preprocessing(name, value, arguments):
    return check_preprocessing(value, arguments["channels"])


def _num_classes(name, value, arguments):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ValueError(f"num_classes (or classes) must be an int, got {value!r}.")
    if value < 1:
        raise ValueError(f"num_classes (or classes) must be at least 1, got {value}.")
    return value


def _one_of(values, suffix=""):
    def check(name, value, arguments):
        if value not in values:
            raise ValueError(f"{name} must be one of {values}{suffix}, got {value!r}.")
        return value

    return check


def _pooling(name, value, arguments):
    if value is NOT_GIVEN:
        return value
    _one_of(POOLINGS, " (or not given)")(name, value, arguments)
    if value == "token" and not has_class_token(arguments["classifier"]):
        if not arguments["include_top"]:
            raise ValueError(
                "pooling='token': this model has no class token (classifier="
                f"{arguments['classifier']!r}); use 'avg', 'max' or None."
            )
    return value


def _activation(name, value, arguments):
    if value is not None:
        keras.activations.get(value)  # unknown names raise here
    return value


def has_class_token(classifier):
    """Whether a model of `classifier` (one of CLASSIFIERS) has a class token."""
    return classifier in ("token", "token_gap")


# -- the config's forms -------------------------------------------------------------


def _tuple_of_list(value):
    return tuple(value) if isinstance(value, list) else value


def _activation_to_config(activation):
    if activation is None or isinstance(activation, str):
        return activation
    return keras.activations.serialize(activation)


def _activation_from_config(value):
    return keras.activations.deserialize(value) if isinstance(value, dict) else value


def _dtype_to_config(dtype):
    return keras.dtype_policies.serialize(keras.dtype_policies.get(dtype))


def _dtype_from_config(value):
    return keras.dtype_policies.deserialize(value) if isinstance(value, dict) else value


def _resnet_to_config(resnet):
    return {"num_layers": list(resnet["num_layers"]), "width_factor": resnet["width_factor"]}


def _input_shape_recorded(model):
    """A model of any resolution records (None, None, channels); others nothing."""
    return [None, None, model.channels] if model.dynamic_size else None


def _optional_int(value):
    return int(value) if value else None


def _optional_float(value):
    return None if value is None else float(value)


def _flag(name, official, doc, record=WHERE_SET):
    """A family option that is True or False."""
    return Option(
        name, None, doc, FAMILY, official, check=_boolean, kind=bool, record=record, family=True
    )


OPTIONS = (
    # -- the model (positional, keras.applications' order kept) -------------------
    Option(
        "image_size",
        None,
        "int or (height, width), multiples of the patch size: the resolution of the "
        "input and of the position embeddings (for a model of any resolution, "
        "`input_shape=(None, None, C)`, that of its position embeddings alone). None: "
        "`input_shape`'s, else (built by `keras_vit.from_weights`) the checkpoint's "
        "resolution, else 224.",
        MODEL,
        224,
        check=_pair,
        from_config=_tuple_of_list,
    ),
    Option(
        "patch_size",
        16,
        "patch side P, or (height, width) (on the ResNet feature map for hybrids).",
        MODEL,
        kind=to_pair,
        from_config=_tuple_of_list,
    ),
    Option("hidden_size", 768, "the Transformer's width D.", MODEL, kind=int),
    Option("mlp_dim", 3072, "the width of each block's MLP.", MODEL, kind=int),
    Option("num_heads", 12, "attention heads per block.", MODEL, kind=int),
    Option("num_layers", 12, "Transformer blocks.", MODEL, kind=int),
    Option(
        "classifier",
        None,
        "the architecture: 'token' (class token), 'gap' (no class token, global "
        "average pooling), 'map' (no class token, multi-head attention pooling: "
        "big_vision's MAPHead, SigLIP's vision tower; "
        "`keras_vit.layers.MultiHeadAttentionPooling`, weights 'MAPHead_0/...') or "
        "'token_gap' (a class token, which the average pooling leaves out with any "
        "registers: timm's class_token=True with global_pool='avg', the MAE and BEiT "
        "fine-tunes). None: what the checkpoint has, else 'token'.",
        MODEL,
        "token",
        check=_one_of(CLASSIFIERS),
    ),
    Option(
        "representation_size",
        NOT_GIVEN,
        "width of the pre_logits layer (Dense + tanh), or None for none. Not given: "
        "follow the checkpoint (none without one).",
        MODEL,
        None,
        kind=_optional_int,
    ),
    Option(
        "num_classes",
        None,
        "head width. None: `classes`, else the checkpoint's, else 1000. A number that "
        "differs from the checkpoint's gives a fresh zero-initialised head.",
        MODEL,
        1000,
        check=_num_classes,
        kind=int,
    ),
    Option(
        "include_top",
        True,
        "whether to add pre_logits and the head (with `include_top=False` and "
        "`pooling` not given, pre_logits stays: the output is what feeds the head).",
        MODEL,
        kind=bool,
    ),
    Option(
        "dropout_rate",
        0.0,
        "dropout after the position embeddings, the attention output and in the MLPs; training only.",
        MODEL,
        kind=float,
    ),
    Option(
        "attention_dropout_rate",
        0.0,
        "dropout of the attention weights; training only.",
        MODEL,
        kind=float,
    ),
    Option(
        "weights",
        None,
        "must be None: construction reads no weights. Build and load with "
        "`keras_vit.from_weights(weights, **arguments)` or a named builder "
        "(`keras_vit.ViT_B16(weights=...)`, `keras_vit.build_model`); where this text "
        'says "the checkpoint\'s", it is what they fill in.',
        MODEL,
        attribute=None,
        record=NEVER,
    ),
    Option("name", "vit", "the model's name.", MODEL, attribute=None),
    Option(
        "dtype",
        None,
        "a dtype policy for every layer (e.g. 'mixed_bfloat16'); the head and "
        "`classifier_activation` compute in float32.",
        MODEL,
        attribute="_dtype_arg",
        record=WHERE_SET,
        to_config=_dtype_to_config,
        from_config=_dtype_from_config,
    ),
    Option(
        "resnet",
        None,
        "None for a plain ViT; for a hybrid the ResNet's units per stage, e.g. "
        "(3, 4, 9) (`()`: stem only), or the official config's mapping "
        "{'num_layers': (3, 4, 9), 'width_factor': 1}. The effective patch is "
        "patch_size * the ResNet's stride (4 for the stem, x2 per further stage); any "
        "image size whose feature map is a multiple of patch_size works.",
        MODEL,
        normalise=resnet_spec,
        record=WHERE_SET,
        to_config=_resnet_to_config,
    ),
    Option(
        "stochastic_depth_rate",
        0.0,
        "stochastic depth of the last encoder block, rising linearly from 0 at the "
        "first (AugReg, DeiT); training only.",
        MODEL,
        kind=float,
    ),
    # -- where the families compute differently (keyword only) ---------------------
    _flag(
        "approximate_gelu",
        True,
        "the MLPs' GELU: the tanh form (True, the authors' code) or the exact erf form "
        "(False: timm's, transformers').",
        record=ALWAYS,
    ),
    Option(
        "layer_norm_epsilon",
        None,
        "every LayerNorm's epsilon: 1e-6 (the authors', timm's), transformers' "
        "`layer_norm_eps` (1e-12 by default).",
        official=LAYER_NORM_EPSILON,
        check=_positive_number,
        kind=float,
        family=True,
    ),
    _flag(
        "fc_norm",
        False,
        "the final LayerNorm after pooling instead of before it (timm's `fc_norm`, its "
        "default for average-pooled models): the weights 'fc_norm' instead of "
        "'Transformer/encoder_norm'. Every pooled output (the representation, "
        "`pooling` 'token', 'avg', 'max') goes through it, the `pooling=None` map is "
        "the blocks' output, as timm's.",
        record=ALWAYS,
    ),
    Option(
        "layer_scale_init",
        None,
        "LayerScale (`keras_vit.layers.LayerScale`, CaiT; DeiT III, DINOv2): a "
        "per-channel scale on both residual branches of every block, initialised to "
        "this value. None: the checkpoint's, else none.",
        check=_positive_number_or_none,
        kind=_optional_float,
        record=WHERE_SET,
        family=True,
    ),
    Option(
        "num_registers",
        None,
        "register tokens (`keras_vit.layers.RegisterTokens`, Darcet et al. 2024; "
        "DINOv2 with registers) after the class token. They get no position embedding "
        "and are dropped from the feature maps and from 'token' and 'avg' pooling (the "
        "'map' head attends to every token, as timm's). None: the checkpoint's, else 0.",
        official=0,
        check=_count,
        kind=int,
        record=WHERE_SET,
        family=True,
    ),
    _flag(
        "position_embedding_for_class_token",
        True,
        "False: the position embeddings cover the patches alone, the class token gets "
        "none (DeiT III, timm's no_embed_class); True: the class token's row too (the "
        "authors', DINOv2). None: the checkpoint's, else True.",
    ),
    _flag(
        "pre_norm",
        False,
        "a LayerNorm before the first block (CLIP's ln_pre; weights "
        "'Transformer/encoder_prenorm'). None: the checkpoint's, else False.",
    ),
    _flag(
        "quick_gelu",
        False,
        "the MLPs' activation is OpenAI CLIP's x * sigmoid(1.702 x) instead of the "
        "GELU (`approximate_gelu` is then not read). None: the checkpoint's, else False.",
    ),
    _flag(
        "patch_embedding_bias",
        True,
        "whether the patch embedding has a bias (CLIP's has none). None: the "
        "checkpoint's, else True.",
    ),
    _flag(
        "absolute_position_embedding",
        True,
        "whether learned position embeddings are added (False: none; DINOv3 and "
        "RoPE-ViT place patches by `rope` alone). None: the checkpoint's, else True.",
    ),
    Option(
        "rope",
        None,
        "rotary position embeddings on the patch tokens' queries and keys in every "
        "block (`keras_vit.layers.RotaryPositionEmbedding`): None, a kind ('axial': "
        "EVA-02, RoPE-ViT-Axial; 'mixed': RoPE-ViT-Mixed, with learned frequencies; "
        "'dinov3') or a dict of its settings (`keras_vit.layers.rotary.rope_spec`: "
        "kind, temperature, grid_indexing, rotate_half, reference_grid). Computed from "
        "the grid of each input: no resizing step at another resolution. None: the "
        "checkpoint's, else none.",
        check=_rope,
        record=WHERE_SET,
        family=True,
    ),
    _flag(
        "qk_norm",
        False,
        "a LayerNorm on each head's queries and keys. None: the checkpoint's, else False.",
    ),
    _flag(
        "gated_mlp",
        False,
        "SwiGLU MLPs, SiLU(gate) * value with a gate and a value of `mlp_dim` each "
        "(EVA-02). None: the checkpoint's, else False.",
    ),
    _flag(
        "mlp_norm",
        False,
        "a LayerNorm inside each MLP before its second Dense (EVA-02's base and "
        "large). None: the checkpoint's, else False.",
    ),
    _flag(
        "patch_embedding_norm",
        False,
        "a LayerNorm on the patch embedding's output, before the class token and the "
        "position embeddings (timm's embed_norm_layer, weights 'patch_embed.norm'; "
        "keras_vit's 'embedding/norm'). None: the checkpoint's, else False.",
    ),
    Option(
        "final_norm",
        None,
        "False: no LayerNorm after the blocks, nor after pooling (timm's "
        "final_norm=False: its `norm` and `fc_norm` are identities); `fc_norm` must "
        "then be False. None: the checkpoint's, else True.",
        official=True,
        check=_final_norm,
        kind=bool,
        record=WHERE_SET,
        family=True,
    ),
    Option(
        "preprocessing",
        None,
        "the input normalisation the weights expect, recorded in the config for "
        "`keras_vit.preprocess_input(images, model.preprocessing)` and the exports "
        '(deploy/): None for the authors\' x / 127.5 - 1, or {"mean": [...], '
        '"std": [...]} per channel on the [0, 1] pixel scale (timm\'s '
        "`pretrained_cfg`, transformers' `preprocessor_config.json`): "
        "(x / 255 - mean) / std. The model's own input is the normalised images "
        "either way.",
        check=_preprocessing,
        record=WHERE_SET,
    ),
    # -- keras.applications' (keyword only) ------------------------------------------
    Option(
        "input_shape",
        None,
        "(height, width, channels): the resolution (as `image_size`; both given must "
        "agree) and the number of channels. (None, None, channels): a model of any "
        "resolution (`dynamic_size`): each batch may have another height and width "
        "(multiples of the patch size, or for a hybrid sizes whose ResNet feature map "
        "is a multiple of it), and the position embeddings, learned at `image_size`, "
        "are resized in the graph to the grid of each batch with the interpolation "
        "used when loading a checkpoint at another resolution "
        "(`PositionEmbedding.at_grid`), so the outputs are those of a model built at "
        "that size from the same weights. Height and width are both given or both "
        "None. Channels other than 3 give a patch embedding (a hybrid's stem) of that "
        "many input channels; RGB weights are adapted to it "
        "(`keras_vit.checkpoint.loader.adapt_input_channels`).",
        APPLICATIONS,
        attribute=None,
        record=_input_shape_recorded,
        from_config=_tuple_of_list,
    ),
    Option(
        "input_tensor",
        None,
        "a Keras tensor (batch, height, width, channels) to use as the model's input; "
        "the model's inputs are its source inputs (as keras.applications). Its shape "
        "sets `input_shape` (None height and width: any resolution).",
        APPLICATIONS,
        attribute=None,
        record=NEVER,
    ),
    Option(
        "pooling",
        NOT_GIVEN,
        "the headless output (`include_top=False`; ignored with the head, as in "
        "keras.applications). None: the patch-token map (batch, rows, cols, hidden) "
        "after the final LayerNorm, class token dropped; 'token': the class token's "
        "output (token models); 'avg' / 'max': the mean / max over the patch tokens "
        "(class token excluded; a 'gap' model's 'avg' is its own pooling). These "
        "outputs take no pre_logits. Not given: the model's own representation, "
        "pre_logits included. Unlike keras.applications, where pooling=None (the "
        "default) gives the last feature map, here the default gives the "
        "representation vector, as before this argument existed, and None must be "
        "passed for the map. (`model.pooling` is `NOT_GIVEN` then, and `get_config` "
        "has no 'pooling'.)",
        APPLICATIONS,
        NOT_GIVEN,
        check=_pooling,
        record=WHERE_SET,
    ),
    Option(
        "classes",
        None,
        "an alias of `num_classes` (both given must agree).",
        APPLICATIONS,
        attribute=None,
        record=NEVER,
    ),
    Option(
        "classifier_activation",
        None,
        "None (logits, the default) or a Keras activation ('softmax', ...) applied to "
        "the head's output in float32.",
        APPLICATIONS,
        check=_activation,
        to_config=_activation_to_config,
        from_config=_activation_from_config,
    ),
    Option(
        "channels",
        None,
        "the input channels (None: `input_shape`'s, the checkpoint's, else 3); what "
        "`get_config` records.",
        APPLICATIONS,
        3,
        kind=int,
    ),
    Option("trainable", True, "as for any Keras model.", APPLICATIONS, attribute=None),
)

BY_NAME = {option.name: option for option in OPTIONS}


def _signature():
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for option in OPTIONS:
        kind = (
            inspect.Parameter.POSITIONAL_OR_KEYWORD
            if option.section == MODEL
            else inspect.Parameter.KEYWORD_ONLY
        )
        parameters.append(inspect.Parameter(option.name, kind, default=option.default))
    return inspect.Signature(parameters)


# The constructor's signature, `inspect.signature(VisionTransformer)`'s source.
SIGNATURE = _signature()


def bind(args, kwargs, owner="VisionTransformer"):
    """Every option's value for a call `owner(*args, **kwargs)`, defaults filled.

    Raises:
        TypeError: an unknown keyword argument, or too many positional ones (named).
    """
    try:
        bound = SIGNATURE.bind(None, *args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{owner}(): {e}") from None
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    del arguments["self"]
    return arguments


def fill(arguments):
    """`arguments` with each option's `official` value where it is still the
    signature's None or NOT_GIVEN default, then checked (`Option.check`)."""
    a = dict(arguments)
    for option in OPTIONS:
        if option.name in a and option.default in (None, NOT_GIVEN):
            if a[option.name] is option.default or (
                option.default is None and a[option.name] is None
            ):
                a[option.name] = option.official
    for option in OPTIONS:
        if option.check is not None and option.name in a:
            a[option.name] = option.check(option.name, a[option.name], a)
    return a


def differs(option, value):
    """Whether `value` is not the option's official one."""
    return value is not option.official and value != option.official


def recorded(option, value):
    """Whether a config records `value` of `option` (ALWAYS or WHERE_SET)."""
    return option.record == ALWAYS or (option.record == WHERE_SET and differs(option, value))


def stored_attributes(arguments):
    """{attribute name: value}: what a model built from complete `arguments`
    stores (each option's `kind` applied)."""
    attributes = {}
    for option in OPTIONS:
        if option.attribute is None:
            continue
        value = arguments[option.name]
        attributes[option.attribute_name()] = value if option.kind is None else option.kind(value)
    return attributes


def to_config(model):
    """A model's config, each option recorded as `Option.record` says."""
    config = {}
    for option in OPTIONS:
        if option.record == NEVER:
            continue
        if callable(option.record):
            value = option.record(model)
            if value is None:
                continue
        else:
            value = getattr(model, option.attribute_name() or option.name)
            if not recorded(option, value):
                continue
        config[option.name] = value if option.to_config is None else option.to_config(value)
    return config


def from_config(config):
    """The constructor's keyword arguments for a config (`to_config`'s, or one an
    older keras_vit wrote: the same keys)."""
    arguments = dict(config)
    for option in OPTIONS:
        if option.from_config is not None and option.name in arguments:
            arguments[option.name] = option.from_config(arguments[option.name])
    return arguments


def describe(width=88, indent=4):
    """The Args sections of the constructor's docstring, from each option's `doc`."""
    sections = []
    for section in (MODEL, FAMILY, APPLICATIONS):
        lines = [f"{' ' * indent}{line}" for line in f"{section}:".splitlines()]
        for option in OPTIONS:
            if option.section == section:
                lines.append(
                    textwrap.fill(
                        f"{option.name}: {option.doc}",
                        width,
                        initial_indent=" " * (indent + 4),
                        subsequent_indent=" " * (indent + 8),
                        break_on_hyphens=False,
                        break_long_words=False,
                    )
                )
        sections.append("\n".join(lines))
    return "\n\n".join(sections)
