"""RandAugment (Cubuk et al. 2019), per image, as AugReg's big_vision runs it.

AugReg (Steiner et al. 2021, arXiv:2106.10270; settings.py) augments each image with
RandAugment; this module reimplements it with stateless TF ops only (no
tensorflow-addons, no keras_cv), so the training stream stays a pure function of
(seed, step) and a resumed run sees the batches an uninterrupted run would have
(trainers/input_pipeline.py).

Why not `keras.layers.RandAugment`: in Keras 3.15 it draws the op indices once
per call, i.e. once per *batch* (every image of a batch gets the same ops), and
draws from its own stateful `SeedGenerator`, so its stream depends on how many
times it was called, not on (seed, step). The official op draws its ops per
image, in the per-example tf.data map; so does `randaug` here.

RandAugment (`randaug(image, seed, num_layers, magnitude)`), after
big_vision/pp/autoaugment.py `distort_image_with_randaugment` (itself forked
from tensorflow/tpu's EfficientNet autoaugment.py). Per image and per layer, one
of the 16 ops below is drawn uniformly and applied, at the fixed magnitude m,
with level = m / 10. The image is first clipped to [0, 255] and truncated to
uint8, as big_vision's crop/resize hands RandAugment a uint8 image; ops work in
uint8 and the result is returned as float32 (integer values in 0..255).
Geometric ops use nearest-neighbour sampling and fill uncovered pixels with
128; a random sign (+-, 50% each) is drawn for Rotate, Shear*, Translate*.

  op            argument at magnitude m (official mapping unless marked *)
  AutoContrast  -  (per channel: min..max stretched to 0..255)
  Equalize      -  (per channel histogram equalisation, PIL's algorithm)
  Invert        -  (255 - x)
  Rotate        +-30 * level degrees about the image centre
  Posterize     keep 8 - shift bits, shift = 8 - int(4 * level); shifts
                outside 0..7 are read as TF runs the official uint8 code:
                shift 8 (m < 2.5) acts as 7 (1 bit kept), negative shifts
                (m >= 22.5) wrap to 254 and act as 7
  Solarize      invert pixels >= threshold, threshold = int(256 * level)
                modulo 256 (the official Python int is converted to uint8,
                which wraps): m=0, 10, 20 invert every pixel, m=15 inverts
                pixels >= 128
  Color         blend with the grayscale image, factor 0.1 + 1.8 * level
  Contrast      blend with the mean gray level, factor 0.1 + 1.8 * level
  Brightness    blend with black, factor 0.1 + 1.8 * level
  Sharpness     blend with PIL's SMOOTH-filtered image, factor 0.1 + 1.8 * level
                (1 = unchanged, > 1 extrapolates; results clipped to 0..255)
  ShearX/Y      shear +-0.3 * level about the top-left corner
  TranslateX/Y  * +-level * 100/224 of the image width/height, in pixels
  Cutout        * a square of side 2 * int(level * 40/224 * min(H, W)) pixels,
                centred at a uniformly random pixel, clipped, filled with 128
  SolarizeAdd   add int(110 * level) to pixels < 128, clip to 255

Differences from the official RandAugment:
  * TranslateX/Y and Cutout sizes scale with the image: the official constants
    are pixels (translate_const=100, cutout_const=40) for the 224 px crops of
    the AugReg configs; here they are fractions of the image side that give
    exactly those pixels at 224x224 (at 28 px: 12.5 px and a 10 px square at
    m=10, where the official 100 px would move everything out of the image).
  * Contrast blends with the mean gray level of the image (PIL semantics, and
    what later big_vision code, big_vision/pp/archive/autoaugment.py, computes).
    The AugReg-era big_vision/pp/autoaugment.py used sum(histogram) / 256, i.e.
    the pixel count / 256 (196 for 224x224), as the "mean".
  * Application probability: the official code draws a probability
    U(0.2, 0.8) for every op, but its RandAugment ops take no `prob` argument,
    so the drawn value is discarded and the chosen op is always applied. That
    is what `randaug` does by default (`prob_range=None`); with
    `prob_range=(0.2, 0.8)` each image also draws, per layer, its own
    probability p ~ U(0.2, 0.8) and applies the chosen op with probability p.
  * Randomness is stateless and per image: `seed` (shape [2]) is split with
    tf.random.experimental.stateless_split into one seed per layer, each into
    (op, sign, op argument, application) seeds. The op list, its order and
    fill value (128) are the official ones.
"""

