"""Views of a built `VisionTransformer` that share its weights: what its layers
compute on the way to the output.

This module owns the model's inspection methods, in the mixin `ModelViews`: the
token grid (`token_grid`), the encoder's input (`tokens`), a hybrid's ResNet
(`resnet_layers`), the intermediate maps of encoder blocks and ResNet stages
(`feature_extractor`, as timm's `forward_intermediates`) and the attention weights
of every block (`attention_model`, `attention_weights`: what `keras_vit.inspect`
reads for the paper's §4.5). It also owns the embedding path that the views and
the model's own graph share, so that both are the same computation: `embed`
(images to the tokens the encoder reads), `on_grid` (what carries the token grid
of a dynamic-size model) and `token_grid_of` (the grid of a given image size).

`keras_vit.vision_transformer` imports this module, never the other way: the mixin
reads the model through its layers (`get_layer`) and attributes (`num_layers`,
`resnet`, `classifier`, `grid_size`, `dynamic_size`, `image_size`, `channels`).
"""

import weakref

import keras

from keras_vit.applications_args import has_class_token
from keras_vit.layers.patch_embedding import PatchTokenMap

# Attention models by ViT, outside Keras' attribute tracking (they share its layers).
_ATTENTION_MODELS = weakref.WeakKeyDictionary()


class ModelViews:
    """`VisionTransformer`'s views: models and arrays from its own layers and
    weights. A mixin of `keras.Model` subclasses with `VisionTransformer`'s layer
    names and attributes."""

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
        return token_grid_of(self.resnet_layers(), self.get_layer("embedding"), tuple(image_size))

    def attention_model(self):
        """A `keras.Model` sharing this model's weights that maps images to the
        attention weights of every encoder block: a list of `num_layers` arrays
        (batch, heads, tokens, tokens), rows summing to 1. Tokens are ordered as
        the encoder sees them (class token first for 'token' models). Its input
        has this model's size (any size for a `dynamic_size` model)."""
        images = self._image_input()
        encoder = self._encoder_for_views()
        _, x, patch_map = self._embedded(images)
        grid = encoder.block_arguments(on_grid(x, patch_map))  # a rotary embedding's grid
        x = encoder.embedded(on_grid(x, patch_map))
        weights = []
        for block in encoder.blocks:  # block by block: each node has flat outputs
            x, block_weights = block(x, return_attention_weights=True, **grid)
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
            encoder = self._encoder_for_views()
            grid = encoder.block_arguments(on_grid(tokens, patch_map))
            x = encoder.embedded(on_grid(tokens, patch_map))
            for k, block in enumerate(encoder.blocks[: block_numbers[-1]], 1):
                x = block(x, **grid)
                if k in block_numbers:
                    to_map = PatchTokenMap(
                        None if patch_map is not None else self.grid_size,
                        encoder.num_output_prefix_tokens,  # class token, registers
                        name=f"block{k}_map",
                        dtype=self._dtype_arg,
                    )
                    y = encoder.encoder_norm(x) if norm and encoder.encoder_norm else x
                    outputs[f"block{k}"] = to_map(on_grid(y, patch_map))
        return images, outputs

    def _encoder_for_views(self):
        """The encoder, each of its blocks given a first symbolic node with the
        attention weights among its outputs. Keras' Function counts a layer's outputs
        on its first node, so a block first called for its tokens alone (by
        `feature_extractor`) could not later give `attention_model` its weights; a
        subclassed model's own call leaves its blocks without nodes."""
        encoder = self.get_layer("Transformer")
        for block in encoder.blocks:
            # A layer's public `output` is that of its first symbolic call; Keras raises
            # AttributeError for a layer never called.
            if not hasattr(block, "output"):
                block(keras.Input((None, self.hidden_size)), return_attention_weights=True)
        return encoder

    def _image_input(self):
        """A fresh image input of this model's size ((None, None) when dynamic)."""
        size = (None, None) if self.dynamic_size else self.image_size
        return keras.Input((*size, self.channels), name="image")

    def _embedded(self, images):
        """`embed` (the encoder's input, and what carries it there) with this model's
        layers."""
        class_token = self.get_layer("cls") if has_class_token(self.classifier) else None
        return embed(
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


def embed(images, resnet, patch_embedding, class_token, dynamic_size):
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


def on_grid(tokens, patch_map):
    """The input of a layer that reads the token grid (position embedding,
    encoder, `PatchTokenMap`): the tokens alone for a fixed grid, else the pair
    (tokens, patch_map), whose shape gives the grid of each batch."""
    return tokens if patch_map is None else (tokens, patch_map)


def token_grid_of(resnet, patch_embedding, image_size):
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
