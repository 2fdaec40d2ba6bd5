"""The Vision Transformer (Dosovitskiy et al., ICLR 2021) as a Keras model.

This module owns the model: the class `VisionTransformer`, building its graph
(`_build`: patch embedding, [class] token, encoder, representation, pre_logits,
head; the headless `pooling` outputs), and its config (`get_config`,
`from_config`, the registered name 'keras_vit>VisionTransformer'). The rest of
the class comes from modules of their own: the constructor's arguments, each
declared once with its default, check, attribute, config record and docstring
entry, from `keras_vit.options` (the signature, the Args below, `get_config` and
`from_config` are made from them), keras.applications' folded in by
`keras_vit.applications_args`; the views that
share its weights (`feature_extractor`, `attention_model`, `token_grid`, ...)
from the mixin `keras_vit.views.ModelViews`; what `jit_compile="auto"` means from
the mixin `keras_vit.compilation.AutoJitCompile`.

Construction builds; loading is a separate step. `VisionTransformer.__init__`
(1) binds its arguments to the declared options (`options.bind`) and normalises them, keras.applications' (`input_shape`,
`input_tensor`, `classes`, ...) included (`applications_args.normalised`); (2)
fills the defaults of what nothing gave (`applications_args.with_defaults`); (3)
builds the graph with `_build`, which reads nothing but its arguments. It reads no file and no network, and neither
does `from_config`. Weights come after construction: `keras_vit.from_weights`
and the named builders (`ViT_B16(weights=...)`, `HybridViT`, `build_model`,
keras_vit.factory) open the checkpoint, build the model with what it records
(`given_arguments` says what the caller left open), then load it
(`keras_vit.checkpoint.loader`). This module imports neither: imports go
factory -> vision_transformer, factory -> checkpoint. That is why the entry point
is the function `keras_vit.from_weights` rather than a classmethod here, and why
`weights` is refused rather than loaded (it keeps its place among the positional
arguments, so that `name`, `dtype`, ... keep theirs).
"""

import types

import keras