import math

import tensorflow as tf

MAX_LEVEL = 10.0
REFERENCE_SIZE = 224  # the official pixel constants are for 224x224 crops
TRANSLATE_CONST = 100  # official translate_const: pixels at level 1 (m=10), 224 px
CUTOUT_CONST = 40  # official cutout_const: half the Cutout side at m=10, 224 px
FILL = 128  # official replace value of geometric ops and Cutout

OP_NAMES = (
    "AutoContrast",
    "Equalize",
    "Invert",
    "Rotate",
    "Posterize",
    "Solarize",
    "Color",
    "Contrast",
    "Brightness",
    "Sharpness",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Cutout",
    "SolarizeAdd",
)
GEOMETRIC_OPS = ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "Cutout")


# --- RandAugment ops: uint8 (H, W, 3) -> uint8 (H, W, 3) ---------------------------


def _to_uint8(image):
    """float (H, W, 3) in 0..255 -> uint8, clipped and truncated like tf.cast."""
    if image.dtype == tf.uint8:
        return image
    return tf.cast(tf.clip_by_value(tf.cast(image, tf.float32), 0.0, 255.0), tf.uint8)


def blend(degenerate, image, factor):
    """degenerate + factor * (image - degenerate), clipped to 0..255, truncated
    to uint8. factor 0: `degenerate`, 1: `image`, > 1 extrapolates."""
    if factor == 0.0:
        return degenerate
    if factor == 1.0:
        return image
    d = tf.cast(degenerate, tf.float32)
    out = d + factor * (tf.cast(image, tf.float32) - d)
    return tf.cast(tf.clip_by_value(out, 0.0, 255.0), tf.uint8)


def _size(image):
    shape = tf.shape(image)
    return shape[0], shape[1]


def _transform(image, transform):
    """Projective transform [a0, a1, a2, b0, b1, b2, 0, 0] (output (x, y) samples the
    input at (a0 x + a1 y + a2, b0 x + b1 y + b2)); nearest, filled with FILL."""
    h, w = _size(image)
    transform = tf.cast(tf.stack(transform)[None], tf.float32)
    out = tf.raw_ops.ImageProjectiveTransformV3(
        images=image[None],
        transforms=transform,
        output_shape=tf.stack([h, w]),
        fill_value=tf.constant(FILL, tf.float32),
        interpolation="NEAREST",
        fill_mode="CONSTANT",
    )
    return out[0]


def rotate(image, degrees):
    """Rotation by `degrees` about the image centre."""
    h, w = _size(image)
    rad = tf.cast(degrees, tf.float32) * (math.pi / 180.0)
    cos, sin = tf.cos(rad), tf.sin(rad)
    cx = (tf.cast(w, tf.float32) - 1.0) / 2.0
    cy = (tf.cast(h, tf.float32) - 1.0) / 2.0
    return _transform(
        image, [cos, -sin, cx - cos * cx + sin * cy, sin, cos, cy - sin * cx - cos * cy, 0.0, 0.0]
    )


def shear_x(image, level):
    """Output (x, y) samples the input at (x + level * y, y)."""
    level = tf.cast(level, tf.float32)
    return _transform(image, [1.0, level, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])


def shear_y(image, level):
    """Output (x, y) samples the input at (x, y + level * x)."""
    level = tf.cast(level, tf.float32)
    return _transform(image, [1.0, 0.0, 0.0, level, 1.0, 0.0, 0.0, 0.0])


