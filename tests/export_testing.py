"""Shared pieces of tests/test_export_*.py: a tiny classifier with fixed random
weights, a trainers/-style run directory, real Fashion-MNIST pixels and
TFRecords in the trainer's format; and the models whose exports must follow them
(a softmax head, 1 and 4 input channels, features and a feature map), each
exported to a SavedModel once per process."""

import atexit
import functools
import os
import shutil
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf
import warm_programs
from tiny_models import tiny_vit

import keras_vit
from keras_vit import run_directory
from keras_vit_data import fashion_mnist as fashion_mnist_data
from keras_vit_deploy import datasets, serving

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE_SIZE = 28
NUM_CLASSES = 10
CLASS_NAMES = fashion_mnist_data.CLASS_NAMES


@functools.lru_cache(maxsize=None)
def _trained_weights(seed, steps, batch_size):
    keras.utils.set_random_seed(seed)
    model = _architecture()
    images, labels = (
        array[: steps * batch_size]
        for array in fashion_mnist_data.read_split(fashion_mnist_data.FASHION_MNIST_DIR, "train")
    )
    pixels = np.repeat(images[..., None], 3, axis=-1).astype(np.float32) / 127.5 - 1.0
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(
        pixels, labels.astype(np.int64), batch_size=batch_size, epochs=1, shuffle=False, verbose=0
    )
    return [np.asarray(w) for w in model.get_weights()]


def _architecture():
    """tests/tiny_models.py's ViT on 28 px (4x4 patches of 7x7), two blocks 64 wide."""
    return tiny_vit(
        image_size=IMAGE_SIZE,
        patch_size=7,
        hidden_size=64,
        mlp_dim=128,
        num_layers=2,
        num_classes=NUM_CLASSES,
        classifier="gap",
        name="tiny_vit",
    )


def tiny_classifier(seed=0, steps=150, batch_size=128):
    """A 2-block 'gap' ViT on 28x28 images (16 patches of 7x7), trained for
    `steps` Adam steps on the first Fashion-MNIST training images (deterministic;
    trained once per process): a small model like the ones users deploy, with
    confident, image-dependent predictions."""
    model = _architecture()
    model.set_weights(_trained_weights(seed, steps, batch_size))
    return model


