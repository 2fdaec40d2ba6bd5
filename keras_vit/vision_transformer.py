"""The Vision Transformer (Dosovitskiy et al., ICLR 2021) as a Keras model.

Construction builds; loading is a separate step. `VisionTransformer.__init__`
(1) normalises its arguments, keras.applications' (`input_shape`,
`input_tensor`, `classes`, ...) included (`_normalised`); (2) fills the defaults
of what nothing gave (`_defaults`); (3) builds the graph with `_build`, which
reads nothing but its arguments. It reads no file and no network, and neither
does `from_config`. Weights come after construction: `keras_vit.from_weights`
and the named builders (`ViT_B16(weights=...)`, `HybridViT`, `build_model`,
keras_vit.factory) open the checkpoint, build the model with what it records
(`given_arguments` says what the caller left open), then load it
(`keras_vit.checkpoint.loader`). This module imports neither: imports go
factory -> vision_transformer, factory -> checkpoint. That is why the entry point
is the function `keras_vit.from_weights` rather than a classmethod here, and why
`weights` is refused rather than loaded (it keeps its place among the positional
arguments, so that `name`, `dtype`, ... keep theirs).

`representation_size` and `pooling` default to `NOT_GIVEN` rather than None
because None is one of their values (no pre_logits; the patch-token map); "not
given" lets the checkpoint (representation_size) or the model's own
representation (pooling) decide. The marker never reaches a config.
"""

import inspect
import numbers
import weakref

import keras

from keras_vit import layers as vit_layers
from keras_vit.families import FAMILY_DEFAULTS
from keras_vit.layers.patch_embedding import PatchTokenMap, to_pair
from keras_vit.layers.resnet import resnet_layers, resnet_spec
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

