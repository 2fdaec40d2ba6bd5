"""Fine-tuning a family's checkpoint through trainers/finetune.py --init (docs/training.md,
"Fine-tuning the families"): the model built from the config takes the file's family
options and input normalisation, its weights load exactly, freezing keeps the backbone
as the file has it, and layer decay trains SigLIP's attention pooling. Real trainer
processes on tiny timm files the test writes."""

import json
import re

import keras
import numpy as np
import pytest
import trainer_testing as testing
from tiny_models import tiny_vit

import keras_vit
from keras_vit import run_directory
from keras_vit.checkpoint import layout, save_timm
from keras_vit_cli import commands

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)

IMAGENET = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
# The trainers' tiny Transformer on their 28 px images.
SIZES = dict(image_size=28, **{k: testing.TINY_MODEL[k] for k in testing.TINY_MODEL})


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("data"))
    testing.make_tiny_data(path)
    return path


def _written(tmp_path, name, **options):
    """A tiny headless model with `options` and weights far from any initialiser's,
    written as a timm Hub folder; returns (folder, the model)."""
    model = tiny_vit(include_top=False, name=name, **{**SIZES, **options})
    rng = np.random.default_rng(5)
    model.set_weights(
        [w + rng.normal(0, 0.2, w.shape).astype(w.dtype) for w in model.get_weights()]
    )
    folder = str(tmp_path / name)
    save_timm(model, folder)
    return folder, model


def _finetune(data, run_dir, init, *flags):
    result = testing.run(
        testing.trainer_cmd(
            "finetune",
            data,
            run_dir,
            f"--init={init}",
            "--config.total_steps=8",
            "--config.checkpoint_every=8",
            "--config.learning_rate=0.1",  # steps that move what trains by far more than rounding
            *flags,
        )
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with open(run_directory.RunDirectory(run_dir).model_config) as f:
        return result.stderr, json.load(f)


def test_dinov2_with_registers_keeps_the_files_options_and_frozen_backbone(data, tmp_path):
    folder, source = _written(
        tmp_path,
        "dinov2_reg",
        num_registers=4,
        layer_scale_init=0.1,
        position_embedding_for_class_token=False,
        approximate_gelu=False,
        preprocessing=IMAGENET,
    )
    run_dir = str(tmp_path / "run")
    err, config = _finetune(
        data,
        run_dir,
        folder,
        "--config.model.classifier=token",
        "--config.freeze=backbone",
    )
    # The config's model has neither registers nor LayerScale, a class token position and
    # tanh GELU: the file's options replace them.
    assert "model options from --init:" in err and "position_embedding_for_class_token=False" in err
    assert config["position_embedding_for_class_token"] is False
    assert config["approximate_gelu"] is False and config["num_registers"] == 4
    assert config["preprocessing"] == IMAGENET  # the input pipeline normalised as DINOv2's
    tuned = keras_vit.from_weights(run_dir)
    expected, got = layout.model_params(source), layout.model_params(tuned)
    backbone = [k for k in expected if not k.startswith("head")]
    assert any("registers" in k for k in backbone) and any("LayerScale" in k for k in backbone)
    for key in backbone:  # frozen: exactly the file's
        np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
    assert np.abs(got["head/kernel"]).max() > 1e-3  # while the (zero) head trained


def test_siglip_fine_tunes_its_attention_pooling_under_layer_decay(data, tmp_path):
    folder, source = _written(tmp_path, "siglip", classifier="map")
    run_dir = str(tmp_path / "run")
    # AdamW, not the recipe's SGD: each step moves a parameter with a gradient by about the
    # learning rate, whatever the gradient's size (SGD's steps on this tiny model are
    # lr x gradients of ~1e-3, too close to the bound below to tell training apart).
    _, config = _finetune(
        data,
        run_dir,
        folder,
        "--config.model.classifier=map",
        "--config.layer_decay=0.5",
        "--config.optimizer=adamw",
        "--config.weight_decay=0.0",
    )
    assert config["classifier"] == "map"
    expected = layout.model_params(source)
    got = layout.model_params(keras_vit.from_weights(run_dir))
    # trained (a key bias has no gradient: softmax ignores what adds to every logit)
    pooling = [k for k in expected if k.startswith("MAPHead_0/") and "key/bias" not in k]
    assert len(pooling) > 10
    moved = {k: float(np.abs(got[k] - expected[k]).max()) for k in pooling}
    assert min(moved.values()) > 1e-4, moved  # far above the ~1e-6 of float32 rounding


def test_a_family_config_takes_the_sizes_of_a_smaller_file(data, tmp_path):
    # configs/families.py:dinov2 is DINOv2-B/14's sizes; a smaller file (the tiny model,
    # written for timm) gives its own sizes, and trains on a make_tfrecords directory
    # (the data's own splits: no CIFAR slice). A size set against the file is refused
    # before training with the flags that fit it.
    folder, _ = _written(
        tmp_path,
        "dinov2_small",
        num_registers=4,
        layer_scale_init=0.1,
        position_embedding_for_class_token=False,
        approximate_gelu=False,
    )

    def finetune(run_dir, *flags):
        return testing.run(
            commands.trainer_command(
                "finetune",
                "configs/families.py:dinov2",
                data,
                str(tmp_path / run_dir),
                f"--init={folder}",
                "--config.input.dataset=",  # the make_tfrecords directory, not TFDS
                "--config.image_size=28",
                "--config.model_overrides.patch_size=7",
                "--config.batch_size=16",
                "--config.total_steps=2",
                "--config.checkpoint_every=2",
                "--config.warmup_steps=1",
                "--config.evals.test.batch_size=64",
                "--config.jit_compile=False",
                *flags,
            )
        )

    fits = finetune("run")
    assert fits.returncode == 0, fits.stderr[-3000:]
    with open(run_directory.RunDirectory(str(tmp_path / "run")).model_config) as f:
        config = json.load(f)
    assert (config["hidden_size"], config["num_heads"], config["num_registers"]) == (16, 2, 4)

    refused = finetune("refused", "--config.model_overrides.hidden_size=32")
    assert refused.returncode == 2, refused.stderr[-3000:]
    line = refused.stderr.strip().splitlines()[-1]
    flags = re.findall(r"--config\.model_overrides\.\w+=\d+", line)
    assert "--config.model_overrides.hidden_size=16" in flags, line


def test_dinov3_fine_tunes_under_layer_decay_with_its_rotary_options(data, tmp_path):
    # A DINOv3-shaped file (rotary positions alone, storage tokens, LayerScale, the
    # patches' mean), written in timm's eva.py layout: the run's model takes its
    # options, and layer decay trains the rotary model's blocks.
    folder, source = _written(
        tmp_path,
        "dinov3",
        rope="dinov3",
        absolute_position_embedding=False,
        num_registers=2,
        layer_scale_init=0.1,
        approximate_gelu=False,
        classifier="token_gap",
    )
    run_dir = str(tmp_path / "run")
    err, config = _finetune(
        data,
        run_dir,
        folder,
        "--config.model.classifier=token_gap",
        "--config.layer_decay=0.75",
        "--config.optimizer=adamw",
        "--config.weight_decay=0.0",
    )
    assert "model options from --init:" in err and "rope=" in err
    assert config["rope"]["kind"] == "dinov3" and config["absolute_position_embedding"] is False
    assert config["num_registers"] == 2
    expected = layout.model_params(source)
    got = layout.model_params(keras_vit.from_weights(run_dir))
    assert "Transformer/posembed_input/pos_embedding" not in got
    query = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"
    assert float(np.abs(got[query] - expected[query]).max()) > 1e-4  # trained from the file's