def translate_x(image, pixels):
    """Output (x, y) samples the input at (x + pixels, y): content moves left by
    `pixels` (right for negative values)."""
    return _transform(image, [1.0, 0.0, tf.cast(pixels, tf.float32), 0.0, 1.0, 0.0, 0.0, 0.0])


def translate_y(image, pixels):
    return _transform(image, [1.0, 0.0, 0.0, 0.0, 1.0, tf.cast(pixels, tf.float32), 0.0, 0.0])


# Element-wise selection is written with slicing / arithmetic: tf.where costs
# several times more per pixel on CPU, where this runs.


def paste(image, patch, y1, x1):
    """`image` (..., H, W, C) with rows y1.. and columns x1.. replaced by `patch`
    (..., h, w, C), which must fit inside."""
    ph, pw = tf.shape(patch)[-3], tf.shape(patch)[-2]
    rows = image[..., y1 : y1 + ph, :, :]
    middle = tf.concat([rows[..., :x1, :], patch, rows[..., x1 + pw :, :]], axis=-2)
    out = tf.concat([image[..., :y1, :, :], middle, image[..., y1 + ph :, :, :]], axis=-3)
    return tf.ensure_shape(out, image.shape)


def cutout(image, pad, center):
    """Fills rows [cy - pad, cy + pad) x columns [cx - pad, cx + pad) (clipped)
    with FILL; `center` = (cy, cx) int32."""
    h, w = _size(image)
    y1, y2 = tf.maximum(center[0] - pad, 0), tf.minimum(center[0] + pad, h)
    x1, x2 = tf.maximum(center[1] - pad, 0), tf.minimum(center[1] + pad, w)
    patch = tf.fill(
        tf.stack([tf.maximum(y2 - y1, 0), tf.maximum(x2 - x1, 0), 3]),
        tf.constant(FILL, image.dtype),
    )
    return paste(image, patch, y1, x1)


def autocontrast(image):
    """Per channel, maps [min, max] linearly to [0, 255] (unchanged if min == max)."""
    x = tf.cast(image, tf.float32)
    lo = tf.reduce_min(x, axis=[0, 1])
    hi = tf.reduce_max(x, axis=[0, 1])
    stretch = hi > lo
    scale = tf.where(stretch, 255.0 / tf.maximum(hi - lo, 1.0), 1.0)
    offset = tf.where(stretch, -lo * scale, 0.0)  # identity (x * 1 + 0) if min == max
    return tf.cast(tf.clip_by_value(x * scale + offset, 0.0, 255.0), tf.uint8)


