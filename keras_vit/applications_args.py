"""`VisionTransformer`'s arguments, from what the caller gives to what `_build` needs.

This module owns the constructor's argument handling: keras.applications' arguments
(`input_shape`, `input_tensor`, `classes`, the refused `weights`) folded into the
model's own (`normalised`), the arguments as given before any default
(`bound_arguments`, behind `VisionTransformer.given_arguments`), and the defaults
and checks of what nothing gave (`with_defaults`). It builds no layer and reads no
file; `keras_vit.vision_transformer` imports it, never the other way.

`representation_size` and `pooling` default to `NOT_GIVEN` rather than None
because None is one of their values (no pre_logits; the patch-token map); "not
given" lets the checkpoint (representation_size) or the model's own
representation (pooling) decide. The marker never reaches a config.
"""

import inspect
import numbers

import keras

from keras_vit.families import BOOLEAN_OPTIONS, FAMILY_DEFAULTS
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
# The classifiers whose model has a class token.
CLASS_TOKEN_CLASSIFIERS = ("token", "token_gap")


def has_class_token(classifier):
    """Whether a model of `classifier` (one of CLASSIFIERS) has a class token."""
    return classifier in CLASS_TOKEN_CLASSIFIERS


def refuse_weights(weights):
    """keras.applications' `weights`: construction reads no weights, so anything
    but None is a TypeError naming the ways that do load them."""
    if weights is not None:
        raise TypeError(
            "VisionTransformer(weights=...) does not load weights: build and load with "
            "keras_vit.from_weights(weights, **arguments), or a builder such as "
            "keras_vit.ViT_B16(weights=...) or keras_vit.build_model(spec, weights=...)."
        )


def bound_arguments(init, kwargs):
    """`init`'s arguments (the constructor of a `VisionTransformer` class) for
    `kwargs`, declared defaults filled, `normalised`: what
    `VisionTransformer.given_arguments` returns."""
    bound = inspect.signature(init).bind(None, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    del arguments["self"], arguments["weights"]
    return normalised(arguments)


def input_arguments(image_size, channels, input_shape, input_tensor):
    """image_size, channels (None where none of the arguments says) and
    dynamic_size (height and width None) from keras.applications' input_shape /
    input_tensor."""
    if input_tensor is not None:
        if not keras.backend.is_keras_tensor(input_tensor):
            raise ValueError(
                "input_tensor must be a Keras tensor (keras.Input or a layer's "
                f"output), got {type(input_tensor).__name__}."
            )
        if len(input_tensor.shape) != 4:
            raise ValueError(
                "input_tensor must be images (batch, height, width, channels), "
                f"got shape {tuple(input_tensor.shape)}."
            )
        tensor_shape = tuple(input_tensor.shape[1:])
        if input_shape is not None and tuple(input_shape) != tensor_shape:
            raise ValueError(
                f"input_shape={tuple(input_shape)} disagrees with the shape "
                f"{tensor_shape} of input_tensor."
            )
        input_shape = tensor_shape
    if input_shape is None:
        return {"image_size": image_size, "channels": channels, "dynamic_size": False}
    input_shape = tuple(input_shape)
    if len(input_shape) != 3:
        raise ValueError(f"input_shape must be (height, width, channels), got {input_shape}.")
    height, width, depth = input_shape
    if (height is None) != (width is None):
        raise ValueError(
            f"input_shape={input_shape}: give both height and width (a fixed "
            "resolution) or neither (None, None: any resolution at call time)."
        )
    if depth is None or int(depth) < 1:
        raise ValueError(f"input_shape={input_shape}: the number of channels must be given.")
    if channels is not None and int(channels) != int(depth):
        raise ValueError(f"channels={channels!r} disagrees with input_shape={input_shape}.")
    if height is None:  # any resolution; image_size is the position embeddings'
        return {"image_size": image_size, "channels": int(depth), "dynamic_size": True}
    size = (int(height), int(width))
    if image_size is not None and to_pair(image_size, "image_size") != size:
        raise ValueError(
            f"image_size={image_size!r} disagrees with input_shape="
            f"{input_shape} (height, width {size})."
        )
    return {"image_size": size, "channels": int(depth), "dynamic_size": False}


def normalised(arguments):
    """The constructor's arguments (a dict) with keras.applications' folded in:
    `input_shape` / `input_tensor` into image_size, channels and dynamic_size
    (`input_arguments`), `classes` into num_classes; `resnet` normalised."""
    a = dict(arguments)
    input_shape, classes = a.pop("input_shape"), a.pop("classes")
    a["resnet"] = resnet_spec(a["resnet"])
    a.update(input_arguments(a["image_size"], a["channels"], input_shape, a["input_tensor"]))
    a["num_classes"] = aliased("num_classes", a["num_classes"], "classes", classes)
    return a


def aliased(name, value, alias, alias_value):
    """`value`, or `alias_value` where only that is given; both: they must agree."""
    if value is not None and alias_value is not None and value != alias_value:
        raise ValueError(
            f"{name}={value!r} and {alias}={alias_value!r} disagree "
            f"({alias} is an alias of {name})."
        )
    return value if value is not None else alias_value


def with_defaults(arguments):
    """Complete arguments for `VisionTransformer._build`: defaults where nothing
    (not even a checkpoint) gave a value, checked."""
    a = dict(arguments)
    a["image_size"] = to_pair(a["image_size"] or 224, "image_size")
    a["channels"] = int(a["channels"] or 3)
    a["classifier"] = a["classifier"] or "token"
    if a["representation_size"] is NOT_GIVEN:
        a["representation_size"] = None
    if a["num_classes"] is None:
        a["num_classes"] = 1000
    for key, default in FAMILY_DEFAULTS.items():
        if a[key] is None:
            a[key] = default
        elif key in BOOLEAN_OPTIONS and not isinstance(a[key], bool):
            raise ValueError(f"{key} must be True or False, got {a[key]!r}.")
    a["rope"] = rope_spec(a["rope"])
    scale = a["layer_scale_init"]
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not scale > 0
    ):
        raise ValueError(f"layer_scale_init must be a positive number or None, got {scale!r}.")
    registers = a["num_registers"]
    if isinstance(registers, bool) or not isinstance(registers, numbers.Integral) or registers < 0:
        raise ValueError(f"num_registers must be an int >= 0, got {registers!r}.")
    a["preprocessing"] = check_preprocessing(a["preprocessing"], a["channels"])
    epsilon = a["layer_norm_epsilon"]
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not epsilon > 0:
        raise ValueError(f"layer_norm_epsilon must be a positive number, got {epsilon!r}.")
    num_classes = a["num_classes"]
    if not isinstance(num_classes, numbers.Integral) or isinstance(num_classes, bool):
        raise ValueError(f"num_classes (or classes) must be an int, got {num_classes!r}.")
    if num_classes < 1:
        raise ValueError(f"num_classes (or classes) must be at least 1, got {num_classes}.")
    if a["classifier"] not in CLASSIFIERS:
        raise ValueError(f"classifier must be one of {CLASSIFIERS}, got {a['classifier']!r}.")
    pooling = a["pooling"]
    if pooling is not NOT_GIVEN and pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS} (or not given), got {pooling!r}.")
    if pooling == "token" and not has_class_token(a["classifier"]) and not a["include_top"]:
        raise ValueError(
            "pooling='token': this model has no class token (classifier="
            f"{a['classifier']!r}); use 'avg', 'max' or None."
        )
    if a["classifier_activation"] is not None:
        keras.activations.get(a["classifier_activation"])  # unknown names raise here
    return a
