import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def pytest_configure(config):
    import keras

    keras.utils.set_random_seed(0)


# The modules that take longest (trainers, converters and other backends in child
# processes), first: with `make test`'s two workers (one module each at a time), the
# long ones then overlap the many short ones instead of ending the run on one worker.
LONG_MODULES = (
    "test_export_tflite",
    "test_export_onnx",
    "test_train_strategies",
    "test_export_savedmodel",
    "test_fidelity",
    "test_console",
    "test_layer_conformance",
    "test_train_resume",
    "test_dynamic_resolution",
)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.module.__name__.rsplit(".", 1)[-1], len(rank)))
