"""Where each official checkpoint key lives in a keras_vit model, and in the Keras
weights files (`save_weights`, a `.keras` archive) of one."""

import collections

import keras

from keras_vit.applications_args import has_class_token


def model_variables(model):
    """Maps the official (published, pre-Linen) checkpoint names to the model's
    Keras variables.

    Returns:
        dict name -> keras.Variable, in model order (a hybrid's ResNet, then the
        embedding, ..., head last). An `fc_norm` model has 'fc_norm/scale' and
        'fc_norm/bias' (timm's LayerNorm after pooling) where others have
        'Transformer/encoder_norm/...'. The family options add theirs:
        'Transformer/registers' (1, R, D), 'Transformer/encoder_prenorm/...',
        '.../LayerScale_1/scale' and '.../LayerScale_3/scale' (D,) in each
        block, big_vision's 'MAPHead_0/...' (probe (1, 1, D), its attention,
        LayerNorm_0, MlpBlock_0); no 'embedding/bias' without a patch bias;
        'embedding/norm/scale' and '/bias' (D,) with a patch-embedding norm. Shapes are those of the checkpoint: ResNet
        `conv_root/kernel` and `block{s}/unit{u}/conv*/kernel` (kh, kw, in, out),
        GroupNorm `gn*/scale` and `gn*/bias` (C,), `embedding/kernel` (P, P, C, D),
        attention `query/kernel` (D, heads, head_dim), `out/kernel`
        (heads, head_dim, D), Dense kernels (in, out).
    """
    names = _resnet(model)
    embedding = model.get_layer("embedding")
    names["embedding/kernel"] = embedding.kernel
    if embedding.bias is not None:  # CLIP's patch embedding has none
        names["embedding/bias"] = embedding.bias
    if embedding.norm is not None:  # timm's embed_norm_layer
        names.update(_norm("embedding/norm", embedding.norm))
    if has_class_token(model.classifier):
        names["cls"] = model.get_layer("cls").cls
    encoder = model.get_layer("Transformer")
    if encoder.registers is not None:
        names["Transformer/registers"] = encoder.registers.registers
    if encoder.position_embedding is not None:  # DINOv3's, RoPE-ViT's: rotary alone
        names["Transformer/posembed_input/pos_embedding"] = encoder.position_embedding.pos_embedding
    if encoder.encoder_prenorm is not None:
        names.update(_norm("Transformer/encoder_prenorm", encoder.encoder_prenorm))
    for i, block in enumerate(encoder.blocks):
        prefix = f"Transformer/encoderblock_{i}/"
        names.update(_norm(prefix + "LayerNorm_0", block.norm_1))
        names.update(_attention(prefix + "MultiHeadDotProductAttention_1", block.attention))
        if block.layer_scale_1 is not None:
            names[prefix + "LayerScale_1/scale"] = block.layer_scale_1.scale
        names.update(_rotary_and_qk_norms(prefix + "MultiHeadDotProductAttention_1", block))
        names.update(_norm(prefix + "LayerNorm_2", block.norm_2))
        names.update(_dense(prefix + "MlpBlock_3/Dense_0", block.mlp.dense_0))
        if block.mlp.norm is not None:  # EVA-02's LayerNorm inside the MLP
            names.update(_norm(prefix + "MlpBlock_3/norm", block.mlp.norm))
        names.update(_dense(prefix + "MlpBlock_3/Dense_1", block.mlp.dense_1))
        if block.layer_scale_3 is not None:
            names[prefix + "LayerScale_3/scale"] = block.layer_scale_3.scale
    if encoder.encoder_norm is not None:  # else the model normalises after pooling
        names.update(_norm("Transformer/encoder_norm", encoder.encoder_norm))
    map_head = _find(model, "MAPHead_0")
    if map_head is not None:  # big_vision's names
        names["MAPHead_0/probe"] = map_head.probe
        names.update(_attention("MAPHead_0/MultiHeadDotProductAttention_0", map_head.attention))
        names.update(_norm("MAPHead_0/LayerNorm_0", map_head.norm))
        names.update(_dense("MAPHead_0/MlpBlock_0/Dense_0", map_head.mlp.dense_0))
        names.update(_dense("MAPHead_0/MlpBlock_0/Dense_1", map_head.mlp.dense_1))
    fc_norm = _find(model, "fc_norm")
    if fc_norm is not None:
        names.update(_norm("fc_norm", fc_norm))
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


def keras_slots(model):
    """Where Keras' weights files of `model` keep each official key.

    Keras lays a weights file out by the model's object tree: a group per layer
    (named after the attribute or list that holds it, so 'dense', 'dense_1', not
    'pre_logits', 'head'), the layer's own variables numbered '0', '1', ... in
    the order it created them (`Layer.save_own_variables`), and since Keras 3.9
    the layer's name beside them (the 'name' attribute of its 'vars' group). The
    chain of those names is the layer's path, which is also the path of its
    variables less their own name ('Transformer/encoderblock_0/LayerNorm_0' for
    '.../LayerNorm_0/gamma'). A file written for another head or resolution of
    the same architecture keeps the same slots.

    Returns:
        dict official name -> (layer path, number as a string), in
        `model_variables` order.
    """
    slots, counts = {}, collections.Counter()
    for variable in model.weights:  # a layer's own variables first, in creation order
        layer = variable.path.rpartition("/")[0]
        slots[id(variable)] = (layer, str(counts[layer]))
        counts[layer] += 1
    return {name: slots[id(variable)] for name, variable in model_variables(model).items()}


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


def _rotary_and_qk_norms(name, block):
    """A block attention's newer weights: the learned frequencies of a 'mixed'
    rotary embedding '<name>/rope/frequencies' (2, heads, head_dim/2) and the
    LayerNorms on queries and keys '<name>/query_norm/...', '<name>/key_norm/...'
    (head_dim,)."""
    attention, names = block.attention, {}
    if attention.rope is not None and attention.rope.frequencies is not None:
        names[f"{name}/rope/frequencies"] = attention.rope.frequencies
    if attention.query_norm is not None:
        names.update(_norm(f"{name}/query_norm", attention.query_norm))
        names.update(_norm(f"{name}/key_norm", attention.key_norm))
    return names


def _norm(name, layer):
    """A Keras LayerNormalization/GroupNormalization: gamma, beta = scale, bias."""
    return {f"{name}/scale": layer.gamma, f"{name}/bias": layer.beta}


def _attention(name, layer):
    """A MultiHeadSelfAttention's kernels and biases: '<name>/{query,key,value,out}/...'."""
    names = {}
    for part in ("query", "key", "value", "out"):
        names[f"{name}/{part}/kernel"] = getattr(layer, f"{part}_kernel")
        names[f"{name}/{part}/bias"] = getattr(layer, f"{part}_bias")
    return names


def _dense(name, layer):
    return {f"{name}/kernel": layer.kernel, f"{name}/bias": layer.bias}


def _find(model, name):
    return next((layer for layer in model.layers if layer.name == name), None)
