"""Fine-tuning controls (trainers/freeze.py, trainers/layer_decay.py, the optimizers of
trainers/optimizers.py): a frozen backbone is bitwise unchanged, each block's effective
learning rate is the configured decay's power, and excluded variables are not decayed."""

import keras
import ml_collections
import numpy as np
import pytest
from tiny_models import tiny_vit

import keras_vit
from keras_vit_trainers import freeze, layer_decay, optimizers

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)

BLOCKS, LR, DECAY, WD = 3, 0.1, 0.5, 0.2
EPS32 = np.finfo(np.float32).eps


def _model(seed=0, **kwargs):
    keras.utils.set_random_seed(seed)
    return keras_vit.VisionTransformer(
        image_size=16, patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2,
        num_layers=BLOCKS, num_classes=3, **kwargs,
    )  # fmt: skip


def _config(**kwargs):
    defaults = dict(
        optimizer="sgd", momentum=0.0, beta1=0.9, beta2=0.999, weight_decay=0.0,
        grad_clip_norm=None, ema_momentum=0.0, layer_decay=1.0, weight_decay_exclude=(),
    )  # fmt: skip
    return ml_collections.ConfigDict({**defaults, **kwargs})


def _batch(n=4, seed=1):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, 16, 16, 3)).astype("float32"), rng.integers(0, 3, n)


def _weights(model):
    return {v.path: np.array(v) for v in model.weights}


def test_layer_ids_follow_the_checkpoint_names():
    paths = [
        "embedding/kernel", "cls/cls", "Transformer/posembed_input/pos_embedding",
        "root/conv_root/kernel", "block3/unit2/gn1/gamma",
        "Transformer/encoderblock_0/LayerNorm_0/gamma",
        "Transformer/encoderblock_11/MlpBlock_3/Dense_1/bias",
        "Transformer/encoder_norm/beta", "pre_logits/kernel", "head/bias",
    ]  # fmt: skip
    blocks = layer_decay.num_blocks(paths)
    assert blocks == 12
    assert [layer_decay.layer_id(p, blocks) for p in paths] == [0, 0, 0, 0, 0, 1, 12, 13, 13, 13]
    assert layer_decay.scales(paths, 0.5)[0] == 0.5**13
    assert layer_decay.scales(paths, 0.5)[-1] == 1.0
    with pytest.raises(ValueError, match="layer_decay=1.5"):
        layer_decay.scales(paths, 1.5)


def test_layer_ids_of_the_families_layers():
    """On a real model's variable paths: registers and CLIP's pre-norm decay with the
    embedding, LayerScale with its block, SigLIP's attention pooling with the head."""
    model = tiny_vit(
        num_layers=2,
        classifier="map",
        num_registers=2,
        layer_scale_init=0.1,
        pre_norm=True,
        position_embedding_for_class_token=False,
    )
    paths = [v.path for v in model.trainable_variables]
    ids = dict(zip(paths, (layer_decay.layer_id(p, 2) for p in paths)))
    expected = {"Transformer/registers": 0, "Transformer/encoder_prenorm": 0, "embedding": 0}
    expected.update({"MAPHead_0": 3, "Transformer/encoder_norm": 3, "head": 3})
    expected.update({f"Transformer/encoderblock_{i}/LayerScale_": i + 1 for i in (0, 1)})
    for prefix, layer in expected.items():
        found = {ids[p] for p in paths if p.startswith(prefix)}
        assert found == {layer}, (prefix, found)
    assert sorted(set(ids.values())) == [0, 1, 2, 3]


def test_freezing_the_backbone_of_a_family_model_trains_its_head_alone():
    """A linear probe on SigLIP's pooled features: the attention pooling is part of the
    pre-trained representation, frozen with the registers and LayerScale."""
    model = tiny_vit(classifier="map", num_registers=2, layer_scale_init=0.1)
    freeze.apply(model, "backbone")
    assert [v.path for v in model.trainable_variables] == ["head/kernel", "head/bias"]


