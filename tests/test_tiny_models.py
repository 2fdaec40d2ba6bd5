"""tests/tiny_models.py: the shared tiny models, through the conftest fixtures."""

import numpy as np
import trainer_testing as testing


def test_tiny_vit_has_the_shared_sizes_and_takes_overrides(tiny_vit):
    model = tiny_vit()
    assert model.output.shape == (None, 5)
    assert model.get_config()["hidden_size"] == testing.TINY_MODEL["hidden_size"]
    assert len(model.get_layer("Transformer").blocks) == testing.TINY_MODEL["num_layers"]
    wider = tiny_vit(image_size=(8, 12), num_layers=2, num_classes=3)
    assert wider.output.shape == (None, 3)
    assert len(wider.get_layer("Transformer").blocks) == 2
    assert wider(np.zeros((2, 8, 12, 3), np.float32)).shape == (2, 3)


def test_tiny_hybrid_runs_the_resnet_then_the_shared_transformer(tiny_hybrid):
    model = tiny_hybrid()
    assert model.get_config()["resnet"] is not None
    assert model.get_config()["hidden_size"] == testing.TINY_MODEL["hidden_size"]
    # The stem's stride 4 on 16 px, 1x1 patches: a 4x4 grid, 16 tokens + the class token.
    attention = model.attention_weights(np.zeros((1, 16, 16, 3), np.float32))
    assert attention[0].shape[-1] == 17
    assert model(np.zeros((2, 16, 16, 3), np.float32)).shape == (2, 5)
