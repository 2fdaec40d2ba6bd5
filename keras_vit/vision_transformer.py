"""The Vision Transformer (Dosovitskiy et al., ICLR 2021) as a Keras model.

Construction is one code path with a pure core. `VisionTransformer.__init__`
(1) normalises its arguments, keras.applications' (`input_shape`,
`input_tensor`, `classes`, ...) included; (2) only when `weights` is given,
hands them to `keras_vit.factory.resolve_weights`, the one function where
`weights=` is resolved (file, registry download) and the checkpoint's defaults
are filled in; (3) builds the graph with `_build`, which reads nothing but its
arguments; (4) assigns the opened weights (`factory.load`). With `weights=None`
(and so in `from_config`, which never passes weights) no file and no network is
touched. The named builders (`ViT_B16(...)`, `HybridViT`, `build_model`) are
`VisionTransformer(...)` calls, so they take the same path.

Why not a classmethod factory returning the model, or `__new__`: Keras'
`Operation.__new__` records constructor arguments and Functional models are
built in `__init__`; a constructor that returns another object would break
subclassing and `from_config`. Resolving the arguments, then calling a pure
`_build` from `__init__`, keeps `VisionTransformer(weights=...)` an ordinary
Keras constructor.

Imports go one way: this module -> `keras_vit.factory` ->
`keras_vit.checkpoint.loader`; the loader never imports this module (it is
given the class where it rebuilds a source model from a config).

`representation_size` and `pooling` default to `factory.NOT_GIVEN` rather than
None because None is one of their values (no pre_logits; the patch-token map);
"not given" lets the checkpoint (representation_size) or the model's own
representation (pooling) decide. The marker never reaches a config.
"""

import weakref

import keras

from keras_vit import factory
from keras_vit import layers as vit_layers
from keras_vit.factory import NOT_GIVEN
from keras_vit.layers.patch_embedding import to_pair
from keras_vit.layers.resnet import resnet_layers, resnet_spec

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
        image_size: int or (height, width), multiples of the patch size. None:
            `input_shape`'s, else the checkpoint's resolution when `weights` are
            given, else 224.
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
        weights: None, a registry name ('imagenet21k', ... see
            `keras_vit.checkpoint.registry`), or a path to an official `.npz`,
            a `.keras` or a `.weights.h5` file (see `keras_vit.factory`).
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

    keras.applications' arguments (keyword only), with its meanings:
        input_shape: (height, width, channels): the resolution (as
            `image_size`; both given must agree) and the number of channels.
            Height and width must be given (position embeddings fix the
            resolution). Channels other than 3 give a patch embedding (a
            hybrid's stem) of that many input channels; RGB weights are adapted
            to it (`keras_vit.checkpoint.loader.adapt_input_channels`).
        input_tensor: a Keras tensor (batch, height, width, channels) to use as
            the model's input; the model's inputs are its source inputs (as
            keras.applications). Its shape sets `input_shape`.
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
            for the map. (`model.pooling` is `keras_vit.factory.NOT_GIVEN`
            then, and `get_config` has no 'pooling'.)
        classes: an alias of `num_classes` (both given must agree).
        classifier_activation: None (logits, the default) or a Keras activation
            ('softmax', ...) applied to the head's output in float32.
        channels: the input channels (None: `input_shape`'s, the checkpoint's,
            else 3); what `get_config` records.
        trainable: as for any Keras model.

    Raises:
        TypeError: an unknown keyword argument (named in the message).
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
        input_shape=None,
        input_tensor=None,
        pooling=NOT_GIVEN,
        classes=None,
        classifier_activation=None,
        channels=None,
        trainable=True,
    ):
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
            resnet=resnet_spec(resnet),
            stochastic_depth_rate=stochastic_depth_rate,
            input_tensor=input_tensor,
            pooling=pooling,
            classifier_activation=classifier_activation,
            channels=channels,
            trainable=trainable,
        )
        arguments.update(_input_arguments(image_size, channels, input_shape, input_tensor))
        arguments["num_classes"] = _alias("num_classes", num_classes, "classes", classes)
        source = None
        if weights is not None:
            arguments, source = factory.resolve_weights(weights, arguments, type(self))
        self._build(**_defaults(arguments))
        if source is not None:
            factory.load(self, source)

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
        resnet,
        pooling,
        classifier_activation,
        input_tensor,
        name,
        dtype,
        trainable,
    ):
        """Builds the graph from complete arguments; reads no file."""
        patch_embedding = vit_layers.PatchEmbedding(
            patch_size, hidden_size, name="embedding", dtype=dtype
        )
        if input_tensor is None:
            images = inputs = keras.Input((*image_size, channels), name="image")
        else:
            images = input_tensor
            inputs = keras.utils.get_source_inputs(input_tensor)
            inputs = inputs[0] if len(inputs) == 1 else inputs
        x = images
        for layer in resnet_layers(resnet, dtype) if resnet is not None else ():
            x = layer(x)
        grid_size = (
            patch_embedding.grid_size(image_size)
            if resnet is None
            else _hybrid_grid_size(patch_embedding, image_size, tuple(x.shape[1:3]))
        )
        x = patch_embedding(x)
        if classifier == "token":
            x = vit_layers.ClassToken(name="cls", dtype=dtype)(x)
        x = vit_layers.Encoder(
            grid_size,
            num_layers,
            num_heads,
            mlp_dim,
            num_prefix_tokens=1 if classifier == "token" else 0,
            dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate,
            stochastic_depth_rate=stochastic_depth_rate,
            name="Transformer",
            dtype=dtype,
        )(x)
        if include_top or pooling is NOT_GIVEN:
            x = vit_layers.TokenPooling(classifier, name="pool", dtype=dtype)(x)
            if representation_size:
                x = keras.layers.Dense(
                    representation_size,
                    activation="tanh",
                    kernel_initializer="lecun_normal",
                    name="pre_logits",
                    dtype=dtype,
                )(x)
        else:
            x = _pooled(x, pooling, classifier, grid_size, hidden_size, dtype)
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
        self.resnet = resnet
        self._dtype_arg = dtype
        # Layers before `input_tensor` are part of this model but not of its config.
        self._upstream_of_input = input_tensor is not None and inputs is not input_tensor

    # -- Looking inside -------------------------------------------------------------

    def tokens(self, images):
        """Applies the layers before the encoder: (B, H, W, 3) -> (B, T, hidden)."""
        x = images
        for layer in self.resnet_layers():
            x = layer(x)
        x = self.get_layer("embedding")(x)
        if self.classifier == "token":
            x = self.get_layer("cls")(x)
        return x

    def resnet_layers(self):
        """The hybrid's ResNet layers in order (stem 'root', stages 'block1'..);
        empty for a plain ViT."""
        if self.resnet is None:
            return []
        return [self.get_layer("root")] + [
            self.get_layer(f"block{i + 1}") for i in range(len(self.resnet["num_layers"]))
        ]

    def attention_model(self):
        """A `keras.Model` sharing this model's weights that maps images to the
        attention weights of every encoder block: a list of `num_layers` arrays
        (batch, heads, tokens, tokens), rows summing to 1. Tokens are ordered as
        the encoder sees them (class token first for 'token' models)."""
        images = keras.Input((*self.image_size, self.channels), name="image")
        encoder = self.get_layer("Transformer")
        x = encoder.position_embedding(self.tokens(images))
        weights = []
        for block in encoder.blocks:  # block by block: each node has flat outputs
            x, block_weights = block(x, return_attention_weights=True)
            weights.append(block_weights)
        return keras.Model(images, weights, name=f"{self.name}_attention")

    def attention_weights(self, images, batch_size=32):
        """Numpy attention weights of every block for `images` (B, H, W, 3) in
        [-1, 1]: a list of `num_layers` arrays (B, heads, tokens, tokens)."""
        model = _ATTENTION_MODELS.get(self)
        if model is None:  # built once per model, so repeated calls do not retrace
            model = _ATTENTION_MODELS[self] = self.attention_model()
        outputs = model.predict(images, batch_size=batch_size, verbose=0)
        return list(outputs)

    def _resolve_auto_jit_compile(self):
        """`jit_compile="auto"` (the default of `compile`, `predict`, `fit`) means XLA
        also on CPU-only TensorFlow, where Keras would switch it off: ViT-S/16
        inference measured 1.26x faster with it (docs/speed.md). Under a
        tf.distribute strategy Keras' own choice stands."""
        if (
            keras.backend.backend() == "tensorflow"
            and getattr(self, "_distribute_strategy", None) is None
        ):
            return all(layer.supports_jit for layer in self._flatten_layers())
        return super()._resolve_auto_jit_compile()

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
        }
        if self.pooling is not NOT_GIVEN:  # not given: the key is absent
            config["pooling"] = self.pooling
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
        for key in ("image_size", "patch_size"):
            if isinstance(config.get(key), list):
                config[key] = tuple(config[key])
        return cls(**config)