def test_frozen_backbone_is_bitwise_unchanged_and_the_head_trains():
    model = _model(representation_size=8)
    freeze.apply(model, "backbone")
    assert {v.path.split("/")[0] for v in model.trainable_variables} == {"head"}
    config = _config(momentum=0.9, weight_decay=WD, ema_momentum=0.9)
    model.compile(
        optimizer=optimizers.make_optimizer(config, LR),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=False,
    )
    before = _weights(model)
    x, y = _batch(8)
    model.fit(x, y, batch_size=4, epochs=2, verbose=0)  # 4 steps, with decay and EMA
    after = _weights(model)
    for path, value in before.items():
        if path.startswith("head/"):
            assert np.abs(after[path] - value).max() > 0, path
        else:
            assert np.array_equal(after[path], value), path


def test_freeze_refuses_unknown_modes_and_headless_models():
    with pytest.raises(ValueError, match="--config.freeze='all'"):
        freeze.apply(_model(), "all")
    with pytest.raises(ValueError, match="no 'head' layer"):
        freeze.apply(_model(include_top=False), "backbone")


def test_each_block_trains_at_its_decayed_learning_rate():
    """Plain SGD, one step: every variable moves by -lr * scale * gradient, scale =
    DECAY ** (BLOCKS + 1 - layer id), within the rounding of `variable - step`."""
    model = _model()
    optimizer = optimizers.make_optimizer(_config(layer_decay=DECAY), LR)
    x, y = _batch()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    import tensorflow as tf

    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    variables = model.trainable_variables
    grads = tape.gradient(loss, variables)
    before = [np.array(v, dtype=np.float64) for v in variables]
    optimizer.apply(grads, variables)
    scales = layer_decay.scales([v.path for v in variables], DECAY)
    assert sorted(set(scales)) == [DECAY**k for k in range(BLOCKS + 1, -1, -1)]
    for v, b, g, s in zip(variables, before, grads, scales):
        expected = -LR * s * np.array(g, dtype=np.float64)
        moved = np.array(v, dtype=np.float64) - b
        # float32 rounding: lr * s * g (3 products) and the subtraction, each <= eps/2
        # relative, of |step| and of max(|before|, |after|).
        bound = EPS32 * (2 * np.abs(expected) + np.maximum(np.abs(b), np.abs(b + moved)))
        assert np.all(np.abs(moved - expected) <= bound), v.path


@pytest.mark.parametrize("decay", [1.0, DECAY])
def test_excluded_variables_are_not_decayed(decay):
    """AdamW with a zero loss gradient: only the coupled weight decay moves a variable,
    by -lr * scale * wd * value; excluded ones (bias, LayerNorm, position embedding,
    class token) stay bitwise as they were."""
    model = _model()
    exclude = ("bias", "gamma", "beta", "pos_embedding", "cls")
    config = _config(optimizer="adamw", weight_decay=WD, layer_decay=decay)
    optimizer = optimizers.make_optimizer(
        ml_collections.ConfigDict({**config.to_dict(), "weight_decay_exclude": exclude}), LR
    )
    variables = model.trainable_variables
    rng = np.random.default_rng(2)  # biases and the class token start at 0
    for v in variables:
        v.assign(rng.uniform(0.5, 1.5, v.shape).astype("float32"))
    before = [np.array(v, dtype=np.float64) for v in variables]
    optimizer.apply([keras.ops.zeros_like(v) for v in variables], variables)
    scales = layer_decay.scales([v.path for v in variables], decay)
    decayed = 0
    for v, b, s in zip(variables, before, scales):
        after = np.array(v, dtype=np.float64)
        if v.name in exclude or v.name.endswith("bias"):
            assert np.array_equal(after, b), v.path
            continue
        decayed += 1
        expected = b * (1 - LR * s * WD)
        assert np.all(np.abs(after - expected) <= 2 * EPS32 * np.abs(b)), v.path
    assert decayed == 1 + 6 * BLOCKS + 1  # patch kernel; q, k, v, out, 2 MLP kernels; head


def test_optimizer_config_round_trips():
    optimizer = optimizers.make_optimizer(_config(weight_decay=WD, layer_decay=DECAY), LR)
    clone = optimizers.SGD.from_config(optimizer.get_config())
    assert clone.layer_decay == DECAY
    assert clone.get_config()["weight_decay"] == WD