def equalize(image):
    """Per channel histogram equalisation (PIL ImageOps.equalize)."""
    values = tf.cast(image, tf.int32) + tf.constant([0, 256, 512])  # channel c: bins c*256..
    hist = tf.reshape(
        tf.math.bincount(tf.reshape(values, [-1]), minlength=768, maxlength=768), [3, 256]
    )
    # PIL: the step ignores the count of the brightest value present.
    top = tf.reduce_max(tf.reshape(tf.cast(image, tf.int32), [-1, 3]), axis=0)
    step = (tf.reduce_sum(hist, axis=1) - tf.gather(hist, top, batch_dims=1)) // 255
    lut = (tf.cumsum(hist, axis=1) + (step // 2)[:, None]) // tf.maximum(step, 1)[:, None]
    lut = tf.clip_by_value(tf.concat([tf.zeros([3, 1], tf.int32), lut[:, :-1]], 1), 0, 255)
    lut = tf.where((step > 0)[:, None], lut, tf.range(256)[None])  # step 0: unchanged
    return tf.cast(tf.gather(tf.reshape(lut, [-1]), values), tf.uint8)


def invert(image):
    return 255 - image


def posterize(image, shift):
    """Zeroes the `shift` (0..7) low bits of each value."""
    return tf.bitwise.left_shift(tf.bitwise.right_shift(image, shift), shift)


def solarize(image, threshold):
    """Inverts the values >= `threshold` (0..255)."""
    above = tf.cast(image >= tf.constant(threshold, tf.uint8), tf.uint8)
    return tf.bitwise.bitwise_xor(image, above * 255)  # x ^ 255 == 255 - x


def solarize_add(image, addition, threshold=128):
    """Adds `addition` to the values < `threshold`, clipped to 0..255."""
    x = tf.cast(image, tf.int32)
    added = x + addition * tf.cast(image < threshold, tf.int32)
    return tf.cast(tf.clip_by_value(added, 0, 255), tf.uint8)


def _grayscale(image):
    return tf.image.rgb_to_grayscale(image)  # uint8 (H, W, 1), ITU-R 601 weights


def color(image, factor):
    return blend(tf.image.grayscale_to_rgb(_grayscale(image)), image, factor)


def contrast(image, factor):
    mean = tf.reduce_mean(tf.cast(_grayscale(image), tf.float32))
    degenerate = tf.cast(tf.clip_by_value(mean, 0.0, 255.0), tf.uint8)
    return blend(tf.fill(tf.shape(image), degenerate), image, factor)


def brightness(image, factor):
    return blend(tf.zeros_like(image), image, factor)


def sharpness(image, factor):
    """Blends with PIL's SMOOTH filter (3x3, centre weight 5, /13) of the image;
    the 1-pixel border keeps its original values."""
    kernel = tf.constant([[1, 1, 1], [1, 5, 1], [1, 1, 1]], tf.float32) / 13.0
    kernel = tf.tile(kernel[:, :, None, None], [1, 1, 3, 1])
    smooth = tf.nn.depthwise_conv2d(
        tf.cast(image, tf.float32)[None], kernel, strides=[1, 1, 1, 1], padding="VALID"
    )[0]
    smooth = tf.cast(tf.clip_by_value(smooth, 0.0, 255.0), tf.uint8)
    return blend(paste(image, smooth, 1, 1), image, factor)


def _op_fn(name, magnitude):
    """fn(image uint8 (H, W, 3), sign float32 scalar +-1, seed int64 [2]) -> uint8
    image: op `name` at `magnitude` (the mapping in the module docstring)."""
    level = float(magnitude) / MAX_LEVEL
    factor = level * 1.8 + 0.1

    def rel(const):  # an official 224 px pixel constant at this level, per pixel of side
        return level * const / REFERENCE_SIZE

    def side(image, axis):
        return tf.cast(tf.shape(image)[axis], tf.float32)

    def cutout_op(image, sign, seed):
        del sign
        h, w = _size(image)
        # float64 so that the 224 px case gives exactly the official int(level * 40).
        pad = tf.cast(
            tf.floor(tf.cast(tf.minimum(h, w), tf.float64) * rel(CUTOUT_CONST) + 1e-9), tf.int32
        )
        seeds = tf.random.experimental.stateless_split(seed, 2)
        cy = tf.random.stateless_uniform([], seeds[0], 0, h, tf.int32)
        cx = tf.random.stateless_uniform([], seeds[1], 0, w, tf.int32)
        return cutout(image, pad, (cy, cx))

    shift = min((8 - int(level * 4)) % 256, 7)  # as TF runs the official uint8 code
    threshold = int(level * 256) % 256  # likewise (uint8 wrap-around)
    fns = {
        "AutoContrast": lambda x, s, _: autocontrast(x),
        "Equalize": lambda x, s, _: equalize(x),
        "Invert": lambda x, s, _: invert(x),
        "Rotate": lambda x, s, _: rotate(x, s * (level * 30.0)),
        "Posterize": lambda x, s, _: posterize(x, shift),
        "Solarize": lambda x, s, _: solarize(x, threshold),
        "Color": lambda x, s, _: color(x, factor),
        "Contrast": lambda x, s, _: contrast(x, factor),
        "Brightness": lambda x, s, _: brightness(x, factor),
        "Sharpness": lambda x, s, _: sharpness(x, factor),
        "ShearX": lambda x, s, _: shear_x(x, s * (level * 0.3)),
        "ShearY": lambda x, s, _: shear_y(x, s * (level * 0.3)),
        "TranslateX": lambda x, s, _: translate_x(x, s * rel(TRANSLATE_CONST) * side(x, 1)),
        "TranslateY": lambda x, s, _: translate_y(x, s * rel(TRANSLATE_CONST) * side(x, 0)),
        "Cutout": cutout_op,
        "SolarizeAdd": lambda x, s, _: solarize_add(x, int(level * 110)),
    }
    if name not in fns:
        raise ValueError(f"unknown RandAugment op {name!r}: expected one of {', '.join(OP_NAMES)}")
    return fns[name]


def _random_sign(seed):
    return tf.where(tf.random.stateless_uniform([], seed) < 0.5, -1.0, 1.0)


def _layer_draws(layer_seed, prob_range):
    """(op index int32, sign float32, op-argument seed, apply bool) for one layer."""
    op_seed, sign_seed, arg_seed, prob_seed = tf.unstack(
        tf.random.experimental.stateless_split(layer_seed, 4)
    )
    op = tf.random.stateless_uniform([], op_seed, 0, len(OP_NAMES), tf.int32)
    if prob_range is None:
        apply = tf.constant(True)
    else:
        lo, hi = prob_range
        u = tf.random.stateless_uniform([2], prob_seed)
        apply = u[1] < lo + (hi - lo) * u[0]
    return op, _random_sign(sign_seed), arg_seed, apply


def sample_ops(seed, num_layers):
    """The op indices (into OP_NAMES) `randaug` applies for this seed: int32 [num_layers]."""
    layer_seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num_layers)
    return tf.stack([_layer_draws(layer_seeds[i], None)[0] for i in range(num_layers)])


def apply_op(image, name, magnitude, seed):
    """One RandAugment op at magnitude m, the function `randaug` applies when it
    draws `name` (the sign and the Cutout centre are drawn here from `seed`).

    Args:
      image: (H, W, 3) float in 0..255 (or uint8).
      name: one of OP_NAMES.
      magnitude: the RandAugment magnitude m (0..30 in practice).
      seed: int [2]; draws the sign (Rotate/Shear/Translate) and the Cutout centre.
    Returns:
      (H, W, 3) float32 with integer values in 0..255.
    """
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2)
    out = _op_fn(name, magnitude)(_to_uint8(image), _random_sign(seeds[0]), seeds[1])
    return tf.cast(out, tf.float32)