# Attention models by ViT, outside Keras' attribute tracking (they share its layers).
_ATTENTION_MODELS = weakref.WeakKeyDictionary()
POOLINGS = (None, "token", "avg", "max")


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformer(keras.Model):
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

    Args:
        image_size: int or (height, width), multiples of the patch size: the
            resolution of the input and of the position embeddings (for a model of
            any resolution, `input_shape=(None, None, C)`, that of its position
            embeddings alone). None: `input_shape`'s, else (built by
            `keras_vit.from_weights`) the checkpoint's resolution, else 224.
        patch_size: patch side P (on the ResNet feature map for hybrids).
        hidden_size, mlp_dim, num_heads, num_layers: Transformer sizes.
        classifier: the architecture: 'token' (class token) or 'gap' (no class
            token, global average pooling). None: what the checkpoint has, else
            'token'.
        representation_size: width of the pre_logits layer (Dense + tanh), or
            None for none. Not given: follow the checkpoint (none without one).
        num_classes: head width. None: `classes`, else the checkpoint's, else
            1000. A number that differs from the checkpoint's gives a fresh
            zero-initialised head.
        include_top: whether to add pre_logits and the head (with
            `include_top=False` and `pooling` not given, pre_logits stays: the
            output is what feeds the head).
        dropout_rate, attention_dropout_rate: dropout rates.
        weights: must be None: construction reads no weights. Build and load
            with `keras_vit.from_weights(weights, **arguments)` or a named
            builder (`keras_vit.ViT_B16(weights=...)`, `keras_vit.build_model`);
            where this text says "the checkpoint's", it is what they fill in.
        name: the model's name.
        dtype: a dtype policy for every layer (e.g. 'mixed_bfloat16'); the head
            and `classifier_activation` compute in float32.
        resnet: None for a plain ViT; for a hybrid the ResNet's units per stage,
            e.g. (3, 4, 9) (`()`: stem only), or the official config's mapping
            {'num_layers': (3, 4, 9), 'width_factor': 1}. The effective patch is
            patch_size * the ResNet's stride (4 for the stem, x2 per further
            stage); any image size whose feature map is a multiple of
            patch_size works.
        stochastic_depth_rate: stochastic depth of the last encoder block, rising
            linearly from 0 at the first (AugReg, DeiT); training only.

    Where the families of published ViTs compute differently, an option says
    which (keyword only; None: the checkpoint's, else the official model's):
        approximate_gelu: the MLPs' GELU: the tanh form (True, the authors'
            code) or the exact erf form (False: timm's, transformers').
        layer_norm_epsilon: every LayerNorm's epsilon: 1e-6 (the authors',
            timm's), transformers' `layer_norm_eps` (1e-12 by default).
        fc_norm: the final LayerNorm after pooling instead of before it (timm's
            `fc_norm`, its default for average-pooled models): the weights
            'fc_norm' instead of 'Transformer/encoder_norm'. Every pooled output
            (the representation, `pooling` 'token', 'avg', 'max') goes through
            it, the `pooling=None` map is the blocks' output, as timm's.
        preprocessing: the input normalisation the weights expect, recorded in
            the config for `keras_vit.preprocess_input(images,
            model.preprocessing)` and the exports (deploy/): None for the
            authors' x / 127.5 - 1, or {"mean": [...], "std": [...]} per channel
            on the [0, 1] pixel scale (timm's `pretrained_cfg`, transformers'
            `preprocessor_config.json`): (x / 255 - mean) / std. The model's
            own input is the normalised images either way.

    keras.applications' arguments (keyword only), with its meanings:
        input_shape: (height, width, channels): the resolution (as
            `image_size`; both given must agree) and the number of channels.
            (None, None, channels): a model of any resolution (`dynamic_size`):
            each batch may have another height and width (multiples of the
            patch size, or for a hybrid sizes whose ResNet feature map is a
            multiple of it), and the position embeddings, learned at
            `image_size`, are resized in the graph to the grid of each batch
            with the interpolation used when loading a checkpoint at another
            resolution (`PositionEmbedding.at_grid`), so the outputs are those
            of a model built at that size from the same weights. Height and
            width are both given or both None. Channels other than 3 give a
            patch embedding (a hybrid's stem) of that many input channels; RGB
            weights are adapted to it
            (`keras_vit.checkpoint.loader.adapt_input_channels`).
        input_tensor: a Keras tensor (batch, height, width, channels) to use as
            the model's input; the model's inputs are its source inputs (as
            keras.applications). Its shape sets `input_shape` (None height and
            width: any resolution).
        pooling: the headless output (`include_top=False`; ignored with the
            head, as in keras.applications). None: the patch-token map (batch,
            rows, cols, hidden) after the final LayerNorm, class token dropped;
            'token': the class token's output (token models); 'avg' / 'max': the
            mean / max over the patch tokens (class token excluded; a 'gap'
            model's 'avg' is its own pooling). These outputs take no pre_logits.
            Not given: the model's own representation, pre_logits included.
            Unlike keras.applications, where pooling=None (the default) gives
            the last feature map, here the default gives the representation
            vector, as before this argument existed, and None must be passed
            for the map. (`model.pooling` is `NOT_GIVEN` then, and
            `get_config` has no 'pooling'.)
        classes: an alias of `num_classes` (both given must agree).
        classifier_activation: None (logits, the default) or a Keras activation
            ('softmax', ...) applied to the head's output in float32.
        channels: the input channels (None: `input_shape`'s, the checkpoint's,
            else 3); what `get_config` records.
        trainable: as for any Keras model.

    Attributes: the arguments as given or resolved (`image_size`, `channels`,
    `patch_size`, ...), `grid_size` (the (rows, cols) of the position
    embeddings) and `dynamic_size` (whether the input height and width are None:
    any resolution). Exports (SavedModel, TFLite, ONNX) need a fixed size.

    Raises:
        TypeError: an unknown keyword argument (named in the message), or
            `weights` (see above).
        ValueError: contradictory or invalid arguments (both values named).
    """

    def __init__(
        self,
        image_size=None,
        patch_size=16,
        hidden_size=768,
        mlp_dim=3072,
        num_heads=12,
        num_layers=12,
        classifier=None,
        representation_size=NOT_GIVEN,
        num_classes=None,
        include_top=True,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        weights=None,
        name="vit",
        dtype=None,
        resnet=None,
        stochastic_depth_rate=0.0,
        *,
        approximate_gelu=None,
        layer_norm_epsilon=None,
        fc_norm=None,
        preprocessing=None,
        input_shape=None,
        input_tensor=None,
        pooling=NOT_GIVEN,
        classes=None,
        classifier_activation=None,
        channels=None,
        trainable=True,
    ):
        if weights is not None:
            raise TypeError(
                "VisionTransformer(weights=...) does not load weights: build and load with "
                "keras_vit.from_weights(weights, **arguments), or a builder such as "
                "keras_vit.ViT_B16(weights=...) or keras_vit.build_model(spec, weights=...)."
            )
        arguments = dict(
            image_size=image_size,
            patch_size=patch_size,
            hidden_size=hidden_size,
            mlp_dim=mlp_dim,
            num_heads=num_heads,
            num_layers=num_layers,
            classifier=classifier,
            representation_size=representation_size,
            num_classes=num_classes,
            include_top=include_top,
            dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate,
            name=name,
            dtype=dtype,
            resnet=resnet,
            stochastic_depth_rate=stochastic_depth_rate,
            approximate_gelu=approximate_gelu,
            layer_norm_epsilon=layer_norm_epsilon,
            fc_norm=fc_norm,
            preprocessing=preprocessing,
            input_shape=input_shape,
            input_tensor=input_tensor,
            pooling=pooling,
            classes=classes,
            classifier_activation=classifier_activation,
            channels=channels,
            trainable=trainable,
        )
        self._build(**_defaults(_normalised(arguments)))

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
        bound = inspect.signature(cls.__init__).bind(None, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        del arguments["self"], arguments["weights"]
        return _normalised(arguments)

    def _build(
        self,
        *,
        image_size,
        channels,
        patch_size,
        hidden_size,
        mlp_dim,
        num_heads,
        num_layers,
        classifier,
        representation_size,
        num_classes,
        include_top,
        dropout_rate,
        attention_dropout_rate,
        stochastic_depth_rate,
        approximate_gelu,
        layer_norm_epsilon,
        fc_norm,
        preprocessing,
        resnet,
        pooling,
        classifier_activation,
        input_tensor,
        dynamic_size,
        name,
        dtype,
        trainable,
    ):
        """Builds the graph from complete arguments; reads no file."""
        patch_embedding = vit_layers.PatchEmbedding(
            patch_size, hidden_size, name="embedding", dtype=dtype
        )
        if input_tensor is None:
            size = (None, None) if dynamic_size else image_size
            images = inputs = keras.Input((*size, channels), name="image")
        else:
            images = input_tensor
            inputs = keras.utils.get_source_inputs(input_tensor)
            inputs = inputs[0] if len(inputs) == 1 else inputs
        resnet_stages = resnet_layers(resnet, dtype) if resnet is not None else []
        grid_size = _token_grid(resnet_stages, patch_embedding, image_size)
        class_token = (
            vit_layers.ClassToken(name="cls", dtype=dtype) if classifier == "token" else None
        )
        _, x, patch_map = _embed(images, resnet_stages, patch_embedding, class_token, dynamic_size)
        encoder = vit_layers.Encoder(
            grid_size,
            num_layers,
            num_heads,
            mlp_dim,
            num_prefix_tokens=1 if classifier == "token" else 0,
            dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate,
            stochastic_depth_rate=stochastic_depth_rate,
            layer_norm_epsilon=layer_norm_epsilon,
            approximate_gelu=approximate_gelu,
            final_norm=not fc_norm,
            name="Transformer",
            dtype=dtype,
        )
        x = encoder(_on_grid(x, patch_map))
        after_pooling = (
            keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="fc_norm", dtype=dtype)
            if fc_norm
            else None
        )
        if include_top or pooling is NOT_GIVEN:
            x = vit_layers.TokenPooling(classifier, name="pool", dtype=dtype)(x)
            if after_pooling is not None:
                x = after_pooling(x)
            if representation_size:
                x = keras.layers.Dense(
                    representation_size,
                    activation="tanh",
                    kernel_initializer="lecun_normal",
                    name="pre_logits",
                    dtype=dtype,
                )(x)
        else:
            x = _pooled(x, pooling, classifier, grid_size, patch_map, dtype)
            if after_pooling is not None and pooling is not None:
                x = after_pooling(x)
        if include_top:  # logits (and their activation) in float32 under mixed precision
            x = keras.layers.Dense(
                num_classes, kernel_initializer="zeros", name="head", dtype=_float32_outputs(dtype)
            )(x)
            if classifier_activation is not None:
                x = keras.layers.Activation(
                    classifier_activation, name="predictions", dtype=_float32_outputs(dtype)
                )(x)
        super().__init__(inputs=inputs, outputs=x, name=name, trainable=trainable)

        self.image_size = image_size
        self.channels = channels
        self.patch_size = patch_embedding.patch_size
        self.grid_size = grid_size
        self.dynamic_size = bool(dynamic_size)
        self.hidden_size = int(hidden_size)
        self.mlp_dim = int(mlp_dim)
        self.num_heads = int(num_heads)
        self.num_layers = int(num_layers)
        self.classifier = classifier
        self.representation_size = int(representation_size) if representation_size else None
        self.num_classes = int(num_classes)
        self.include_top = bool(include_top)
        self.pooling = pooling
        self.classifier_activation = classifier_activation
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.stochastic_depth_rate = float(stochastic_depth_rate)
        self.approximate_gelu = bool(approximate_gelu)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.fc_norm = bool(fc_norm)
        self.preprocessing = preprocessing
        self.resnet = resnet
        self._dtype_arg = dtype
        # Layers before `input_tensor` are part of this model but not of its config.
        self._upstream_of_input = input_tensor is not None and inputs is not input_tensor

    # -- Looking inside -------------------------------------------------------------

    def tokens(self, images):
        """Applies the layers before the encoder: (B, H, W, 3) -> (B, T, hidden)."""
        return self._embedded(images)[1]

    def resnet_layers(self):
        """The hybrid's ResNet layers in order (stem 'root', stages 'block1'..);
        empty for a plain ViT."""
        if self.resnet is None:
            return []
        return [self.get_layer("root")] + [
            self.get_layer(f"block{i + 1}") for i in range(len(self.resnet["num_layers"]))
        ]

    def token_grid(self, image_size):
        """(rows, cols) of the token grid for images of (height, width): the patch
        grid of the image, or of a hybrid's ResNet feature map. For a fixed-size
        model at its own size, `grid_size`. Raises ValueError where the size is
        not a multiple of the (effective) patch size."""
        return _token_grid(self.resnet_layers(), self.get_layer("embedding"), tuple(image_size))

    def attention_model(self):
        """A `keras.Model` sharing this model's weights that maps images to the
        attention weights of every encoder block: a list of `num_layers` arrays
        (batch, heads, tokens, tokens), rows summing to 1. Tokens are ordered as
        the encoder sees them (class token first for 'token' models). Its input
        has this model's size (any size for a `dynamic_size` model)."""
        images = self._image_input()
        encoder = self.get_layer("Transformer")
        _, x, patch_map = self._embedded(images)
        x = encoder.position_embedding(_on_grid(x, patch_map))
        weights = []
        for block in encoder.blocks:  # block by block: each node has flat outputs
            x, block_weights = block(x, return_attention_weights=True)
            weights.append(block_weights)
        return keras.Model(images, weights, name=f"{self.name}_attention")

    def feature_extractor(self, blocks=(-1,), stages=(), norm=False, name=None):
        """A `keras.Model` sharing this model's weights that maps images to the
        token maps of chosen encoder blocks and, for a hybrid, to the outputs of
        chosen ResNet stages (as timm's `forward_intermediates`): a dict of
        (batch, rows, cols, channels) maps, for a feature pyramid or a dense
        task. Call it like a layer inside a functional graph, or `predict`.

            features = model.feature_extractor(blocks=(3, 6, 9, 12))
            maps = features(images)  # {"block3": (B, rows, cols, hidden), ...}

        Args:
            blocks: encoder blocks, numbered 1..num_layers (block k's map is the
                output of the k-th block), or from the end (-1: the last). Key
                f"block{k}": (batch, rows, cols, hidden), the patch tokens laid
                on the token grid (`token_grid`), the class token dropped.
                Empty: none.
            stages: a hybrid's ResNet outputs: 0 the stem ('root'), s >= 1 the
                stage 'block{s}', or from the end (-1: the map the patch
                embedding cuts into patches); True: the stem and every stage.
                Keys "stem" and f"stage{s}": (batch, h, w, C), h = height /
                stride (4 for the stem, x2 per further stage; ceil at each
                stride-2 step), C = 64 * width_factor for the stem, 256 * 2**(s-1)
                * width_factor for stage s. Empty: none.
            norm: whether the block maps go through the encoder's final
                LayerNorm (`encoder_norm`), as the model's own outputs do: then
                the last block's map is the `pooling=None` output. False (the
                default, as timm): the blocks' raw outputs (the residual stream).
                An `fc_norm` model's encoder has no final LayerNorm: no change.
            name: the model's name; default f"{self.name}_features".
        Returns:
            A `keras.Model` from images (batch, height, width, channels) in [-1,
            1], of this model's size (any size for a `dynamic_size` model), to
            the dict of maps, built in the order stem, stages, blocks. Look the
            maps up by key: the order a call returns them in is Keras' (under
            torch, and from `predict` under JAX, sorted by key).
        Raises:
            ValueError: no map asked for, a block or stage out of range (the valid
                range named), or stages of a model without a ResNet.
        """
        images, outputs = self._feature_maps(blocks, stages, norm)
        return keras.Model(images, outputs, name=name or f"{self.name}_features")

    def _feature_maps(self, blocks, stages, norm):
        """(a fresh image input, {key: map}) for `feature_extractor`'s arguments."""
        block_numbers = _numbers("blocks", blocks, 1, self.num_layers, "block")
        stage_numbers = _numbers(
            "stages", stages, 0, len(self.resnet_layers()) - 1, "stage", self.resnet is None
        )
        if not block_numbers and not stage_numbers:
            raise ValueError("feature_extractor: no map asked for (blocks and stages are empty).")
        images = self._image_input()
        resnet_outputs, tokens, patch_map = self._embedded(images)
        outputs = {(f"stage{s}" if s else "stem"): resnet_outputs[s] for s in stage_numbers}
        if block_numbers:
            # The encoder's layers one by one, in the order of `Encoder.call`, up to
            # the last block asked for (a second node of the encoder itself with
            # more outputs than its first would not be connected: Keras' Function
            # counts a layer's outputs on its first node).
            encoder = self.get_layer("Transformer")
            x = encoder.dropout(encoder.position_embedding(_on_grid(tokens, patch_map)))
            for k, block in enumerate(encoder.blocks[: block_numbers[-1]], 1):
                x = block(x)
                if k in block_numbers:
                    to_map = PatchTokenMap(
                        None if patch_map is not None else self.grid_size,
                        encoder.num_prefix_tokens,
                        name=f"block{k}_map",
                        dtype=self._dtype_arg,
                    )
                    y = encoder.encoder_norm(x) if norm and encoder.encoder_norm else x
                    outputs[f"block{k}"] = to_map(_on_grid(y, patch_map))
        return images, outputs

    def _image_input(self):
        """A fresh image input of this model's size ((None, None) when dynamic)."""
        size = (None, None) if self.dynamic_size else self.image_size
        return keras.Input((*size, self.channels), name="image")

    def _embedded(self, images):
        """`_embed` (the encoder's input, and what carries it there) with this model's
        layers."""
        class_token = self.get_layer("cls") if self.classifier == "token" else None
        return _embed(
            images,
            self.resnet_layers(),
            self.get_layer("embedding"),
            class_token,
            self.dynamic_size,
        )

    def attention_weights(self, images, batch_size=32):
        """Numpy attention weights of every block for `images` (B, H, W, 3) in
        [-1, 1]: a list of `num_layers` arrays (B, heads, tokens, tokens)."""
        model = _ATTENTION_MODELS.get(self)
        if model is None:  # built once per model, so repeated calls do not retrace
            model = _ATTENTION_MODELS[self] = self.attention_model()
        outputs = model.predict(images, batch_size=batch_size, verbose=0)
        if not isinstance(outputs, (list, tuple)):  # one block: Keras returns the array itself
            outputs = [outputs]
        return list(outputs)

    def _resolve_auto_jit_compile(self):
        """What `jit_compile="auto"` (the default of `compile`, so of `fit`; and what
        `predict` uses on a model never compiled) means: the rule of
        `keras_vit.compilation`, from the backend, the compute dtype and the CPU
        (docs/speed.md); Keras' own choice where that rule defers to it (a GPU/TPU
        with TensorFlow, a tf.distribute strategy). An explicit `jit_compile` always
        wins (Keras may still call this while setting it, and drops the answer).

        A private Keras hook, overridden because it is the only one: Keras calls it
        both from `compile(jit_compile="auto")` and when the `jit_compile` property
        is first read (`predict` on an uncompiled model); no public argument
        changes what "auto" means."""
        from keras_vit import compilation

        choice = compilation.resolve_auto_jit_compile(self)
        return super()._resolve_auto_jit_compile() if choice is None else choice

    # -- Serialisation ------------------------------------------------------------

    def get_config(self):
        if self._upstream_of_input:
            raise NotImplementedError(
                f"{self.name} was built on an input_tensor with layers before it, which "
                "its config cannot describe. Build the model on a keras.Input of the same "
                "shape and wrap both: keras.Model(inputs, vit(preprocessed))."
            )
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "image_size": self.image_size,
            "channels": self.channels,
            "patch_size": self.patch_size,
            "hidden_size": self.hidden_size,
            "mlp_dim": self.mlp_dim,
            "num_heads": self.num_heads,
            "num_layers": self.num_layers,
            "classifier": self.classifier,
            "representation_size": self.representation_size,
            "num_classes": self.num_classes,
            "include_top": self.include_top,
            "classifier_activation": _serialize_activation(self.classifier_activation),
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "stochastic_depth_rate": self.stochastic_depth_rate,
            "approximate_gelu": self.approximate_gelu,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "fc_norm": self.fc_norm,
        }
        if self.preprocessing is not None:  # the authors' scaling: the key is absent
            config["preprocessing"] = self.preprocessing
        if self.pooling is not NOT_GIVEN:  # not given: the key is absent
            config["pooling"] = self.pooling
        if self.dynamic_size:  # fixed size: the key is absent
            config["input_shape"] = [None, None, self.channels]
        if self.resnet is not None:
            config["resnet"] = {
                "num_layers": list(self.resnet["num_layers"]),
                "width_factor": self.resnet["width_factor"],
            }
        if self._dtype_arg is not None:
            config["dtype"] = keras.dtype_policies.serialize(
                keras.dtype_policies.get(self._dtype_arg)
            )
        return config

    @classmethod
    def from_config(cls, config):
        """The model of `config` (`get_config`), built without weights: no file
        or network access."""
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        if isinstance(config.get("classifier_activation"), dict):
            config["classifier_activation"] = keras.activations.deserialize(
                config["classifier_activation"]
            )
        for key in ("image_size", "patch_size", "input_shape"):
            if isinstance(config.get(key), list):
                config[key] = tuple(config[key])
        return cls(**config)


def _input_arguments(image_size, channels, input_shape, input_tensor):
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


def _normalised(arguments):
    """The constructor's arguments (a dict) with keras.applications' folded in:
    `input_shape` / `input_tensor` into image_size, channels and dynamic_size
    (`_input_arguments`), `classes` into num_classes; `resnet` normalised."""
    a = dict(arguments)
    input_shape, classes = a.pop("input_shape"), a.pop("classes")
    a["resnet"] = resnet_spec(a["resnet"])
    a.update(_input_arguments(a["image_size"], a["channels"], input_shape, a["input_tensor"]))
    a["num_classes"] = _alias("num_classes", a["num_classes"], "classes", classes)
    return a


def _alias(name, value, alias, alias_value):
    """`value`, or `alias_value` where only that is given; both: they must agree."""
    if value is not None and alias_value is not None and value != alias_value:
        raise ValueError(
            f"{name}={value!r} and {alias}={alias_value!r} disagree "
            f"({alias} is an alias of {name})."
        )
    return value if value is not None else alias_value


def _defaults(arguments):
    """Complete arguments for `_build`: defaults where nothing (not even a
    checkpoint) gave a value, checked."""
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
        elif key != "layer_norm_epsilon" and not isinstance(a[key], bool):
            raise ValueError(f"{key} must be True or False, got {a[key]!r}.")
    a["preprocessing"] = check_preprocessing(a["preprocessing"], a["channels"])
    epsilon = a["layer_norm_epsilon"]
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not epsilon > 0:
        raise ValueError(f"layer_norm_epsilon must be a positive number, got {epsilon!r}.")
    num_classes = a["num_classes"]
    if not isinstance(num_classes, numbers.Integral) or isinstance(num_classes, bool):
        raise ValueError(f"num_classes (or classes) must be an int, got {num_classes!r}.")
    if num_classes < 1:
        raise ValueError(f"num_classes (or classes) must be at least 1, got {num_classes}.")
    if a["classifier"] not in ("token", "gap"):
        raise ValueError(f"classifier must be 'token' or 'gap', got {a['classifier']!r}.")
    pooling = a["pooling"]
    if pooling is not NOT_GIVEN and pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS} (or not given), got {pooling!r}.")
    if pooling == "token" and a["classifier"] != "token" and not a["include_top"]:
        raise ValueError(
            "pooling='token': this model has no class token (classifier="
            f"{a['classifier']!r}); use 'avg', 'max' or None."
        )
    if a["classifier_activation"] is not None:
        keras.activations.get(a["classifier_activation"])  # unknown names raise here
    return a


