"""Where each official checkpoint key lives in a keras_vit model."""

import keras


def model_variables(model):
    """Maps the official (published, pre-Linen) checkpoint names to the model's
    Keras variables.

    Returns:
        dict name -> keras.Variable, in model order (a hybrid's ResNet, then the
        embedding, ..., head last). Shapes are those of the checkpoint: ResNet
        `conv_root/kernel` and `block{s}/unit{u}/conv*/kernel` (kh, kw, in, out),
        GroupNorm `gn*/scale` and `gn*/bias` (C,), `embedding/kernel` (P, P, C, D),
        attention `query/kernel` (D, heads, head_dim), `out/kernel`
        (heads, head_dim, D), Dense kernels (in, out).
    """
    names = _resnet(model)
    embedding = model.get_layer("embedding")
    names["embedding/kernel"] = embedding.kernel
    names["embedding/bias"] = embedding.bias
    if model.classifier == "token":
        names["cls"] = model.get_layer("cls").cls
    encoder = model.get_layer("Transformer")
    names["Transformer/posembed_input/pos_embedding"] = encoder.position_embedding.pos_embedding
    for i, block in enumerate(encoder.blocks):
        prefix = f"Transformer/encoderblock_{i}/"
        names.update(_norm(prefix + "LayerNorm_0", block.norm_1))
        attention = block.attention
        for part in ("query", "key", "value", "out"):
            names[f"{prefix}MultiHeadDotProductAttention_1/{part}/kernel"] = getattr(
                attention, f"{part}_kernel"
            )
            names[f"{prefix}MultiHeadDotProductAttention_1/{part}/bias"] = getattr(
                attention, f"{part}_bias"
            )
        names.update(_norm(prefix + "LayerNorm_2", block.norm_2))
        names.update(_dense(prefix + "MlpBlock_3/Dense_0", block.mlp.dense_0))
        names.update(_dense(prefix + "MlpBlock_3/Dense_1", block.mlp.dense_1))
    names.update(_norm("Transformer/encoder_norm", encoder.encoder_norm))
    for top in ("pre_logits", "head"):
        layer = _find(model, top)
        if layer is not None:
            names.update(_dense(top, layer))
    return names


def model_params(model):
    """The model's weights as numpy arrays under the official checkpoint names."""
    return {
        name: keras.ops.convert_to_numpy(variable)
        for name, variable in model_variables(model).items()
    }


def _resnet(model):
    """A hybrid's ResNet weights: 'conv_root', 'gn_root', 'block{s}/unit{u}/...'."""
    if getattr(model, "resnet", None) is None:
        return {}
    stem, *stages = model.resnet_layers()
    names = {"conv_root/kernel": stem.conv_root.kernel}
    names.update(_norm("gn_root", stem.gn_root))
    for s, stage in enumerate(stages, 1):
        for u, unit in enumerate(stage.units, 1):
            for conv, norm in unit.conv_norm_pairs():
                names[f"block{s}/unit{u}/{conv.name}/kernel"] = conv.kernel
                names.update(_norm(f"block{s}/unit{u}/{norm.name}", norm))
    return names


def _norm(name, layer):
    """A Keras LayerNormalization/GroupNormalization: gamma, beta = scale, bias."""
    return {f"{name}/scale": layer.gamma, f"{name}/bias": layer.beta}


def _dense(name, layer):
    return {f"{name}/kernel": layer.kernel, f"{name}/bias": layer.bias}


def _find(model, name):
    return next((layer for layer in model.layers if layer.name == name), None)
