"""Where each official checkpoint key lives in a keras_vit model."""

import keras


def model_variables(model):
    """Maps the official (published, pre-Linen) checkpoint names to the model's
    Keras variables.

    Returns:
        dict name -> keras.Variable, in model order (embedding first, head last).
        Shapes are those of the checkpoint: `embedding/kernel` (P, P, C, D),
        attention `query/kernel` (D, heads, head_dim), `out/kernel`
        (heads, head_dim, D), Dense kernels (in, out).
    """
    names = {}
    embedding = model.get_layer("embedding")
    names["embedding/kernel"] = embedding.kernel
    names["embedding/bias"] = embedding.bias
    if model.classifier == "token":
        names["cls"] = model.get_layer("cls").cls
    encoder = model.get_layer("Transformer")
    names["Transformer/posembed_input/pos_embedding"] = encoder.position_embedding.pos_embedding
    for i, block in enumerate(encoder.blocks):
        prefix = f"Transformer/encoderblock_{i}/"
        names.update(_layer_norm(prefix + "LayerNorm_0", block.norm_1))
        attention = block.attention
        for part in ("query", "key", "value", "out"):
            names[f"{prefix}MultiHeadDotProductAttention_1/{part}/kernel"] = \
                getattr(attention, f"{part}_kernel")
            names[f"{prefix}MultiHeadDotProductAttention_1/{part}/bias"] = \
                getattr(attention, f"{part}_bias")
        names.update(_layer_norm(prefix + "LayerNorm_2", block.norm_2))
        names.update(_dense(prefix + "MlpBlock_3/Dense_0", block.mlp.dense_0))
        names.update(_dense(prefix + "MlpBlock_3/Dense_1", block.mlp.dense_1))
    names.update(_layer_norm("Transformer/encoder_norm", encoder.encoder_norm))
    for top in ("pre_logits", "head"):
        layer = _find(model, top)
        if layer is not None:
            names.update(_dense(top, layer))
    return names


def model_params(model):
    """The model's weights as numpy arrays under the official checkpoint names."""
    return {name: keras.ops.convert_to_numpy(variable)
            for name, variable in model_variables(model).items()}


def _layer_norm(name, layer):
    return {f"{name}/scale": layer.gamma, f"{name}/bias": layer.beta}


def _dense(name, layer):
    return {f"{name}/kernel": layer.kernel, f"{name}/bias": layer.bias}


def _find(model, name):
    return next((layer for layer in model.layers if layer.name == name), None)
