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

import keras

from keras_vit import options
from keras_vit.layers.patch_embedding import to_pair

# Re-exported: the modules that read these took them from here before `options` existed.
from keras_vit.options import CLASSIFIERS as CLASSIFIERS
from keras_vit.options import NOT_GIVEN as NOT_GIVEN
from keras_vit.options import POOLINGS as POOLINGS
from keras_vit.options import has_class_token as has_class_token


def refuse_weights(weights):
    """keras.applications' `weights`: construction reads no weights, so anything
    but None is a TypeError naming the ways that do load them."""
    if weights is not None:
        raise TypeError(
            "VisionTransformer(weights=...) does not load weights: build and load with "
            "keras_vit.from_weights(weights, **arguments), or a builder such as "
            "keras_vit.ViT_B16(weights=...) or keras_vit.build_model(spec, weights=...)."
        )


def bound_arguments(kwargs):
    """The constructor's arguments for `kwargs`, declared defaults filled,
    `normalised`: what `VisionTransformer.given_arguments` returns."""
    arguments = options.bind((), kwargs)
    del arguments["weights"]
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
    (`input_arguments`), `classes` into num_classes; each option's `normalise`
    (`resnet`)."""
    a = dict(arguments)
    for option in options.OPTIONS:
        if option.normalise is not None:
            a[option.name] = option.normalise(a[option.name])
    input_shape, classes = a.pop("input_shape"), a.pop("classes")
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
    """Complete arguments for `VisionTransformer._build`: each option's official
    value where nothing (not even a checkpoint) gave one, checked
    (`keras_vit.options.fill`)."""
    return options.fill(arguments)
