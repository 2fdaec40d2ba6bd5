"""trainers/keras_workarounds.py: the version fence, and for each workaround a check that
the Keras behaviour it answers is still there (these fail when a Keras upgrade makes a
workaround unnecessary: then remove it). That each workaround works is tested where it
is used: tests/test_train_strategies.py (clipping, multi-worker fit, accumulation under
MirroredStrategy) and tests/test_grad_accum.py."""

import textwrap

import keras
import pytest
import trainer_testing as testing

from keras_vit_trainers import keras_workarounds


def test_keras_version_check(monkeypatch):
    keras_workarounds.check_keras_version()  # the installed Keras is a tested one (CI: strict)
    monkeypatch.delenv("CI", raising=False)
    with pytest.warns(UserWarning, match="not 9.1.0"):
        keras_workarounds.check_keras_version("9.1.0")
    with pytest.raises(RuntimeError, match="check its workarounds"):
        keras_workarounds.check_keras_version("9.1.0", strict=True)
    monkeypatch.setenv("CI", "true")  # CI fails on an untested Keras
    with pytest.raises(RuntimeError, match="not 9.1.0"):
        keras_workarounds.check_keras_version("9.1.0")


# One process with two logical CPUs (set before TensorFlow starts), both Keras behaviours.
STILL_NEEDED = textwrap.dedent(
    """
    import numpy as np
    import tensorflow as tf
    from keras_vit_trainers import strategy as strategy_lib
    strategy_lib.split_cpu(2)
    import keras

    def model():
        keras.utils.set_random_seed(0)
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, use_bias=False)])

    # Replica 0 gets small gradients, replica 1 large ones: clipping each replica's
    # partial gradient differs from clipping their sum.
    x = np.concatenate([np.full((2, 4), 0.01), np.full((2, 4), 10.0)]).astype("float32")
    y = np.zeros((4, 1), "float32")

    def trained(strategy, **optimizer):
        with strategy.scope():
            m = model()
            m.compile(keras.optimizers.SGD(1.0, **optimizer), "mse")
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
        m.fit(ds, epochs=1, verbose=0)
        return m.get_weights()[0]

    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    one = trained(tf.distribute.get_strategy(), global_clipnorm=1.0)
    two = trained(mirrored, global_clipnorm=1.0)
    print("CLIP_PER_REPLICA", not np.allclose(one, two, rtol=1e-4))

    try:
        trained(mirrored, gradient_accumulation_steps=2)
        print("ACCUM_FAILS False")
    except Exception as e:  # Keras 3.15: merge_call inside the update's cond
        print("ACCUM_FAILS", "merge_call" in str(e))
    """
)


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="works around the TensorFlow trainer"
)
def test_the_keras_behaviours_worked_around_are_still_there():
    r = testing.run([testing.PY, "-c", STILL_NEEDED], timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    # 1. Keras' global_clipnorm clips each replica's gradient before the all-reduce
    #    (optimizers.py clips after it: ClipAfterAllReduce).
    assert "CLIP_PER_REPLICA True" in r.stdout, r.stdout + r.stderr[-2000:]
    # 3. Keras' own gradient accumulation fails under MirroredStrategy
    #    (accumulate_gradients replaces it).
    assert "ACCUM_FAILS True" in r.stdout, r.stdout + r.stderr[-2000:]