from keras_vit import applications_args, options
from keras_vit import layers as vit_layers
from keras_vit.compilation import AutoJitCompile
from keras_vit.layers.patch_embedding import PatchTokenMap
from keras_vit.layers.resnet import resnet_layers
from keras_vit.options import NOT_GIVEN, has_class_token
from keras_vit.views import ModelViews, embed, on_grid, token_grid_of


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformer(AutoJitCompile, ModelViews, keras.Model):
    """ViT: patch embedding, [class] token, position embeddings, Transformer
    encoder, then the representation (class token or GAP), optional pre_logits
    (Dense + tanh) and the classification head.

    Hybrids (paper §3.1) put a ResNet ('root' stem, stages 'block1'..) before the
    patch embedding, which then cuts the feature map into patches (1x1 for the
    published hybrids).

    Input: images (batch, height, width, channels), channels last, scaled to
    [-1, 1] (`keras_vit.preprocess_input`). Output: logits (batch, num_classes)
    (probabilities with `classifier_activation='softmax'`), or with
    `include_top=False` the representation (batch, representation_size or
    hidden_size), or what `pooling` asks for.

    Args: one entry per argument, from its declaration (`keras_vit.options.OPTIONS`).

    Attributes: the arguments as given or resolved (`image_size`, `channels`,
    `patch_size`, ...), `grid_size` (the (rows, cols) of the position
    embeddings) and `dynamic_size` (whether the input height and width are None:
    any resolution). Exports (SavedModel, TFLite, ONNX) need a fixed size.

    Raises:
        TypeError: an unknown keyword argument (named in the message), or
            `weights` (see above).
        ValueError: contradictory or invalid arguments (both values named).
    """

    def __init__(self, *args, **kwargs):
        arguments = options.bind(args, kwargs)
        applications_args.refuse_weights(arguments.pop("weights"))
        a = applications_args.with_defaults(applications_args.normalised(arguments))
        self._build(**a)
        for attribute, value in options.stored_attributes(a).items():
            setattr(self, attribute, value)

    # What `inspect.signature` (help(), IDEs' call hints, the trainers' checks) shows:
    # every option, from its declaration.
    __init__.__signature__ = options.SIGNATURE

    @classmethod
    def given_arguments(cls, **kwargs):
        """The arguments `cls(**kwargs)` builds from, before defaults fill what
        nothing gave: what a checkpoint may still fill (`keras_vit.from_weights`).

        Returns:
            dict of every constructor argument but `weights`, `input_shape` and
            `classes`, which are folded into image_size, channels, num_classes
            and `dynamic_size`; the declared defaults where not given (None for
            image_size, channels, classifier, num_classes and the family options
            `keras_vit.families` when nothing says them; `NOT_GIVEN` for
            representation_size and pooling); `resnet` normalised.
        Raises:
            TypeError: an unknown keyword argument (named).
            ValueError: contradictory or invalid arguments, as the constructor.
        """
        return applications_args.bound_arguments(kwargs)

    def _build(self, **arguments):
        """Builds the graph from complete arguments (every option, checked, and
        `dynamic_size`); reads no file."""
        a = types.SimpleNamespace(**arguments)
        dtype = a.dtype
        patch_embedding = vit_layers.PatchEmbedding(
            a.patch_size,
            a.hidden_size,
            name="embedding",
            dtype=dtype,
            **({} if a.patch_embedding_bias else {"use_bias": False}),
            **({"norm_epsilon": a.layer_norm_epsilon} if a.patch_embedding_norm else {}),
        )
        if a.input_tensor is None:
            size = (None, None) if a.dynamic_size else a.image_size
            images = inputs = keras.Input((*size, a.channels), name="image")
        else:
            images = a.input_tensor
            inputs = keras.utils.get_source_inputs(a.input_tensor)
            inputs = inputs[0] if len(inputs) == 1 else inputs
        resnet_stages = resnet_layers(a.resnet, dtype) if a.resnet is not None else []
        grid_size = token_grid_of(resnet_stages, patch_embedding, a.image_size)
        class_token = (
            vit_layers.ClassToken(name="cls", dtype=dtype)
            if has_class_token(a.classifier)
            else None
        )
        _, x, patch_map = embed(images, resnet_stages, patch_embedding, class_token, a.dynamic_size)
        encoder = vit_layers.Encoder(
            grid_size,
            a.num_layers,
            a.num_heads,
            a.mlp_dim,
            num_prefix_tokens=1 if has_class_token(a.classifier) else 0,
            dropout_rate=a.dropout_rate,
            attention_dropout_rate=a.attention_dropout_rate,
            stochastic_depth_rate=a.stochastic_depth_rate,
            layer_norm_epsilon=a.layer_norm_epsilon,
            approximate_gelu=a.approximate_gelu,
            final_norm=a.final_norm and not a.fc_norm,
            name="Transformer",
            dtype=dtype,
            **_encoder_options(a, ENCODER_OPTIONS),
        )
        x = encoder(on_grid(x, patch_map))
        prefix = encoder.num_output_prefix_tokens
        after_pooling = (
            keras.layers.LayerNormalization(
                epsilon=a.layer_norm_epsilon, name="fc_norm", dtype=dtype
            )
            if a.fc_norm
            else None
        )
        if a.include_top or a.pooling is NOT_GIVEN:
            if a.classifier == "map":
                x = vit_layers.MultiHeadAttentionPooling(
                    a.num_heads,
                    a.mlp_dim,
                    layer_norm_epsilon=a.layer_norm_epsilon,
                    approximate_gelu=a.approximate_gelu,
                    quick_gelu=a.quick_gelu,
                    name="MAPHead_0",
                    dtype=dtype,
                )(x)
            else:
                if a.classifier != "token" and prefix:  # the mean of the patch tokens alone
                    x = keras.layers.Cropping1D((prefix, 0), name="patch_tokens", dtype=dtype)(x)
                pool = "token" if a.classifier == "token" else "gap"
                x = vit_layers.TokenPooling(pool, name="pool", dtype=dtype)(x)
            if after_pooling is not None:
                x = after_pooling(x)
            if a.representation_size:
                x = keras.layers.Dense(
                    a.representation_size,
                    activation="tanh",
                    kernel_initializer="lecun_normal",
                    name="pre_logits",
                    dtype=dtype,
                )(x)
        else:
            x = _pooled(x, a.pooling, prefix, grid_size, patch_map, dtype)
            if after_pooling is not None and a.pooling is not None:
                x = after_pooling(x)
        if a.include_top:  # logits (and their activation) in float32 under mixed precision
            x = keras.layers.Dense(
                a.num_classes,
                kernel_initializer="zeros",
                name="head",
                dtype=_float32_outputs(dtype),
            )(x)
            if a.classifier_activation is not None:
                x = keras.layers.Activation(
                    a.classifier_activation, name="predictions", dtype=_float32_outputs(dtype)
                )(x)
        super().__init__(inputs=inputs, outputs=x, name=a.name, trainable=a.trainable)

        # The options' attributes are stored by __init__ (`options.stored_attributes`).
        self.grid_size = grid_size
        self.dynamic_size = bool(a.dynamic_size)
        self.num_prefix_tokens = prefix
        # Layers before `input_tensor` are part of this model but not of its config.
        self._upstream_of_input = a.input_tensor is not None and inputs is not a.input_tensor

    # -- Serialisation ------------------------------------------------------------

    def get_config(self):
        if self._upstream_of_input:
            raise NotImplementedError(
                f"{self.name} was built on an input_tensor with layers before it, which "
                "its config cannot describe. Build the model on a keras.Input of the same "
                "shape and wrap both: keras.Model(inputs, vit(preprocessed))."
            )
        # Each option as `keras_vit.options` declares (the newer family options and
        # the optional ones only where they differ from the official value).
        return options.to_config(self)

    @classmethod
    def from_config(cls, config):
        """The model of `config` (`get_config`), built without weights: no file
        or network access."""
        return cls(**options.from_config(config))


