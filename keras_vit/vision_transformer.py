"""The Vision Transformer (Dosovitskiy et al., ICLR 2021) as a Keras model.

This module owns the model: the class `VisionTransformer`, building its graph
(`_build`: patch embedding, [class] token, encoder, representation, pre_logits,
head; the headless `pooling` outputs), and its config (`get_config`,
`from_config`, the registered name 'keras_vit>VisionTransformer'). The rest of
the class comes from modules of their own: the constructor's arguments,
keras.applications' included, from `keras_vit.applications_args`; the views that
share its weights (`feature_extractor`, `attention_model`, `token_grid`, ...)
from the mixin `keras_vit.views.ModelViews`; what `jit_compile="auto"` means from
the mixin `keras_vit.compilation.AutoJitCompile`.

Construction builds; loading is a separate step. `VisionTransformer.__init__`
(1) normalises its arguments, keras.applications' (`input_shape`,
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

import keras

from keras_vit import applications_args
from keras_vit import layers as vit_layers
from keras_vit.applications_args import NOT_GIVEN, has_class_token
from keras_vit.compilation import AutoJitCompile
from keras_vit.families import FAMILY_DEFAULTS, recorded_options
from keras_vit.layers.patch_embedding import PatchTokenMap
from keras_vit.layers.resnet import resnet_layers
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

    Args:
        image_size: int or (height, width), multiples of the patch size: the
            resolution of the input and of the position embeddings (for a model of
            any resolution, `input_shape=(None, None, C)`, that of its position
            embeddings alone). None: `input_shape`'s, else (built by
            `keras_vit.from_weights`) the checkpoint's resolution, else 224.
        patch_size: patch side P (on the ResNet feature map for hybrids).
        hidden_size, mlp_dim, num_heads, num_layers: Transformer sizes.
        classifier: the architecture: 'token' (class token), 'gap' (no class
            token, global average pooling), 'map' (no class token,
            multi-head attention pooling: big_vision's MAPHead, SigLIP's
            vision tower; `keras_vit.layers.MultiHeadAttentionPooling`, weights
            'MAPHead_0/...') or 'token_gap' (a class token, which the average
            pooling leaves out with any registers: timm's class_token=True
            with global_pool='avg', the MAE and BEiT fine-tunes). None: what the
            checkpoint has, else 'token'.
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
        layer_scale_init: LayerScale (`keras_vit.layers.LayerScale`, CaiT;
            DeiT III, DINOv2): a per-channel scale on both residual branches of
            every block, initialised to this value. None: the checkpoint's,
            else none.
        num_registers: register tokens (`keras_vit.layers.RegisterTokens`,
            Darcet et al. 2024; DINOv2 with registers) after the class token.
            They get no position embedding and are dropped from the feature
            maps and from 'token' and 'avg' pooling (the 'map' head attends to
            every token, as timm's). None: the checkpoint's, else 0.
        position_embedding_for_class_token: False: the position embeddings
            cover the patches alone, the class token gets none (DeiT III,
            timm's no_embed_class); True: the class token's row too (the
            authors', DINOv2). None: the checkpoint's, else True.
        pre_norm: a LayerNorm before the first block (CLIP's ln_pre; weights
            'Transformer/encoder_prenorm'). None: the checkpoint's, else False.
        quick_gelu: the MLPs' activation is OpenAI CLIP's x * sigmoid(1.702 x)
            instead of the GELU (`approximate_gelu` is then not read). None:
            the checkpoint's, else False.
        patch_embedding_bias: whether the patch embedding has a bias (CLIP's
            has none). None: the checkpoint's, else True.
        absolute_position_embedding: whether learned position embeddings are
            added (False: none; DINOv3 and RoPE-ViT place patches by `rope`
            alone). None: the checkpoint's, else True.
        rope: rotary position embeddings on the patch tokens' queries and keys
            in every block (`keras_vit.layers.RotaryPositionEmbedding`): None, a
            kind ('axial': EVA-02, RoPE-ViT-Axial; 'mixed': RoPE-ViT-Mixed, with
            learned frequencies; 'dinov3') or a dict of its settings
            (`keras_vit.layers.rotary.rope_spec`: kind, temperature,
            grid_indexing, rotate_half, reference_grid). Computed from the grid
            of each input: no resizing step at another resolution. None: the
            checkpoint's, else none.
        qk_norm: a LayerNorm on each head's queries and keys. None: the
            checkpoint's, else False.
        gated_mlp: SwiGLU MLPs, SiLU(gate) * value with a gate and a value of
            `mlp_dim` each (EVA-02). None: the checkpoint's, else False.
        mlp_norm: a LayerNorm inside each MLP before its second Dense (EVA-02's
            base and large). None: the checkpoint's, else False.
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
        layer_scale_init=None,
        num_registers=None,
        position_embedding_for_class_token=None,
        pre_norm=None,
        quick_gelu=None,
        patch_embedding_bias=None,
        absolute_position_embedding=None,
        rope=None,
        qk_norm=None,
        gated_mlp=None,
        mlp_norm=None,
        preprocessing=None,
        input_shape=None,
        input_tensor=None,
        pooling=NOT_GIVEN,
        classes=None,
        classifier_activation=None,
        channels=None,
        trainable=True,
    ):
        applications_args.refuse_weights(weights)
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
            layer_scale_init=layer_scale_init,
            num_registers=num_registers,
            position_embedding_for_class_token=position_embedding_for_class_token,
            pre_norm=pre_norm,
            quick_gelu=quick_gelu,
            patch_embedding_bias=patch_embedding_bias,
            absolute_position_embedding=absolute_position_embedding,
            rope=rope,
            qk_norm=qk_norm,
            gated_mlp=gated_mlp,
            mlp_norm=mlp_norm,
            preprocessing=preprocessing,
            input_shape=input_shape,
            input_tensor=input_tensor,
            pooling=pooling,
            classes=classes,
            classifier_activation=classifier_activation,
            channels=channels,
            trainable=trainable,
        )
        self._build(**applications_args.with_defaults(applications_args.normalised(arguments)))

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
        return applications_args.bound_arguments(cls.__init__, kwargs)

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
        layer_scale_init,
        num_registers,
        position_embedding_for_class_token,
        pre_norm,
        quick_gelu,
        patch_embedding_bias,
        absolute_position_embedding,
        rope,
        qk_norm,
        gated_mlp,
        mlp_norm,
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
            patch_size,
            hidden_size,
            name="embedding",
            dtype=dtype,
            **({} if patch_embedding_bias else {"use_bias": False}),
        )
        if input_tensor is None:
            size = (None, None) if dynamic_size else image_size
            images = inputs = keras.Input((*size, channels), name="image")
        else:
            images = input_tensor
            inputs = keras.utils.get_source_inputs(input_tensor)
            inputs = inputs[0] if len(inputs) == 1 else inputs
        resnet_stages = resnet_layers(resnet, dtype) if resnet is not None else []
        grid_size = token_grid_of(resnet_stages, patch_embedding, image_size)
        class_token = (
            vit_layers.ClassToken(name="cls", dtype=dtype) if has_class_token(classifier) else None
        )
        _, x, patch_map = embed(images, resnet_stages, patch_embedding, class_token, dynamic_size)
        encoder = vit_layers.Encoder(
            grid_size,
            num_layers,
            num_heads,
            mlp_dim,
            num_prefix_tokens=1 if has_class_token(classifier) else 0,
            dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate,
            stochastic_depth_rate=stochastic_depth_rate,
            layer_norm_epsilon=layer_norm_epsilon,
            approximate_gelu=approximate_gelu,
            final_norm=not fc_norm,
            name="Transformer",
            dtype=dtype,
            **_encoder_options(
                num_registers=num_registers,
                position_embedding_for_class_token=position_embedding_for_class_token,
                pre_norm=pre_norm,
                layer_scale_init=layer_scale_init,
                quick_gelu=quick_gelu,
                absolute_position_embedding=absolute_position_embedding,
                rope=rope,
                qk_norm=qk_norm,
                gated_mlp=gated_mlp,
                mlp_norm=mlp_norm,
            ),
        )
        x = encoder(on_grid(x, patch_map))
        prefix = encoder.num_output_prefix_tokens
        after_pooling = (
            keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="fc_norm", dtype=dtype)
            if fc_norm
            else None
        )
        if include_top or pooling is NOT_GIVEN:
            if classifier == "map":
                x = vit_layers.MultiHeadAttentionPooling(
                    num_heads,
                    mlp_dim,
                    layer_norm_epsilon=layer_norm_epsilon,
                    approximate_gelu=approximate_gelu,
                    quick_gelu=quick_gelu,
                    name="MAPHead_0",
                    dtype=dtype,
                )(x)
            else:
                if classifier != "token" and prefix:  # the mean of the patch tokens alone
                    x = keras.layers.Cropping1D((prefix, 0), name="patch_tokens", dtype=dtype)(x)
                pool = "token" if classifier == "token" else "gap"
                x = vit_layers.TokenPooling(pool, name="pool", dtype=dtype)(x)
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
            x = _pooled(x, pooling, prefix, grid_size, patch_map, dtype)
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
        self.layer_scale_init = None if layer_scale_init is None else float(layer_scale_init)
        self.num_registers = int(num_registers)
        self.position_embedding_for_class_token = bool(position_embedding_for_class_token)
        self.pre_norm = bool(pre_norm)
        self.quick_gelu = bool(quick_gelu)
        self.patch_embedding_bias = bool(patch_embedding_bias)
        self.absolute_position_embedding = bool(absolute_position_embedding)
        self.rope = rope
        self.qk_norm = bool(qk_norm)
        self.gated_mlp = bool(gated_mlp)
        self.mlp_norm = bool(mlp_norm)
        self.num_prefix_tokens = prefix
        self.preprocessing = preprocessing
        self.resnet = resnet
        self._dtype_arg = dtype
        # Layers before `input_tensor` are part of this model but not of its config.
        self._upstream_of_input = input_tensor is not None and inputs is not input_tensor

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
        # The newer options where they differ from the authors' (absent: theirs).
        config.update(recorded_options({key: getattr(self, key) for key in FAMILY_DEFAULTS}))
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


def _encoder_options(**options):
    """The Encoder's arguments for the family options that differ from the
    authors' model (none for it: its Encoder config is as before they existed)."""
    return {key: value for key, value in options.items() if value != FAMILY_DEFAULTS[key]}


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


def _serialize_activation(activation):
    if activation is None or isinstance(activation, str):
        return activation
    return keras.activations.serialize(activation)


def _float32_outputs(dtype):
    """The head's policy: `dtype`, but computing in float32 where `dtype` is mixed."""
    policy = keras.dtype_policies.get(dtype) if dtype is not None else keras.config.dtype_policy()
    return "float32" if policy.compute_dtype != "float32" else dtype
