"""Evaluation pads each split with weight-0 rows up to a multiple of the batch
(trainers/input_pipeline.eval_dataset); the compiled metrics must leave them out, or a
split of 37 examples in batches of 16 would be scored over 48 rows."""

import keras
import numpy as np
import pytest
import trainer_testing as testing

from keras_vit_configs import fashion_mnist
from keras_vit_trainers import input_pipeline, objectives, train_config, train_lib
from keras_vit_trainers.input_spec import InputSpec

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)
N_TEST, BATCH = 37, 16  # the last batch: 5 examples and 11 rows of padding


def _tiny_run(tmp_path):
    """(data dir with a test split of N_TEST, the config, objective, tiny model, spec)."""
    import tensorflow as tf

    data = str(tmp_path / "data")
    testing.make_tiny_data(data, n_train=16, n_test=N_TEST, per_shard=64)
    overrides = {f"model.{k}": v for k, v in testing.TINY_MODEL.items()}
    config = train_config.resolve(
        fashion_mnist.get_config(), "pretrain", {"evals": {}, **overrides}
    )
    objective = objectives.get("classification")
    plan = train_lib.Plan(BATCH, 1, 1, 1000, 1000, 0, str(tmp_path / "checkpoints"))
    strategy = tf.distribute.get_strategy()
    optimizer = train_lib.make_optimizer(config, strategy, plan.total_steps)
    model = train_lib.build(config, strategy, objective, 4, plan, None, False, optimizer)
    spec = InputSpec.from_config(config, 4, False, objective)  # one-hot labels (batch_fn)
    return data, config, objective, model, spec


def test_padding_rows_count_in_no_metric(tmp_path):
    data, config, objective, model, spec = _tiny_run(tmp_path)
    padded = input_pipeline.eval_dataset(data, spec, batch_size=BATCH, split="test")
    results = model.evaluate(padded, return_dict=True, verbose=0)
    whole = input_pipeline.eval_dataset(data, spec, batch_size=N_TEST, split="test")
    images, labels, weights = next(iter(whole))
    assert float(np.sum(weights)) == N_TEST  # one batch, no padding
    logits = np.asarray(model(images, training=False), np.float64)
    accuracy = np.mean(np.argmax(logits, -1) == np.argmax(np.asarray(labels), -1))
    assert abs(results[objective.metric_name] - accuracy) < 1e-6
    per_example = objective.loss(config, reduction=None)(labels, logits.astype("float32"))
    np.testing.assert_allclose(results[objective.loss_metric_name], np.mean(per_example), rtol=1e-5)


def test_the_evaluators_history_has_the_per_example_loss(tmp_path):
    """metrics.json's evals.<name>.history holds the loss of the split's examples, not
    Keras' "loss" over the padded rows (the same split unpadded gives the same value)."""
    import tensorflow as tf

    from keras_vit_trainers import evaluators

    data, config, objective, model, spec = _tiny_run(tmp_path)
    strategy = tf.distribute.get_strategy()
    losses = {}
    for batch in (BATCH, N_TEST):  # padded (11 rows of weight 0), then one whole batch
        context = evaluators.Context(data, spec, objective, strategy, batch, config)
        evaluator = evaluators.Classification("test", 0, context, split="test")
        evaluator.run(model, step=7)
        losses[batch] = evaluator.history[7]["loss"]
        assert losses[batch] == evaluator.scalars[7]["loss"]
    np.testing.assert_allclose(losses[BATCH], losses[N_TEST], rtol=1e-5)


def test_flip_scores_the_mean_logits_of_each_image_and_its_mirror(tmp_path):
    """`flip=True` (test-time augmentation) scores the mean of the logits of each image
    and of its left-right mirror, padding rows still left out; the loss follows the
    same logits."""
    import tensorflow as tf

    from keras_vit_trainers import evaluators

    data, config, objective, model, spec = _tiny_run(tmp_path)
    rng = np.random.default_rng(0)
    for variable in model.trainable_variables:  # the head starts at zero: logits all 0
        variable.assign(0.2 * rng.standard_normal(variable.shape).astype("float32"))
    context = evaluators.Context(data, spec, objective, tf.distribute.get_strategy(), BATCH, config)
    flipped = evaluators.Classification("test", 0, context, split="test", flip=True)
    results = flipped.run(model, step=3)
    whole = input_pipeline.eval_dataset(data, spec, batch_size=N_TEST, split="test")
    images, labels, _ = next(iter(whole))
    images = np.asarray(images)
    logits = np.asarray(model(images, training=False), np.float64)
    mirrored = np.asarray(model(images[:, :, ::-1, :], training=False), np.float64)
    assert not np.allclose(logits, mirrored, atol=1e-4)  # the model is not symmetric
    mean = (logits + mirrored) / 2
    labels = np.argmax(np.asarray(labels), -1)
    assert abs(results[objective.metric_name] - np.mean(np.argmax(mean, -1) == labels)) < 1e-6
    one_hot = np.eye(mean.shape[-1], dtype="float32")[labels]
    per_example = objective.loss(config, reduction=None)(one_hot, mean.astype("float32"))
    np.testing.assert_allclose(results["loss"], np.mean(per_example), rtol=1e-5)


def test_flip_is_refused_where_the_targets_do_not_mirror(tmp_path):
    import tensorflow as tf

    from keras_vit_trainers import evaluators

    data, config, _, _, spec = _tiny_run(tmp_path)
    masked = objectives.get("masked_patch")
    context = evaluators.Context(data, spec, masked, tf.distribute.get_strategy(), BATCH, config)
    with pytest.raises(ValueError, match="flip=True .*'masked_patch'"):
        evaluators.Classification("test", 0, context, split="test", flip=True)
