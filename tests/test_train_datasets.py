"""The trainers read other projects' datasets as they are: a TFDS dataset by name (with
TFDS's slicing splits for training and validation, kill -9 and an exact resume, the
builder's class names in the export) and ImageNet-layout shards without a manifest."""

import json
import os

import keras
import numpy as np
import pytest
import trainer_testing as testing
from dataset_testing import TFDS_CLASSES, TFDS_NAME, prepare_tfds, write_imagenet_shards

from keras_vit_cli import commands

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)

STEPS = [
    "--strategy=default",
    "--config.total_steps=20",
    "--config.checkpoint_every=10",
    "--config.warmup_steps=5",
    "--config.input.shuffle_buffer=32",
]


def _tfds_cmd(tfds_dir, model_dir, *extra):
    """pretrain.py on the TFDS dataset by name: no --data_dir, train on the first 75%
    of train, validate on the rest (TFDS's slicing syntax)."""
    return commands.trainer_command(
        "pretrain",
        "configs/fashion_mnist.py",
        None,
        model_dir,
        *testing.TINY,
        f"--config.input.dataset=tfds:{TFDS_NAME}",
        f"--config.input.tfds_data_dir={tfds_dir}",
        "--config.train_split=train[:75%]",
        "--config.evals.validation.split=train[75%:]",
        *STEPS,
        *extra,
    )


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("tfds")
    prepare_tfds(data_dir, num_shards=3)
    return str(data_dir)


def test_tfds_by_name_trains_validates_on_a_slice_resumes_exactly_and_exports_its_names(
    tfds_dir, tmp_path
):
    ref_dir, run_dir = str(tmp_path / "ref"), str(tmp_path / "run")
    ref = testing.run(_tfds_cmd(tfds_dir, ref_dir))
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert f"data: tfds:{TFDS_NAME}" in ref.stderr
    metrics = json.loads(open(os.path.join(ref_dir, "metrics.json")).read())
    assert metrics["step"] == 20 and 0 <= metrics["validation_accuracy"] <= 1
    assert {int(step) for step in metrics["evals"]["validation"]["history"]} == {10, 20}
    with open(os.path.join(ref_dir, "class_names.json")) as f:
        assert json.load(f) == {"class_names": TFDS_CLASSES}

    cmd = _tfds_cmd(tfds_dir, run_dir)
    testing.kill_after_first_checkpoint(cmd, run_dir)  # SIGKILL: no final checkpoint
    resumed = testing.run(cmd)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from step" in resumed.stderr
    w, w_ref = testing.load_weights(run_dir), testing.load_weights(ref_dir)
    assert w.keys() == w_ref.keys()
    for k in w:
        np.testing.assert_allclose(w[k], w_ref[k], rtol=1e-6, atol=1e-7, err_msg=k)

    exported = str(tmp_path / "exported")
    export = testing.run(
        [testing.PY, "tools/export_savedmodel.py", f"--run_dir={run_dir}", f"--output={exported}"]
    )
    assert export.returncode == 0, export.stderr[-3000:]
    import tensorflow as tf

    loaded = tf.saved_model.load(exported)
    png = tf.io.encode_png(tf.zeros([28, 28, 3], tf.uint8))
    names = loaded.signatures["serving_default"](tf.reshape(png, [1]))["top_k_names"]
    assert {n.decode() for n in names.numpy().ravel()} <= set(TFDS_CLASSES)


def test_imagenet_layout_shards_without_a_manifest_train(tmp_path):
    data = str(tmp_path / "imagenet")
    write_imagenet_shards(data, "train", 64, 4, seed=0)
    write_imagenet_shards(data, "validation", 16, 2, seed=1)
    run_dir = str(tmp_path / "run")
    extra = [
        "--config.total_steps=8",
        "--config.checkpoint_every=4",
        "--config.evals.test.every=-1",
    ]
    unnamed = testing.run(testing.trainer_cmd("pretrain", data, run_dir, *extra))
    assert unnamed.returncode == 2
    assert "--config.input.dataset=imagenet_records" in unnamed.stderr.strip().splitlines()[-1]
    assert not os.path.exists(os.path.join(run_dir, "metrics.json"))
    named = testing.run(
        testing.trainer_cmd(
            "pretrain",
            data,
            run_dir,
            *extra,
            "--config.input.dataset=imagenet_records",
            "--config.input.label_offset=1",
            "--config.num_classes=4",
        )
    )
    assert named.returncode == 0, named.stderr[-3000:]
    metrics = json.loads(open(os.path.join(run_dir, "metrics.json")).read())
    assert metrics["step"] == 8 and "validation_accuracy" in metrics
    assert not os.path.exists(os.path.join(run_dir, "class_names.json"))  # the shards name none