def _pooled(tokens, pooling, classifier, grid_size, patch_map, dtype):
    """The headless output `pooling` asks for, from the encoder's output."""
    if pooling == "token":
        return vit_layers.TokenPooling("token", name="pool", dtype=dtype)(tokens)
    prefix = 1 if classifier == "token" else 0
    if pooling is None:
        to_map = PatchTokenMap(
            grid_size if patch_map is None else None, prefix, name="feature_map", dtype=dtype
        )
        return to_map(_on_grid(tokens, patch_map))
    patches = tokens
    if prefix:  # the class token is not a patch
        patches = keras.layers.Cropping1D((prefix, 0), name="patch_tokens", dtype=dtype)(tokens)
    if pooling == "avg":
        return vit_layers.TokenPooling("gap", name="pool", dtype=dtype)(patches)
    return keras.layers.GlobalMaxPooling1D(name="pool", dtype=dtype)(patches)


def _embed(images, resnet, patch_embedding, class_token, dynamic_size):
    """The encoder's input for images (batch, height, width, channels).

    Args:
        resnet: a hybrid's ResNet layers [stem, block1, ...], or [].
        class_token: the ClassToken layer, or None ('gap' models).
        dynamic_size: whether the grid is known only at call time.
    Returns:
        (resnet_outputs, tokens, patch_map): the outputs of the ResNet layers in
        order; the tokens (batch, prefix + rows*cols, hidden), class token first;
        the patch map (batch, rows, cols, hidden) that carries the grid of a
        dynamic-size model (None for a fixed size: the graph is then the same as
        if dynamic sizes did not exist).
    """
    x, resnet_outputs = images, []
    for layer in resnet:
        x = layer(x)
        resnet_outputs.append(x)
    if dynamic_size:
        x, patch_map = patch_embedding(x, return_map=True)
    else:
        x, patch_map = patch_embedding(x), None
    if class_token is not None:
        x = class_token(x)
    return resnet_outputs, x, patch_map


