"""An independent NumPy (float64) reference of the ViT forward pass, written from
the paper's equations (Eq. 1-4) and the official checkpoint layout (docs/design.md, "Checkpoint layout");
classifier 'map' from big_vision's `models/vit.py` (no class token; `MAPHead`: a
learned probe attends to the encoded tokens, then x + MlpBlock(LayerNorm(x)), its
first token the representation; SigLIP's image tower).

It reads parameters by their published checkpoint names and shares no code with
keras_vit.
"""

import math

import numpy as np

LN_EPS = 1e-6


def layer_norm(x, scale, bias, eps=LN_EPS):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def patch_embed(images, kernel, bias):
    """Eq. 1: flatten P x P patches row-major and project. images (B, H, W, C)."""
    b, h, w, c = images.shape
    ph, pw = kernel.shape[:2]
    patches = images.reshape(b, h // ph, ph, w // pw, pw, c).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(b, (h // ph) * (w // pw), ph * pw * c)
    return patches @ kernel.reshape(ph * pw * c, -1) + bias


def attention(x, p, prefix, return_weights=False, inputs_kv=None):
    """Multi-head attention with (D, heads, head_dim) kernels: queries from `x`,
    keys and values from `inputs_kv` (None: `x`, self-attention)."""
    inputs_kv = x if inputs_kv is None else inputs_kv

    def proj(inputs, name):
        kernel, bias = p[f"{prefix}/{name}/kernel"], p[f"{prefix}/{name}/bias"]
        return np.einsum("btd,dhk->bthk", inputs, kernel) + bias

    q, k, v = proj(x, "query"), proj(inputs_kv, "key"), proj(inputs_kv, "value")
    if f"{prefix}/query_norm/scale" in p:  # qk-norm: a LayerNorm over each head's features
        q = layer_norm(q, p[f"{prefix}/query_norm/scale"], p[f"{prefix}/query_norm/bias"])
        k = layer_norm(k, p[f"{prefix}/key_norm/scale"], p[f"{prefix}/key_norm/bias"])
    depth = q.shape[-1]
    weights = softmax(np.einsum("bqhk,bthk->bhqt", q / math.sqrt(depth), k))
    context = np.einsum("bhqt,bthk->bqhk", weights, v)
    out = np.einsum("bqhk,hkd->bqd", context, p[f"{prefix}/out/kernel"]) + p[f"{prefix}/out/bias"]
    return (out, weights) if return_weights else out


def encoder_block(x, p, i):
    """Eq. 2-3, pre-LN."""
    pre = f"Transformer/encoderblock_{i}"
    y = layer_norm(x, p[f"{pre}/LayerNorm_0/scale"], p[f"{pre}/LayerNorm_0/bias"])
    x = x + attention(y, p, f"{pre}/MultiHeadDotProductAttention_1")
    y = layer_norm(x, p[f"{pre}/LayerNorm_2/scale"], p[f"{pre}/LayerNorm_2/bias"])
    return x + mlp_block(y, p, f"{pre}/MlpBlock_3")


def mlp_block(x, p, prefix):
    """Dense, tanh GELU, Dense."""
    y = gelu_tanh(x @ p[f"{prefix}/Dense_0/kernel"] + p[f"{prefix}/Dense_0/bias"])
    return y @ p[f"{prefix}/Dense_1/kernel"] + p[f"{prefix}/Dense_1/bias"]


def map_head(x, p, prefix="MAPHead_0"):
    """big_vision's MAPHead: the probe (1, 1, D), one per image, attends to the
    tokens x (B, N, D); then y + MlpBlock(LayerNorm(y)); returns (B, D)."""
    probe = np.broadcast_to(p[f"{prefix}/probe"], (x.shape[0], 1, x.shape[-1]))
    y = attention(probe, p, f"{prefix}/MultiHeadDotProductAttention_0", inputs_kv=x)
    z = layer_norm(y, p[f"{prefix}/LayerNorm_0/scale"], p[f"{prefix}/LayerNorm_0/bias"])
    return (y + mlp_block(z, p, f"{prefix}/MlpBlock_0"))[:, 0]


def linear_resize_corner_aligned(grid, new_rows, new_cols):
    """Separable linear interpolation where output index o samples input
    coordinate o * (n_in - 1) / (n_out - 1) (corner-aligned)."""

    def along(a, n_out, axis):
        n_in = a.shape[axis]
        if n_out == n_in:
            return a
        coords = np.arange(n_out) * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(1)
        lo = np.clip(np.floor(coords).astype(int), 0, n_in - 1)
        hi = np.clip(lo + 1, 0, n_in - 1)
        frac = coords - lo
        shape = [1] * a.ndim
        shape[axis] = n_out
        frac = frac.reshape(shape)
        return np.take(a, lo, axis=axis) * (1 - frac) + np.take(a, hi, axis=axis) * frac

    return along(along(grid, new_rows, 0), new_cols, 1)


def resize_posemb(posemb, new_grid, num_prefix):
    prefix, grid = posemb[:, :num_prefix], posemb[0, num_prefix:]
    side = int(round(math.sqrt(grid.shape[0])))
    grid = grid.reshape(side, side, -1)
    grid = linear_resize_corner_aligned(grid, *new_grid)
    return np.concatenate([prefix, grid.reshape(1, -1, grid.shape[-1])], axis=1)


def vit_forward(params, images, *, num_layers, classifier="token", include_head=True):
    """Logits (B, K) of the ViT given official-name params and images in [-1, 1].

    classifier: 'token' (class token, its position embedding first), 'gap' or
    'map' (no class token: the position embedding is the grid's alone; mean or
    `map_head` pooling). Resizes the position embedding if the image grid
    differs from it. The params say the optional norms: 'embedding/norm/...'
    after the patch projection, '.../query_norm/...' and '.../key_norm/...' on
    each head's queries and keys; no 'Transformer/encoder_norm/...': no final
    norm.
    """
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    images = np.asarray(images, np.float64)
    x = patch_embed(images, p["embedding/kernel"], p["embedding/bias"])
    if "embedding/norm/scale" in p:  # a LayerNorm on each patch token (timm's embed_norm_layer)
        x = layer_norm(x, p["embedding/norm/scale"], p["embedding/norm/bias"])
    kh, kw = p["embedding/kernel"].shape[:2]
    grid = (images.shape[1] // kh, images.shape[2] // kw)
    num_prefix = 0
    if classifier == "token":
        cls = np.broadcast_to(p["cls"], (x.shape[0], 1, x.shape[-1]))
        x = np.concatenate([cls, x], axis=1)
        num_prefix = 1
    posemb = p["Transformer/posembed_input/pos_embedding"]
    if posemb.shape[1] != x.shape[1]:
        posemb = resize_posemb(posemb, grid, num_prefix)
    x = x + posemb
    for i in range(num_layers):
        x = encoder_block(x, p, i)
    if "Transformer/encoder_norm/scale" in p:  # absent: no final norm (timm's final_norm=False)
        x = layer_norm(x, p["Transformer/encoder_norm/scale"], p["Transformer/encoder_norm/bias"])
    if classifier == "map":
        x = map_head(x, p)
    else:
        x = x[:, 0] if classifier == "token" else x.mean(axis=1)
    if "pre_logits/kernel" in p:
        x = np.tanh(x @ p["pre_logits/kernel"] + p["pre_logits/bias"])
    if include_head:
        x = x @ p["head/kernel"] + p["head/bias"]
    return x


def random_params(
    *,
    patch,
    hidden,
    mlp,
    heads,
    layers,
    grid,
    num_classes,
    classifier="token",
    representation_size=None,
    channels=3,
    seed=0,
):
    """Random parameters under the published (pre-Linen) checkpoint names, at
    scales like a trained model's, so that every term of the forward pass matters.
    classifier 'map' adds big_vision's 'MAPHead_0/...'; num_classes None: no head."""
    rng = np.random.default_rng(seed)
    hd = hidden // heads

    def normal(*shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    p = {
        "embedding/kernel": normal(
            patch, patch, channels, hidden, scale=1 / math.sqrt(patch * patch * channels)
        ),
        "embedding/bias": normal(hidden, scale=0.1),
        "Transformer/posembed_input/pos_embedding": normal(
            1, grid[0] * grid[1] + (classifier == "token"), hidden, scale=0.3
        ),
        "Transformer/encoder_norm/scale": 1 + normal(hidden, scale=0.2),
        "Transformer/encoder_norm/bias": normal(hidden, scale=0.1),
    }

    def norm(prefix):
        p[f"{prefix}/scale"] = 1 + normal(hidden, scale=0.2)
        p[f"{prefix}/bias"] = normal(hidden, scale=0.1)

    def attention_block(prefix):
        for name in ("query", "key", "value"):
            p[f"{prefix}/{name}/kernel"] = normal(hidden, heads, hd, scale=1 / math.sqrt(hidden))
            p[f"{prefix}/{name}/bias"] = normal(heads, hd, scale=0.1)
        p[f"{prefix}/out/kernel"] = normal(heads, hd, hidden, scale=1 / math.sqrt(hidden))
        p[f"{prefix}/out/bias"] = normal(hidden, scale=0.1)

    def mlp_block(prefix):
        p[f"{prefix}/Dense_0/kernel"] = normal(hidden, mlp, scale=1 / math.sqrt(hidden))
        p[f"{prefix}/Dense_0/bias"] = normal(mlp, scale=0.1)
        p[f"{prefix}/Dense_1/kernel"] = normal(mlp, hidden, scale=1 / math.sqrt(mlp))
        p[f"{prefix}/Dense_1/bias"] = normal(hidden, scale=0.1)

    if classifier == "token":
        p["cls"] = normal(1, 1, hidden, scale=0.3)
    for i in range(layers):
        pre = f"Transformer/encoderblock_{i}"
        norm(f"{pre}/LayerNorm_0")
        norm(f"{pre}/LayerNorm_2")
        attention_block(f"{pre}/MultiHeadDotProductAttention_1")
        mlp_block(f"{pre}/MlpBlock_3")
    if classifier == "map":  # big_vision's MAPHead
        p["MAPHead_0/probe"] = normal(1, 1, hidden, scale=1.0)
        attention_block("MAPHead_0/MultiHeadDotProductAttention_0")
        norm("MAPHead_0/LayerNorm_0")
        mlp_block("MAPHead_0/MlpBlock_0")
    width = hidden
    if representation_size:
        p["pre_logits/kernel"] = normal(hidden, representation_size, scale=1 / math.sqrt(hidden))
        p["pre_logits/bias"] = normal(representation_size, scale=0.1)
        width = representation_size
    if num_classes is not None:
        p["head/kernel"] = normal(width, num_classes, scale=1 / math.sqrt(width))
        p["head/bias"] = normal(num_classes, scale=0.1)
    return p


LINEN_NAMES = {
    "MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0",
    "LayerNorm_2": "LayerNorm_1",
    "MlpBlock_3": "MlpBlock_0",
}


def to_linen_names(params, prefix=""):
    """The same params under current Linen module names, with an optional prefix."""
    out = {}
    for name, value in params.items():
        for old, new in LINEN_NAMES.items():
            name = name.replace(f"/{old}/", f"/{new}/")
        out[prefix + name] = value
    return out
