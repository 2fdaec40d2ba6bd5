"""Masked patch prediction: self-supervised pre-training of a ViT (paper §4.6, App. B.1.2).

    vit = keras_vit.VisionTransformer(image_size=224, ...)      # any plain ViT
    model = MaskedPatchPredictor(vit, target="rgb")             # shares vit's weights
    model.compile("adam", loss=MaskedPatchLoss(), metrics=[masked_patch_accuracy])
    model.fit(images, mean_colour_targets(images, model.image_patch_size), ...)
    vit.save_weights(...)                                       # the pre-trained ViT

Half of the patch embeddings are corrupted (`layers.PatchCorruption`: 80% [mask]
embedding, 10% a random other patch, 10% unchanged) and a per-token Dense head
predicts, from each corrupted position's output token, the patch's mean colour
quantised to 3 bits per channel:

  target 'rgb':       the mean R, G and B of the patch (in 0..255), each reduced to
                      its 3 most significant bits, floor(mean / 32), combined as
                      R * 64 + G * 8 + B: 512 classes (the paper);
  target 'intensity': the mean over the patch and the three channels, floor(mean /
                      32): 8 classes. For grayscale data (R = G = B, e.g.
                      Fashion-MNIST decoded to 3 channels) this is the same
                      information as 'rgb', whose other 504 classes never occur.

The loss is the cross-entropy at the corrupted positions only, averaged per
image; the uncorrupted positions do not contribute. The model's single output
packs the logits and the corruption mask (see `MaskedPatchHead`), so Keras'
`compile`/`fit`/`evaluate` and their sample weights work unchanged.
"""

import keras
from keras import ops

from keras_vit.applications_args import has_class_token
from keras_vit.layers.patch_corruption import PatchCorruption
from keras_vit.layers.patch_embedding import to_pair
from keras_vit.layers.resnet import resnet_stride
from keras_vit.preprocessing import PIXEL_SCALE

TARGETS = {"rgb": 3, "intensity": 1}  # channels quantised
# Added (in 8-bit units) before taking the floor, so a mean that is exactly on a
# bin edge (e.g. 32.0) is not pushed into the bin below by float32 rounding.
# Smaller than the smallest step of a mean of integer pixels over a patch of up to
# 32x32 pixels (and 3 channels): 1 / 3072.
_EDGE_TOLERANCE = 1e-4


def num_target_classes(target="rgb", bits=3):
    """Number of classes of a mean-colour target: 2**(bits * channels)."""
    _check_target(target, bits)
    return 2 ** (bits * TARGETS[target])


def mean_colour_targets(images, patch_size, target="rgb", bits=3):
    """The class of each patch's quantised mean colour.

    Args:
        images: (batch, height, width, 3), or (batch, height, width, 1) for
            'intensity', in [-1, 1] (`keras_vit.preprocess_input`, pixel = (x + 1) *
            `preprocessing.PIXEL_SCALE`), height and width multiples of the patch size.
        patch_size: int or (height, width) of a patch in pixels.
        target: 'rgb' (512 classes for 3 bits) or 'intensity' (8 classes).
        bits: bits kept per channel (the `bits` most significant of the 8-bit mean).
    Returns:
        (batch, rows * cols) int32 classes, patches in the patch embedding's
        row-major order; for 'rgb' class = R * 2**(2 bits) + G * 2**bits + B.
    """
    _check_target(target, bits)
    ph, pw = to_pair(patch_size, "patch_size")
    shape = images.shape
    accepted = (3,) if target == "rgb" else (1, 3)
    if len(shape) != 4 or shape[-1] not in accepted:
        raise ValueError(
            f"images must be (batch, height, width, {' or '.join(map(str, accepted))}) for "
            f"target={target!r}, got shape {tuple(shape)}."
        )
    depth = shape[-1]
    height, width = shape[1], shape[2]
    if height % ph or width % pw:
        raise ValueError(
            f"image size {height}x{width} is not a multiple of the patch size {ph}x{pw}."
        )
    rows, cols = height // ph, width // pw
    x = ops.reshape(ops.cast(images, "float32"), (-1, rows, ph, cols, pw, depth))
    means = ops.mean(x, axis=(2, 4))  # (batch, rows, cols, channels)
    if target == "intensity":
        means = ops.mean(means, axis=-1, keepdims=True)
    pixels = (means + 1.0) * PIXEL_SCALE
    levels = 2**bits
    quantised = ops.clip(ops.floor((pixels + _EDGE_TOLERANCE) * (levels / 256.0)), 0, levels - 1)
    channels = TARGETS[target]
    weights = ops.convert_to_tensor(
        [levels ** (channels - 1 - c) for c in range(channels)], "float32"
    )
    classes = ops.sum(quantised * weights, axis=-1)
    return ops.cast(ops.reshape(classes, (-1, rows * cols)), "int32")