VisionTransformer.__doc__ = VisionTransformer.__doc__.replace(
    "    Args: one entry per argument, from its declaration (`keras_vit.options.OPTIONS`).",
    options.describe(),
)

# The family options the Encoder takes (given to it only where they differ from the
# authors' model, so that its config is as before they existed).
ENCODER_OPTIONS = (
    "num_registers",
    "position_embedding_for_class_token",
    "pre_norm",
    "layer_scale_init",
    "quick_gelu",
    "absolute_position_embedding",
    "rope",
    "qk_norm",
    "gated_mlp",
    "mlp_norm",
)


def _encoder_options(a, names):
    """The Encoder's arguments for the family options `names` that differ from the
    authors' model (none for it: its Encoder config is as before they existed)."""
    return {
        name: getattr(a, name)
        for name in names
        if options.differs(options.BY_NAME[name], getattr(a, name))
    }


def _pooled(tokens, pooling, prefix, grid_size, patch_map, dtype):
    """The headless output `pooling` asks for, from the encoder's output, whose
    first `prefix` tokens (class token, registers) are not patches."""
    if pooling == "token":
        return vit_layers.TokenPooling("token", name="pool", dtype=dtype)(tokens)
    if pooling is None:
        to_map = PatchTokenMap(
            grid_size if patch_map is None else None, prefix, name="feature_map", dtype=dtype
        )
        return to_map(on_grid(tokens, patch_map))
    patches = tokens
    if prefix:  # the class token and the registers are not patches
        patches = keras.layers.Cropping1D((prefix, 0), name="patch_tokens", dtype=dtype)(tokens)
    if pooling == "avg":
        return vit_layers.TokenPooling("gap", name="pool", dtype=dtype)(patches)
    return keras.layers.GlobalMaxPooling1D(name="pool", dtype=dtype)(patches)


def _float32_outputs(dtype):
    """The head's policy: `dtype`, but computing in float32 where `dtype` is mixed."""
    policy = keras.dtype_policies.get(dtype) if dtype is not None else keras.config.dtype_policy()
    return "float32" if policy.compute_dtype != "float32" else dtype