def _input_arguments(image_size, channels, input_shape, input_tensor):
    """image_size and channels from keras.applications' input_shape / input_tensor
    (None where none of them says)."""
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
        return {"image_size": image_size, "channels": channels}
    input_shape = tuple(input_shape)
    if len(input_shape) != 3:
        raise ValueError(f"input_shape must be (height, width, channels), got {input_shape}.")
    height, width, depth = input_shape
    if height is None or width is None:
        raise ValueError(
            f"input_shape={input_shape}: a ViT needs a fixed height and width "
            "(multiples of the patch size): its position embeddings fix the "
            "resolution."
        )
    if depth is None or int(depth) < 1:
        raise ValueError(f"input_shape={input_shape}: the number of channels must be given.")
    size = (int(height), int(width))
    if image_size is not None and to_pair(image_size, "image_size") != size:
        raise ValueError(
            f"image_size={image_size!r} disagrees with input_shape="
            f"{input_shape} (height, width {size})."
        )
    if channels is not None and int(channels) != int(depth):
        raise ValueError(f"channels={channels!r} disagrees with input_shape={input_shape}.")
    return {"image_size": size, "channels": int(depth)}


def _alias(name, value, alias, alias_value):
    """`value`, or `alias_value` where only that is given; both: they must agree."""
    if value is not None and alias_value is not None and int(value) != int(alias_value):
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


def _pooled(tokens, pooling, classifier, grid_size, hidden_size, dtype):
    """The headless output `pooling` asks for, from the encoder's output."""
    if pooling == "token":
        return vit_layers.TokenPooling("token", name="pool", dtype=dtype)(tokens)
    patches = tokens
    if classifier == "token":  # the class token is not a patch
        patches = keras.layers.Cropping1D((1, 0), name="patch_tokens", dtype=dtype)(tokens)
    if pooling is None:
        return keras.layers.Reshape((*grid_size, hidden_size), name="feature_map", dtype=dtype)(
            patches
        )
    if pooling == "avg":
        return vit_layers.TokenPooling("gap", name="pool", dtype=dtype)(patches)
    return keras.layers.GlobalMaxPooling1D(name="pool", dtype=dtype)(patches)


def _serialize_activation(activation):
    if activation is None or isinstance(activation, str):
        return activation
    return keras.activations.serialize(activation)


def _hybrid_grid_size(patch_embedding, image_size, feature_size):
    """A hybrid's token grid: patches of the ResNet feature map (rows, cols)."""
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
