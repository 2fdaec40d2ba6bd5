"""PyTorch's layouts of the arrays keras_vit keeps under the official names, both ways.

Both timm and Hugging Face transformers lay a ViT out as PyTorch modules:
Linear weights (out, in), Conv2d weights (out, in, kh, kw), LayerNorm weight
and bias. An encoder block is the same computation in all three (pre-LN
attention and MLP); only the key names differ, so a family names its keys for
the block's `BLOCK_ROLES` and this module does the rest. Every conversion is a
transpose, a reshape or a split/concatenation: exact both ways.
"""

import numpy as np

from keras_vit.checkpoint.errors import CheckpointError

# An encoder block's parts, each a PyTorch module with a weight and a bias, and
# the official name (under 'Transformer/encoderblock_{i}/') each goes to.
BLOCK_ROLES = {
    "norm_1": "LayerNorm_0",
    "query": "MultiHeadDotProductAttention_1/query",
    "key": "MultiHeadDotProductAttention_1/key",
    "value": "MultiHeadDotProductAttention_1/value",
    "out": "MultiHeadDotProductAttention_1/out",
    "norm_2": "LayerNorm_2",
    "dense_0": "MlpBlock_3/Dense_0",
    "dense_1": "MlpBlock_3/Dense_1",
}
NORMS = ("norm_1", "norm_2")
PROJECTIONS = ("query", "key", "value")


def block_prefix(index):
    return f"Transformer/encoderblock_{index}/"


def dense_from_linear(weight, bias):
    """A Linear's (out, in) weight and (out,) bias as a Dense's kernel (in, out)
    and bias, under 'kernel' / 'bias'."""
    return {"kernel": np.asarray(weight).T, "bias": np.asarray(bias)}


def dense_params(state, modules):
    """{'<name>/kernel', '<name>/bias'} of each Linear `module` -> `name` pair in
    `modules` that the state dict has (`dense_from_linear`)."""
    params = {}
    for module, name in modules:
        if f"{module}.weight" in state:
            dense = dense_from_linear(state[f"{module}.weight"], state[f"{module}.bias"])
            params.update({f"{name}/{part}": value for part, value in dense.items()})
    return params


def linear_from_dense(kernel, bias):
    """(weight (out, in), bias) of a Dense's kernel (in, out) and bias."""
    return np.asarray(kernel).T, np.asarray(bias)


def kernel_from_conv(weight):
    """A Conv2d weight (out, in, kh, kw) as an HWIO kernel (kh, kw, in, out)."""
    return np.asarray(weight).transpose(2, 3, 1, 0)


def conv_from_kernel(kernel):
    """An HWIO kernel (kh, kw, in, out) as a Conv2d weight (out, in, kh, kw)."""
    return np.asarray(kernel).transpose(3, 2, 0, 1)


def block_params(index, parts, num_heads):
    """One encoder block's arrays under the official names.

    Args:
        index: the block's number (0-based).
        parts: role (`BLOCK_ROLES`) -> (weight, bias) in PyTorch's layout; the
            bias of a projection may be None (timm's and transformers'
            `qkv_bias=False`): a zero bias computes the same.
        num_heads: the attention heads of the model the arrays go to: the q/k/v
            kernels are (hidden, heads, head_dim), the output's (heads,
            head_dim, hidden).
    Returns:
        dict official name -> array.
    Raises:
        CheckpointError: a projection width that `num_heads` does not divide.
    """
    prefix, out = block_prefix(index), {}
    for role, (weight, bias) in parts.items():
        name = prefix + BLOCK_ROLES[role]
        weight = np.asarray(weight)
        if role in NORMS:
            out[f"{name}/scale"], out[f"{name}/bias"] = weight, np.asarray(bias)
            continue
        if bias is None:
            bias = np.zeros(weight.shape[0], weight.dtype)
        kernel, bias = weight.T, np.asarray(bias)
        if role in PROJECTIONS or role == "out":
            width = weight.shape[1 if role == "out" else 0]
            if weight.ndim != 2 or width % num_heads:
                raise CheckpointError(
                    f"block {index} attention {role}: weight of shape {weight.shape} does not "
                    f"split into the model's {num_heads} heads."
                )
        if role in PROJECTIONS:
            kernel = kernel.reshape(kernel.shape[0], num_heads, -1)
            bias = bias.reshape(num_heads, -1)
        elif role == "out":
            kernel = kernel.reshape(num_heads, -1, kernel.shape[-1])
        out[f"{name}/kernel"], out[f"{name}/bias"] = kernel, bias
    return out


def block_parts(params, index):
    """The inverse of `block_params`: role -> (weight, bias) in PyTorch's layout,
    from official arrays (any heads)."""
    prefix, parts = block_prefix(index), {}
    for role, official in BLOCK_ROLES.items():
        name = prefix + official
        if role in NORMS:
            parts[role] = (params[f"{name}/scale"], params[f"{name}/bias"])
            continue
        parts[role] = linear_from_heads(params[f"{name}/kernel"], params[f"{name}/bias"], role)
    return parts


def blocks_state(params, stem, modules):
    """Every encoder block of official `params` as PyTorch keys: '{stem}.{i}.{module}.weight'
    and '.bias' for each {module name: role} of `modules` (a family's names)."""
    state = {}
    for index in range(num_blocks(params)):
        parts = block_parts(params, index)
        for module, role in modules.items():
            weight, bias = parts[role]
            state[f"{stem}.{index}.{module}.weight"] = weight
            state[f"{stem}.{index}.{module}.bias"] = bias
    return state


def linear_from_heads(kernel, bias, role):
    """An attention projection's official kernel and bias (`role` 'query', 'key',
    'value': (D, heads, head_dim) and (heads, head_dim); 'out': (heads, head_dim, D)
    and (D,); a Dense (in, out) as it is) as a Linear's (out, in) weight and bias."""
    kernel, bias = np.asarray(kernel), np.asarray(bias)
    if role == "out":
        kernel = kernel.reshape(-1, kernel.shape[-1])
    else:
        kernel = kernel.reshape(kernel.shape[0], -1)
    return kernel.T, bias.reshape(-1)


def num_blocks(params):
    """How many encoder blocks official arrays hold."""
    count = 0
    while f"{block_prefix(count)}LayerNorm_0/scale" in params:
        count += 1
    return count
