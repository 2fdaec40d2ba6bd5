"""Every recipe in configs/ loads, names a buildable model, and keeps its published values."""

import glob
import importlib
import os

import pytest
import trainer_testing as testing

import keras_vit
from keras_vit_configs import augreg, common

CONFIGS = sorted(
    os.path.splitext(os.path.basename(p))[0]
    for p in glob.glob(os.path.join(testing.ROOT, "configs", "*.py"))
    if not p.endswith(("__init__.py", "common.py", "augreg.py"))
)


@pytest.mark.parametrize("name", CONFIGS)
def test_config_has_every_common_key(name):
    config = importlib.import_module(f"keras_vit_configs.{name}").get_config()
    base = common.base_config()
    missing = sorted(set(base.keys()) - set(config.keys()))
    assert not missing, f"configs/{name}.py lacks {missing}"
    missing_input = sorted(set(base.input.keys()) - set(config.input.keys()))
    assert not missing_input, f"configs/{name}.py input lacks {missing_input}"
    model = config.model if isinstance(config.model, str) else None
    if model is not None:
        assert hasattr(keras_vit, model), f"configs/{name}.py: no builder {model!r}"


@pytest.mark.parametrize("dataset,table", [("i1k", augreg.I1K_AUG), ("i21k", augreg.I21K_AUG)])
def test_augreg_recipes(dataset, table):
    for variant, setting in table.items():
        c = augreg.recipe(variant, dataset)
        assert c.input.aug_setting == setting and c.batch_size == 4096
        assert (c.learning_rate, c.warmup_steps, c.decay_type) == (1e-3, 10_000, "cosine")
        assert c.weight_decay * c.learning_rate == pytest.approx(1e-4)  # big_vision's wd
        assert (
            c.total_steps
            == 300
            * (
                common.IMAGENET1K_TRAIN_IMAGES
                if dataset == "i1k"
                else common.IMAGENET21K_TRAIN_IMAGES
            )
            // 4096
        )
        assert c.loss == ("softmax" if dataset == "i1k" else "sigmoid")
        assert c.model_overrides.classifier == ("token" if dataset == "i1k" else "gap")
    with pytest.raises(ValueError, match="no i1k setting for 'ViT_H14'"):
        augreg.recipe("ViT_H14", "i1k")
