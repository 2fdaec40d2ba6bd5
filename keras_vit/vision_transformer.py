"""The Vision Transformer (Dosovitskiy et al., ICLR 2021) as a Keras model."""

import weakref

import keras

from keras_vit import layers as vit_layers
from keras_vit.layers.patch_embedding import to_pair
from keras_vit.layers.resnet import resnet_layers, resnet_spec

# Attention models by ViT, outside Keras' attribute tracking (they share its layers).
_ATTENTION_MODELS = weakref.WeakKeyDictionary()
_FROM_WEIGHTS = "from_weights"  # representation_size default: follow the checkpoint


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformer(keras.Model):
    """ViT: patch embedding, [class] token, position embeddings, Transformer
    encoder, then the representation (class token or GAP), optional pre_logits
    (Dense + tanh) and the classification head.

    Hybrids (paper §3.1) put a ResNet ('root' stem, stages 'block1'..) before the
    patch embedding, which then cuts the feature map into patches (1x1 for the
    published hybrids).

    Input: images (batch, height, width, 3) scaled to [-1, 1]
    (`keras_vit.preprocess_input`). Output: logits (batch, num_classes), or with
    `include_top=False` the representation (batch, representation_size or
    hidden_size).

    Args:
        image_size: int or (height, width), multiples of the patch size. None:
            the checkpoint's resolution when `weights` are given, else 224.
        patch_size: patch side P (on the ResNet feature map for hybrids).
        hidden_size, mlp_dim, num_heads, num_layers: Transformer sizes.
        classifier: 'token' (class token) or 'gap' (global average pooling).
            None: what the checkpoint has, else 'token'.
        representation_size: width of the pre_logits layer (Dense + tanh), or
            None for none. Default: follow the checkpoint (none without one).
        num_classes: head width. None: the checkpoint's, else 1000. A number that
            differs from the checkpoint's gives a fresh zero-initialised head.
        include_top: whether to add the head.
        dropout_rate, attention_dropout_rate: dropout rates.
        stochastic_depth_rate: stochastic depth of the last encoder block, rising
            linearly from 0 at the first (AugReg, DeiT); training only.
        weights: None, a registry name ('imagenet21k', ... see
            `keras_vit.checkpoint.registry`), or a path to an official `.npz`,
            a `.keras` or a `.weights.h5` file.
        resnet: None for a plain ViT; for a hybrid the ResNet's units per stage,
            e.g. (3, 4, 9) (`()`: stem only), or the official config's mapping
            {'num_layers': (3, 4, 9), 'width_factor': 1}. The effective patch is
            patch_size * the ResNet's stride (4 for the stem, x2 per further
            stage); any image size whose feature map is a multiple of
            patch_size works.
        dtype: a dtype policy for every layer (e.g. 'mixed_bfloat16').
    """

    def __init__(self, image_size=None, patch_size=16, hidden_size=768, mlp_dim=3072,
                 num_heads=12, num_layers=12, classifier=None,
                 representation_size=_FROM_WEIGHTS, num_classes=None, include_top=True,
                 dropout_rate=0.0, attention_dropout_rate=0.0, weights=None,
                 name="vit", dtype=None, resnet=None, stochastic_depth_rate=0.0, **kwargs):
        from keras_vit.checkpoint import loader  # deferred: loader imports this module

        resnet = resnet_spec(resnet)
        arch = loader.architecture(patch_size, hidden_size, mlp_dim, num_heads, num_layers,
                                   resnet)
        source = loader.open_source(weights, arch) if weights is not None else None
        meta = source.metadata if source is not None else {}
        image_size = to_pair(image_size or meta.get("image_size") or 224, "image_size")
        classifier = classifier or meta.get("classifier") or "token"
        if representation_size == _FROM_WEIGHTS:
            representation_size = meta.get("representation_size")
        if num_classes is None:
            num_classes = meta.get("num_classes") or 1000
        if classifier not in ("token", "gap"):
            raise ValueError(f"classifier must be 'token' or 'gap', got {classifier!r}.")

        patch_embedding = vit_layers.PatchEmbedding(patch_size, hidden_size, name="embedding",
                                                    dtype=dtype)
        images = keras.Input((*image_size, 3), name="image")
        x = images
        for layer in resnet_layers(resnet, dtype) if resnet is not None else ():
            x = layer(x)
        grid_size = (patch_embedding.grid_size(image_size) if resnet is None else
                     _hybrid_grid_size(patch_embedding, image_size, tuple(x.shape[1:3])))
        x = patch_embedding(x)
        if classifier == "token":
            x = vit_layers.ClassToken(name="cls", dtype=dtype)(x)
        x = vit_layers.Encoder(
            grid_size, num_layers, num_heads, mlp_dim,
            num_prefix_tokens=1 if classifier == "token" else 0,
            dropout_rate=dropout_rate, attention_dropout_rate=attention_dropout_rate,
            stochastic_depth_rate=stochastic_depth_rate, name="Transformer", dtype=dtype)(x)
        x = vit_layers.TokenPooling(classifier, name="pool", dtype=dtype)(x)
        if representation_size:
            x = keras.layers.Dense(representation_size, activation="tanh",
                                   kernel_initializer="lecun_normal", name="pre_logits",
                                   dtype=dtype)(x)
        if include_top:  # logits in float32 also under mixed precision
            x = keras.layers.Dense(num_classes, kernel_initializer="zeros", name="head",
                                   dtype=_float32_outputs(dtype))(x)
        super().__init__(inputs=images, outputs=x, name=name, **kwargs)

        self.image_size = image_size
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
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.stochastic_depth_rate = float(stochastic_depth_rate)
        self.resnet = resnet
        self._dtype_arg = dtype
        if source is not None:
            loader.load_source(self, source)

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
            self.get_layer(f"block{i + 1}") for i in range(len(self.resnet["num_layers"]))]

    def attention_model(self):
        """A `keras.Model` sharing this model's weights that maps images to the
        attention weights of every encoder block: a list of `num_layers` arrays
        (batch, heads, tokens, tokens), rows summing to 1. Tokens are ordered as
        the encoder sees them (class token first for 'token' models)."""
        images = keras.Input(self.inputs[0].shape[1:], name="image")
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
        if keras.backend.backend() == "tensorflow" and \
                getattr(self, "_distribute_strategy", None) is None:
            return all(layer.supports_jit for layer in self._flatten_layers())
        return super()._resolve_auto_jit_compile()

    # -- Serialisation ------------------------------------------------------------

    def get_config(self):
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "image_size": self.image_size,
            "patch_size": self.patch_size,
            "hidden_size": self.hidden_size,
            "mlp_dim": self.mlp_dim,
            "num_heads": self.num_heads,
            "num_layers": self.num_layers,
            "classifier": self.classifier,
            "representation_size": self.representation_size,
            "num_classes": self.num_classes,
            "include_top": self.include_top,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "stochastic_depth_rate": self.stochastic_depth_rate,
        }
        if self.resnet is not None:
            config["resnet"] = {"num_layers": list(self.resnet["num_layers"]),
                                "width_factor": self.resnet["width_factor"]}
        if self._dtype_arg is not None:
            config["dtype"] = keras.dtype_policies.serialize(
                keras.dtype_policies.get(self._dtype_arg))
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        for key in ("image_size", "patch_size"):
            if isinstance(config.get(key), list):
                config[key] = tuple(config[key])
        return cls(**config)


def _hybrid_grid_size(patch_embedding, image_size, feature_size):
    """A hybrid's token grid: patches of the ResNet feature map (rows, cols)."""
    ph, pw = patch_embedding.patch_size
    if feature_size[0] % ph or feature_size[1] % pw:
        raise ValueError(
            f"image size {image_size[0]}x{image_size[1]} gives a ResNet feature map of "
            f"{feature_size[0]}x{feature_size[1]}, not a multiple of the patch size "
            f"{ph}x{pw}.")
    return feature_size[0] // ph, feature_size[1] // pw


def _float32_outputs(dtype):
    """The head's policy: `dtype`, but computing in float32 where `dtype` is mixed."""
    policy = keras.dtype_policies.get(dtype) if dtype is not None else \
        keras.config.dtype_policy()
    return "float32" if policy.compute_dtype != "float32" else dtype
