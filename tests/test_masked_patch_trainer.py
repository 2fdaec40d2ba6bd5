"""The masked_patch objective in the trainers: pre-train, export the plain ViT,
fine-tune loader, `config.train_examples`."""

import json
import math
import os

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import masked_patch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import trainer_testing as testing  # noqa: E402

from keras_vit_configs import fashion_mnist, fashion_mnist_masked_patch  # noqa: E402
from keras_vit_trainers import (  # noqa: E402
    checkpointing,
    input_pipeline,
    objectives,
    train_config,
    train_lib,
)
from keras_vit_trainers.input_spec import InputSpec  # noqa: E402

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)


def _h5_arrays(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda name, obj: (
                out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        )
    return out


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("data"))
    testing.make_tiny_data(path, n_train=64, n_test=32, per_shard=32)
    return path


def test_pretrain_exports_the_plain_vit_and_finetune_loads_it(data_dir, tmp_path):
    ssl = str(tmp_path / "ssl")
    config = train_config.resolve(
        testing.tiny_config(fashion_mnist_masked_patch.get_config()), "pretrain"
    )
    metrics = train_lib.run(
        config, data_dir=data_dir, model_dir=ssl, strategy=tf.distribute.get_strategy()
    )
    assert metrics["step"] == 2
    assert 0.0 <= metrics["test_accuracy"] <= 1.0
    assert math.isfinite(metrics["test_loss"]) and metrics["test_loss"] < math.log(8) + 0.1

    # The pre-training state holds the pre-training model, the [mask] embedding and the
    # per-token head included ...
    objective = objectives.get("masked_patch")
    ssl_model = objective.build_model(train_lib.model_factory(config), config, 4)
    paths = [v.path for v in ssl_model.variables]
    assert any("patch_corruption" in p for p in paths), paths
    assert any("masked_patch_head" in p for p in paths), paths
    assert checkpointing.restore_model(ssl_model, os.path.join(ssl, "checkpoints")) == 2
    # ... the export is an ordinary ViT without them.
    exported = _h5_arrays(os.path.join(ssl, "model.weights.h5"))
    assert not any("patch_corruption" in k or "masked_patch_head" in k for k in exported)
    with open(os.path.join(ssl, "model_config.json")) as f:
        model_config = json.load(f)
    assert model_config["num_classes"] == 4 and model_config["include_top"]
    plain = keras_vit.VisionTransformer.from_config(model_config)
    assert len(exported) == len(plain.weights)

    # The fine-tune loader (finetune.py --init=SSL) builds that ViT and loads it.
    ft_config = train_config.resolve(testing.tiny_config(fashion_mnist.get_config()), "finetune")
    make_model = train_lib.model_factory(ft_config, init=ssl)
    finetune_model = make_model(num_classes=4)
    train_lib.load_init(finetune_model, ssl)

    # Every shared weight equals the pre-trained one (restored from the checkpoint).
    for name in ("embedding", "Transformer"):
        got = finetune_model.get_layer(name).get_weights()
        want = ssl_model.get_layer(name).get_weights()
        assert len(got) == len(want) > 0
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    # The classification head was not trained by the pre-training: still zeros.
    assert not finetune_model.get_layer("head").get_weights()[0].any()
    assert "patch_corruption" not in {layer.name for layer in finetune_model.layers}


def test_map_batch_ignores_labels_and_gives_mean_colour_targets(rng):
    config = train_config.resolve(
        testing.tiny_config(fashion_mnist_masked_patch.get_config()), "pretrain"
    )
    objective = objectives.get("masked_patch")
    model = objective.build_model(train_lib.model_factory(config), config, 10)
    assert model.num_classes == 8 and model.image_patch_size == (7, 7)
    images = tf.constant(rng.uniform(-1, 1, (2, 28, 28, 3)).astype("float32"))
    x, y = objective.map_batch(config, 10)(images, tf.constant([3, 5]))
    np.testing.assert_array_equal(x.numpy(), images.numpy())
    expected = masked_patch.mean_colour_targets(images, 7, "intensity")
    np.testing.assert_array_equal(y.numpy(), keras.ops.convert_to_numpy(expected))


def test_unknown_masked_patch_option_is_an_error():
    config = fashion_mnist_masked_patch.get_config()
    config.masked_patch.colours = 3
    with pytest.raises(ValueError, match="config.masked_patch: unknown key"):
        objectives.get("masked_patch").build_model(lambda **kw: None, config, 10)


def test_train_examples_limits_the_training_set_to_its_first_records(data_dir):
    spec = InputSpec(
        image_size=28, crop="none", flip=False, num_classes=4, shuffle_buffer=64, max_examples=40
    )
    everything = input_pipeline.eval_dataset(data_dir, spec, batch_size=64, split="train")
    first = next(iter(everything))[0].numpy()[:40]  # the first 40 records, in order
    stream = input_pipeline.train_dataset(data_dir, spec, batch_size=8)
    seen = np.concatenate([x.numpy() for x, _ in stream.take(10)])  # two epochs
    key = lambda a: {img.tobytes() for img in a}  # noqa: E731
    assert key(seen[:40]) == key(first) == key(seen[40:])
    info = input_pipeline.first_examples(input_pipeline.get_split(data_dir, "train"), 40)
    assert info.counts == [32, 8] and info.num_examples == 40
    with pytest.raises(
        input_pipeline.DataError, match="train_examples=65: split 'train' has only 64"
    ):
        input_pipeline.first_examples(input_pipeline.get_split(data_dir, "train"), 65)