def randaug(image, seed, num_layers=2, magnitude=10, prob_range=None):
    """RandAugment of one image with its own ops (big_vision `randaug(n, m)`).

    Args:
      image: (H, W, 3) float in 0..255 (any size; or uint8).
      seed: int64 [2], this image's seed (a pure function of (seed, epoch, index)
        in the input pipeline).
      num_layers: ops applied in sequence (N).
      magnitude: shared magnitude (M).
      prob_range: None (the official behaviour: the drawn op is always applied) or
        (lo, hi): per layer the image draws p ~ U(lo, hi) and applies the op with
        probability p.
    Returns:
      (H, W, 3) float32 with integer values in 0..255.
    """
    x = _to_uint8(image)
    if not num_layers:
        return tf.cast(x, tf.float32)
    fns = [_op_fn(name, magnitude) for name in OP_NAMES]
    layer_seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num_layers)
    for i in range(num_layers):
        op, sign, arg_seed, apply = _layer_draws(layer_seeds[i], prob_range)

        def run(x=x, op=op, sign=sign, arg_seed=arg_seed):
            branches = [lambda f=f: f(x, sign, arg_seed) for f in fns]
            return tf.switch_case(op, branches)

        if prob_range is None:
            x = run()
        else:
            x = tf.cond(apply, run, lambda x=x: x)
        x = tf.ensure_shape(x, image.shape)
    return tf.cast(x, tf.float32)