def _on_grid(tokens, patch_map):
    """The input of a layer that reads the token grid (position embedding,
    encoder, `PatchTokenMap`): the tokens alone for a fixed grid, else the pair
    (tokens, patch_map), whose shape gives the grid of each batch."""
    return tokens if patch_map is None else (tokens, patch_map)


def _numbers(argument, values, first, last, what, absent=False):
    """`feature_extractor`'s block / stage numbers: sorted, deduplicated, negative
    ones counted from the end (-1: `last`). True: all of first..last."""
    if values is None or values is False:
        values = ()
    elif values is not True and isinstance(values, int):
        values = (values,)
    if values is not True:
        try:
            values = tuple(values)
        except TypeError:
            raise ValueError(
                f"feature_extractor: {argument} must be an int or a sequence of ints, "
                f"got {values!r}."
            ) from None
    if absent and (values is True or values):
        raise ValueError(
            f"feature_extractor: {argument}={values!r}, but this model is not a hybrid: "
            "it has no ResNet."
        )
    if values is True:
        values = tuple(range(first, last + 1))
    numbers = set()
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"feature_extractor: {argument} must be ints, got {value!r}.")
        number = value + last + 1 if value < 0 else value
        if not first <= number <= last:
            raise ValueError(
                f"feature_extractor: {what} {value} is out of range: this model has "
                f"{what}s {first}..{last} (or -1..-{last - first + 1} from the end)."
            )
        numbers.add(number)
    return sorted(numbers)


def _serialize_activation(activation):
    if activation is None or isinstance(activation, str):
        return activation
    return keras.activations.serialize(activation)


def _token_grid(resnet, patch_embedding, image_size):
    """The token grid (rows, cols) of images of `image_size`: patches of the image,
    or of a hybrid's ResNet feature map (its size from the layers' shapes)."""
    if not resnet:
        return patch_embedding.grid_size(image_size)
    shape = (None, *image_size, None)
    for layer in resnet:
        shape = layer.compute_output_shape(shape)
    feature_size = tuple(shape[1:3])
    ph, pw = patch_embedding.patch_size
    if feature_size[0] % ph or feature_size[1] % pw:
        raise ValueError(
            f"image size {image_size[0]}x{image_size[1]} gives a ResNet feature map of "
            f"{feature_size[0]}x{feature_size[1]}, not a multiple of the patch size "
            f"{ph}x{pw}."
        )
    return feature_size[0] // ph, feature_size[1] // pw


def _float32_outputs(dtype):
    """The head's policy: `dtype`, but computing in float32 where `dtype` is mixed."""
    policy = keras.dtype_policies.get(dtype) if dtype is not None else keras.config.dtype_policy()
    return "float32" if policy.compute_dtype != "float32" else dtype