def _check_target(target, bits):
    if target not in TARGETS:
        raise ValueError(f"target must be one of {sorted(TARGETS)}, got {target!r}.")
    if not 1 <= int(bits) <= 8:
        raise ValueError(f"bits must be in 1..8, got {bits}.")


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedPatchHead(keras.layers.Layer):
    """Per-token classifier over the patch tokens, packed with the corruption mask.

    Inputs: `tokens` (batch, prefix + patches, hidden) from the encoder and
    `corrupted` (batch, patches), 1.0 at the corrupted positions.
    Output: (batch, patches, num_classes + 1): [..., :num_classes] the logits of
    each patch token (the class token, if any, is dropped), [..., num_classes]
    the corruption mask; `split_predictions` unpacks it.

    Weights: `dense` kernel (hidden, num_classes), zeros as the ViT head, bias zeros.
    """

    def __init__(self, num_classes, num_prefix_tokens=0, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = int(num_classes)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.dense = keras.layers.Dense(
            self.num_classes, kernel_initializer="zeros", name="dense", dtype=self.dtype_policy
        )

    def build(self, tokens_shape, corrupted_shape=None):
        self.dense.build(tokens_shape)

    def call(self, tokens, corrupted):
        logits = self.dense(tokens[:, self.num_prefix_tokens :])
        mask = ops.expand_dims(ops.cast(corrupted, logits.dtype), -1)
        return ops.concatenate([logits, mask], axis=-1)

    def compute_output_shape(self, tokens_shape, corrupted_shape=None):
        return (
            tokens_shape[0],
            corrupted_shape[1] if corrupted_shape else None,
            self.num_classes + 1,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {"num_classes": self.num_classes, "num_prefix_tokens": self.num_prefix_tokens}
        )
        return config


def split_predictions(predictions):
    """(batch, patches, classes + 1) -> logits (batch, patches, classes) and the
    corruption mask (batch, patches) as float32."""
    return predictions[..., :-1], ops.cast(predictions[..., -1], "float32")


def _masked_mean(values, mask):
    """Per-image mean of (batch, patches) `values` over the positions where mask is 1."""
    return ops.sum(values * mask, axis=-1) / ops.maximum(ops.sum(mask, axis=-1), 1.0)


def masked_patch_cross_entropy(targets, predictions):
    """Per-image softmax cross-entropy averaged over the corrupted patches.

    targets: (batch, patches) int classes; predictions: the packed
    `MaskedPatchPredictor` output. Returns (batch,).
    """
    logits, mask = split_predictions(predictions)
    ce = ops.sparse_categorical_crossentropy(
        ops.cast(targets, "int32"), ops.cast(logits, "float32"), from_logits=True
    )
    return _masked_mean(ce, mask)


@keras.saving.register_keras_serializable(package="keras_vit")
def masked_patch_accuracy(targets, predictions):
    """Per-image fraction of the corrupted patches whose class is predicted (batch,)."""
    logits, mask = split_predictions(predictions)
    hits = ops.cast(ops.equal(ops.argmax(logits, axis=-1), ops.cast(targets, "int32")), "float32")
    return _masked_mean(hits, mask)


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedPatchLoss(keras.losses.Loss):
    """`masked_patch_cross_entropy` as a Keras loss (per image, then reduced)."""

    def __init__(self, name="masked_patch_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        return masked_patch_cross_entropy(y_true, y_pred)


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedPatchPredictor(keras.Model):
    """A ViT with patch corruption and a per-token head, for masked patch prediction.

    Built on the layers of `backbone` (a `keras_vit.VisionTransformer`), so training
    this model trains the backbone; the [mask] embedding ('patch_corruption') and
    the per-token head ('masked_patch_head') belong to this model only. The
    backbone's pooling, pre_logits and head are not used (and not trained).

    Graph: image -> [ResNet] -> 'embedding' -> 'patch_corruption' -> ['cls'] ->
    'Transformer' -> 'masked_patch_head'.

    Input: images (batch, height, width, 3) in [-1, 1], the backbone's size.
    Output: (batch, patches, num_classes + 1): per-patch logits and, in the last
    channel, the corruption mask (`split_predictions`). Targets for `fit`:
    `mean_colour_targets(images, model.image_patch_size, target, bits)`.

    Args:
        backbone: the `keras_vit.VisionTransformer` to pre-train.
        target: 'rgb' (3-bit mean colour, 512 classes) or 'intensity' (3-bit mean
            intensity, 8 classes; for grayscale data).
        bits: bits per channel of the target.
        corruption_rate, mask_prob, random_prob, seed: `PatchCorruption`'s.
    """

    def __init__(
        self,
        backbone,
        target="rgb",
        bits=3,
        corruption_rate=0.5,
        mask_prob=0.8,
        random_prob=0.1,
        seed=None,
        name="masked_patch_predictor",
        **kwargs,
    ):
        num_classes = num_target_classes(target, bits)
        if backbone.dynamic_size:
            raise ValueError(
                "masked patch prediction needs a backbone of one resolution (input_shape "
                "with height and width), not an any-size one (input_shape=(None, None, C))."
            )
        if target == "rgb" and backbone.channels != 3:
            raise ValueError(
                f"target='rgb' needs RGB images; this backbone takes {backbone.channels} "
                "channel(s): use target='intensity'."
            )
        images = keras.Input(backbone.inputs[0].shape[1:], name="image")
        x = images
        for layer in backbone.resnet_layers():
            x = layer(x)
        x = backbone.get_layer("embedding")(x)
        corruption = PatchCorruption(
            corruption_rate,
            mask_prob,
            random_prob,
            seed=seed,
            name="patch_corruption",
            dtype=backbone.dtype_policy,
        )
        x, corrupted = corruption(x)
        prefix = 0
        if has_class_token(backbone.classifier):
            x = backbone.get_layer("cls")(x)
            prefix = 1
        x = backbone.get_layer("Transformer")(x)
        outputs = MaskedPatchHead(
            num_classes, prefix, name="masked_patch_head", dtype=backbone.dtype_policy
        )(x, corrupted)
        super().__init__(inputs=images, outputs=outputs, name=name, **kwargs)
        # Not tracked as a sub-layer: the layers used above are this model's own
        # already, and tracking the whole backbone would add its unused pooling /
        # pre_logits / head weights to `trainable_variables` (no gradient).
        object.__setattr__(self, "_backbone", backbone)
        self.target = target
        self.bits = int(bits)
        self.num_classes = num_classes
        self.corruption = corruption

    @property
    def backbone(self):
        """The plain ViT being pre-trained (shares this model's weights)."""
        return self._backbone

    @property
    def image_patch_size(self):
        """The patch size in image pixels (a hybrid's patch is patch_size x its
        ResNet's stride)."""
        ph, pw = self.backbone.patch_size
        stride = resnet_stride(self.backbone.resnet) if self.backbone.resnet is not None else 1
        return ph * stride, pw * stride

    def targets(self, images):
        """`mean_colour_targets` of `images` for this model: (batch, patches) int32."""
        return mean_colour_targets(images, self.image_patch_size, self.target, self.bits)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "target": self.target,
            "bits": self.bits,
            "corruption_rate": self.corruption.corruption_rate,
            "mask_prob": self.corruption.mask_prob,
            "random_prob": self.corruption.random_prob,
            "seed": self.corruption.seed,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)