# Models other than a logits classifier: (keyword arguments, serving.ModelOutputs
# kind, main output, its shape per image). Tiny (16 px, 4x4 patches, 1 block) with
# random weights, so the three exports of each stay fast; together they cover a
# classifier's own softmax, 1 and 4 input channels, features and a feature map, and
# each family's layers (LayerScale, registers, attention pooling, pre-norm, QuickGELU).
OUTPUT_CASES = {
    "softmax_grey": (
        dict(input_shape=(16, 16, 1), classifier_activation="softmax"),
        "classifier",
        "probabilities",
        (5,),
    ),
    "features_4_channels": (
        dict(input_shape=(16, 16, 4), include_top=False),
        "features",
        "features",
        (16,),
    ),
    "feature_map": (
        dict(image_size=16, include_top=False, pooling=None),
        "feature_map",
        "feature_map",
        (4, 4, 16),
    ),
    # The demo's hybrid kind: the ResNet stem (7x7 / 2 StdConv, GroupNorm, max-pool)
    # alone, 1x1 patches of its 4x4 map, GAP.
    "hybrid_stem": (
        dict(
            resnet={"num_layers": (), "width_factor": 0.5},
            patch_size=1,
            classifier="gap",
            classifier_activation="softmax",
        ),
        "classifier",
        "probabilities",
        (5,),
    ),
    # The families (keras_vit.families), each with what sets it apart. DeiT III:
    # LayerScale, position embeddings for the patches alone, exact GELU; a softmax head.
    "family_deit3": (
        dict(
            layer_scale_init=0.1,
            position_embedding_for_class_token=False,
            approximate_gelu=False,
            classifier_activation="softmax",
        ),
        "classifier",
        "probabilities",
        (5,),
    ),
    # DINOv2 with registers: its dense features (the registers dropped), fed with
    # ImageNet's mean and std as its checkpoints state them.
    "family_dinov2_registers": (
        dict(
            layer_scale_init=0.1,
            num_registers=4,
            approximate_gelu=False,
            include_top=False,
            pooling=None,
            preprocessing={"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
        ),
        "feature_map",
        "feature_map",
        (4, 4, 16),
    ),
    # SigLIP: no class token, big_vision's attention pooling (MAP head).
    "family_siglip": (
        dict(classifier="map", include_top=False),
        "features",
        "features",
        (16,),
    ),
    # OpenAI CLIP: a LayerNorm before the blocks, QuickGELU, no patch-embedding bias.
    "family_clip": (
        dict(
            pre_norm=True,
            quick_gelu=True,
            patch_embedding_bias=False,
            layer_norm_epsilon=1e-5,
            include_top=False,
        ),
        "features",
        "features",
        (16,),
    ),
    # DINOv3: rotary position embeddings alone (its form: patch centres, rotate_half),
    # 4 storage tokens, LayerScale, the mean of the patches; a softmax head.
    "family_dinov3": (
        dict(
            rope="dinov3",
            absolute_position_embedding=False,
            num_registers=4,
            layer_scale_init=0.1,
            approximate_gelu=False,
            layer_norm_epsilon=1e-5,
            classifier="token_gap",
            classifier_activation="softmax",
        ),
        "classifier",
        "probabilities",
        (5,),
    ),
    # EVA-02: learned and rotary (axial, on a reference grid) positions, a SwiGLU
    # with its inner LayerNorm, fc_norm; here with RoPE-ViT's learned ('mixed')
    # frequencies and qk-norm too, so that every new block is exported.
    "family_eva02_mixed": (
        dict(
            rope="mixed",
            qk_norm=True,
            gated_mlp=True,
            mlp_norm=True,
            fc_norm=True,
            approximate_gelu=False,
            classifier="token_gap",
            include_top=False,
        ),
        "features",
        "features",
        (16,),
    ),
}


@functools.lru_cache(maxsize=None)
def output_case_model(case):
    """The OUTPUT_CASES model `case`, with fixed random weights (the zero head too)."""
    keras.utils.set_random_seed(2)
    model = tiny_vit(name=f"tiny_{case}", **OUTPUT_CASES[case][0])
    rng = np.random.default_rng(2)
    model.set_weights(
        [w + rng.normal(0, 0.3, w.shape).astype(w.dtype) for w in model.get_weights()]
    )
    return model


@functools.lru_cache(maxsize=None)
def output_case_saved_model(case):
    """`output_case_model(case)` exported with serving.export_saved_model, once
    per process (the SavedModel and TFLite tests share it); removed at exit."""
    directory = tempfile.mkdtemp(prefix=f"keras_vit_{case}_")
    atexit.register(shutil.rmtree, directory, True)
    serving.export_saved_model(output_case_model(case), directory)
    return directory


def random_pixels(count, image_size, channels, seed=0):
    """uint8 (count, H, W, C) uniform pixels."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, *image_size, channels), dtype=np.uint8)


def keras_outputs(model, pixels):
    """What the exports of `model` return for uint8/float pixels in [0, 255], through
    the model's own input normalisation: the softmax of a classifier's logits, else the
    model's own output."""
    inputs = keras_vit.preprocess_input(np.asarray(pixels, np.float32), model.preprocessing)
    values = model.predict(np.asarray(inputs), verbose=0)
    return (
        tf.nn.softmax(values, axis=-1).numpy() if serving.model_outputs(model).softmax else values
    )


def write_run_dir(model, run_dir, class_names=None, data_dir=None):
    """What a training run exports (keras_vit.run_directory): the model, and the
    data's class names and folder where given (the trainers write both; the export
    reports score a model only on data of its classes)."""
    run = run_directory.RunDirectory(run_dir)
    run.write_model(model)
    if class_names is not None:
        run.write_json(run.class_names, {"class_names": list(class_names)})
    if data_dir is not None:
        run.write_data(data_dir)
    return run_dir


def fashion_mnist(count):
    """The first `count` Fashion-MNIST test images as uint8 (N, 28, 28, 3), labels."""
    return datasets.fashion_mnist_test((IMAGE_SIZE, IMAGE_SIZE), count)


def keras_probabilities(model, pixels):
    """The Keras model's softmax on uint8/float pixels in [0, 255]."""
    logits = model.predict(np.asarray(pixels, np.float32) / 127.5 - 1.0, verbose=0)
    return tf.nn.softmax(logits, axis=-1).numpy()


def assert_probabilities_follow(produced, expected, max_delta):
    """Each of `produced` (N, classes), a reduced-precision file's probabilities, is
    within `max_delta` of the float32 model's `expected` (N, classes).

    No share of top-1 agreement is asked on top: the briefly trained tiny model has
    near-ties (on one CPU 5% of its first 200 test images had their top two within
    0.04), and how many of them change class depends on the weights its training
    reached on the CPU and on that CPU's kernels, not on the export. What the bound
    guarantees: an image changes class only where its top two are within 2 x
    `max_delta` (the new class b beats a only if p_a - p_b <= dp_b - dp_a). The
    export's agreement on 1,000 images is measured by benchmarks/, not asserted."""
    assert produced.shape == expected.shape, (produced.shape, expected.shape)
    delta = np.abs(np.asarray(produced, np.float64) - expected)
    image, label = np.unravel_index(delta.argmax(), delta.shape)
    assert delta.max() <= max_delta, (
        f"image {image}, class {label}: |delta probability| {delta.max():.3g} > {max_delta}"
    )


def example(encoded, labels):
    """A serialized tf.train.Example in tools/make_tfrecords.py's format."""
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=labels)),
            }
        )
    ).SerializeToString()


def write_tfrecord(path, images, labels):
    """Images (N, H, W, C) uint8, PNG-encoded, with their labels."""
    with tf.io.TFRecordWriter(path) as writer:
        for image, label in zip(images, labels):
            writer.write(example(tf.io.encode_png(image).numpy(), [int(label)]))
    return path


def run_tool(args, **kwargs):
    """Runs a command line (python script path relative to the repo, or a
    venv executable) in a fresh process; returns the CompletedProcess."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"}
    if args[0].endswith(".py"):
        args = [sys.executable, os.path.join(ROOT, args[0]), *args[1:]]
    return warm_programs.run(
        args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, **kwargs
    )


def venv_tool(name):
    """A console script installed next to this Python (e.g. saved_model_cli)."""
    return os.path.join(os.path.dirname(sys.executable), name)
