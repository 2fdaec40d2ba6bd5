"""An independent NumPy (float64) reference of timm's `Eva` forward (timm 1.0.31's
`models/eva.py` and `layers/pos_embed_sincos.py`: EVA-02, RoPE-ViT axial and
mixed, DINOv3), written from their equations on a state dict under timm's own key
names. It shares no code with keras_vit (nor with tests/numpy_vit.py), so the
main pass (TensorFlow, no torch) checks keras_vit's loads of these files against
it; the torch stage checks it against timm itself (tests/test_interop_rope.py).

The rotary embedding, as timm writes it: per patch a vector of angles of the
head size, laid out interleaved [t0, t0, t1, t1, ...] (x * cos + rot(x) * sin,
rot(x) = [-x1, x0, -x3, x2, ...]) or, with rotate_half, [t0, t1, ..., t0, t1, ...]
(rot(x) = [-x_second_half, x_first_half]).
"""

import math

import numpy as np


def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu(x):
    """The exact (erf) GELU: nn.GELU."""
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def _grid(rows, cols, indexing, kind, reference=None):
    """(rows * cols, 2) coordinates, row-major; channel 0 the row's for 'ij', the
    column's for 'xy' (timm's _build_grid)."""
    if kind == "dinov3":  # 'centered': patch centres in [0, 1], then [-1, 1]
        r = (np.arange(rows) + 0.5) / rows * 2 - 1
        c = (np.arange(cols) + 0.5) / cols * 2 - 1
    else:
        r, c = np.arange(rows, dtype=np.float64), np.arange(cols, dtype=np.float64)
        if reference is not None:  # EVA-02's ref_feat_shape
            r, c = r / rows * reference[0], c / cols * reference[1]
    rr, cc = np.meshgrid(r, c, indexing="ij")
    first, second = (rr, cc) if indexing == "ij" else (cc, rr)
    return np.stack([first.ravel(), second.ravel()], axis=-1)


def rope_angles(rope, rows, cols, head_dim, freqs=None):
    """Angles (N, head_dim / 2) (or (heads, N, head_dim / 2) for 'mixed', `freqs`
    (2, heads, head_dim / 2) of one block)."""
    kind = rope["kind"]
    grid = _grid(rows, cols, rope["grid_indexing"], kind, rope.get("reference_grid"))
    if kind == "mixed":
        return grid[None, :, 0:1] * freqs[0][:, None, :] + grid[None, :, 1:2] * freqs[1][:, None, :]
    bands = head_dim // 4
    if kind == "dinov3":
        periods = rope["temperature"] ** (2 * np.arange(bands) / (head_dim // 2))
        angles = 2 * math.pi * grid[:, :, None] / periods
    else:
        angles = grid[:, :, None] / rope["temperature"] ** (np.arange(bands) / bands)
    return angles.reshape(len(grid), -1)


def apply_rope(x, angles, rotate_half):
    """x (..., N, head_dim) turned by angles (..., N, head_dim / 2), timm's way."""
    if rotate_half:
        a = np.concatenate([angles, angles], axis=-1)
        half = x.shape[-1] // 2
        turned = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    else:
        a = np.repeat(angles, 2, axis=-1)
        turned = np.stack([-x[..., 1::2], x[..., 0::2]], axis=-1).reshape(x.shape)
    return x * np.cos(a) + turned * np.sin(a)


def _linear(x, state, name):
    y = x @ state[f"{name}.weight"].T
    return y + state[f"{name}.bias"] if f"{name}.bias" in state else y


def attention(x, state, stem, heads, rope, angles, prefix, eps, record=None):
    b, n, d = x.shape
    if f"{stem}.qkv.weight" in state:
        qkv = x @ state[f"{stem}.qkv.weight"].T
        if f"{stem}.qkv.bias" in state:
            qkv = qkv + state[f"{stem}.qkv.bias"]
        elif f"{stem}.q_bias" in state:
            zero = np.zeros_like(state[f"{stem}.q_bias"])
            qkv = qkv + np.concatenate([state[f"{stem}.q_bias"], zero, state[f"{stem}.v_bias"]])
        q, k, v = np.split(qkv, 3, axis=-1)
    else:
        q, k, v = (_linear(x, state, f"{stem}.{p}_proj") for p in "qkv")
    q, k, v = (t.reshape(b, n, heads, -1).transpose(0, 2, 1, 3) for t in (q, k, v))
    if f"{stem}.q_norm.weight" in state:
        q = layer_norm(q, state[f"{stem}.q_norm.weight"], state[f"{stem}.q_norm.bias"], eps)
        k = layer_norm(k, state[f"{stem}.k_norm.weight"], state[f"{stem}.k_norm.bias"], eps)
    if rope is not None:
        half = rope["rotate_half"]
        q = np.concatenate([q[:, :, :prefix], apply_rope(q[:, :, prefix:], angles, half)], axis=2)
        k = np.concatenate([k[:, :, :prefix], apply_rope(k[:, :, prefix:], angles, half)], axis=2)
    weights = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]))
    if record is not None:
        record.append(weights)
    context = (weights @ v).transpose(0, 2, 1, 3).reshape(b, n, d)
    return _linear(context, state, f"{stem}.proj")


def mlp(x, state, stem, eps):
    if f"{stem}.fc1_g.weight" in state:  # timm's SwiGLU, split weights
        y = silu(_linear(x, state, f"{stem}.fc1_g")) * _linear(x, state, f"{stem}.fc1_x")
    else:
        y = _linear(x, state, f"{stem}.fc1")
        if y.shape[-1] == 2 * state[f"{stem}.fc2.weight"].shape[1]:  # GluMlp, gate first
            gate, value = np.split(y, 2, axis=-1)
            y = silu(gate) * value
        else:
            y = gelu(y)
    if f"{stem}.norm.weight" in state:
        y = layer_norm(y, state[f"{stem}.norm.weight"], state[f"{stem}.norm.bias"], eps)
    return _linear(y, state, f"{stem}.fc2")


def eva_forward(state, images, *, heads, rope, eps, pool, attention_weights=None):
    """timm Eva's output for `images` (B, H, W, C), float64: the head's logits, or
    the pooled features where the state has no head. `rope`: None or a dict
    (kind, temperature, grid_indexing, rotate_half, reference_grid); `pool`:
    'token' or 'avg' (the mean of the patches, after the class token and registers).
    The learned position embedding, where there is one, must be of the images' grid.
    `attention_weights`: a list that gets each block's (B, heads, tokens, tokens)."""
    s = {k: np.asarray(v, np.float64) for k, v in state.items()}
    images = np.asarray(images, np.float64)
    kernel = s["patch_embed.proj.weight"]  # (D, C, p, p)
    d, c, ph, pw = kernel.shape
    b, height, width, _ = images.shape
    rows, cols = height // ph, width // pw
    patches = images.reshape(b, rows, ph, cols, pw, c)
    x = np.einsum("bipjqc,dcpq->bijd", patches, kernel).reshape(b, rows * cols, d)
    if "patch_embed.proj.bias" in s:
        x = x + s["patch_embed.proj.bias"]
    prefix_tokens = [
        np.broadcast_to(s[key], (b, s[key].shape[1], d))
        for key in ("cls_token", "reg_token")
        if key in s
    ]
    prefix = sum(t.shape[1] for t in prefix_tokens)
    if "pos_embed" in s and s["pos_embed"].shape[1] == rows * cols:  # no_embed_class
        x = x + s["pos_embed"]
        x = np.concatenate([*prefix_tokens, x], axis=1)
    else:
        x = np.concatenate([*prefix_tokens, x], axis=1)
        if "pos_embed" in s:
            x = x + s["pos_embed"]
    if "norm_pre.weight" in s:
        x = layer_norm(x, s["norm_pre.weight"], s["norm_pre.bias"], eps)
    head_dim = d // heads
    depth = 1 + max(int(k.split(".")[1]) for k in s if k.startswith("blocks."))
    fixed = None
    if rope is not None and rope["kind"] != "mixed":
        fixed = rope_angles(rope, rows, cols, head_dim)
    for i in range(depth):
        stem = f"blocks.{i}"
        angles = fixed
        if rope is not None and rope["kind"] == "mixed":
            angles = rope_angles(rope, rows, cols, head_dim, s["rope.freqs"][:, i])
        y = attention(
            layer_norm(x, s[f"{stem}.norm1.weight"], s[f"{stem}.norm1.bias"], eps),
            s,
            f"{stem}.attn",
            heads,
            rope,
            angles,
            prefix,
            eps,
            attention_weights,
        )
        x = x + (y * s[f"{stem}.gamma_1"] if f"{stem}.gamma_1" in s else y)
        y = mlp(
            layer_norm(x, s[f"{stem}.norm2.weight"], s[f"{stem}.norm2.bias"], eps),
            s,
            f"{stem}.mlp",
            eps,
        )
        x = x + (y * s[f"{stem}.gamma_2"] if f"{stem}.gamma_2" in s else y)
    if "norm.weight" in s:
        x = layer_norm(x, s["norm.weight"], s["norm.bias"], eps)
    x = x[:, 0] if pool == "token" else x[:, prefix:].mean(axis=1)
    if "fc_norm.weight" in s:
        x = layer_norm(x, s["fc_norm.weight"], s["fc_norm.bias"], eps)
    return _linear(x, s, "head") if "head.weight" in s else x


def _swiglu_keys(state, rng, stem, hidden, mlp_dim, split, inner_norm, normal):
    if split:
        for part in ("fc1_g", "fc1_x"):
            state[f"{stem}.{part}.weight"] = normal(mlp_dim, hidden, scale=hidden**-0.5)
            state[f"{stem}.{part}.bias"] = normal(mlp_dim, scale=0.1)
    else:
        state[f"{stem}.fc1.weight"] = normal(2 * mlp_dim, hidden, scale=hidden**-0.5)
        state[f"{stem}.fc1.bias"] = normal(2 * mlp_dim, scale=0.1)
    if inner_norm:
        state[f"{stem}.norm.weight"] = 1 + normal(mlp_dim, scale=0.2)
        state[f"{stem}.norm.bias"] = normal(mlp_dim, scale=0.1)


def random_eva_state(
    *,
    hidden,
    heads,
    mlp_dim,
    depth,
    patch,
    grid=None,
    registers=0,
    class_token=True,
    pos_embed=False,
    qkv="fused_bias",
    qk_norm=False,
    gated=None,
    inner_norm=False,
    layer_scale=True,
    mixed_rope=False,
    final="norm",
    num_classes=3,
    seed=0,
):
    """A random state dict under timm eva.py's keys, at trained-like scales.
    qkv: 'fused_bias' (AttentionRope's qkv.bias), 'q_v_bias' (EvaAttention's
    q_bias, v_bias), 'fused' (no bias), 'split' (q_proj, k_proj, v_proj); gated:
    None (GELU MLP), 'packed' (GluMlp fc1) or 'split' (SwiGLU fc1_g, fc1_x);
    final: 'norm' or 'fc_norm'; grid: the pos_embed's (rows, cols)."""
    rng = np.random.default_rng(seed)

    def normal(*shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    hd = hidden // heads
    state = {
        "patch_embed.proj.weight": normal(
            hidden, 3, patch, patch, scale=(3 * patch * patch) ** -0.5
        ),
        "patch_embed.proj.bias": normal(hidden, scale=0.1),
    }
    if class_token:
        state["cls_token"] = normal(1, 1, hidden, scale=0.5)
    if registers:
        state["reg_token"] = normal(1, registers, hidden, scale=0.5)
    if pos_embed:
        state["pos_embed"] = normal(1, int(class_token) + grid[0] * grid[1], hidden, scale=0.3)
    if mixed_rope:
        state["rope.freqs"] = normal(2, depth, heads, hd // 2, scale=1.0)

    def norm(name, width):
        state[f"{name}.weight"] = 1 + normal(width, scale=0.2)
        state[f"{name}.bias"] = normal(width, scale=0.1)

    for i in range(depth):
        stem = f"blocks.{i}"
        norm(f"{stem}.norm1", hidden)
        norm(f"{stem}.norm2", hidden)
        if qkv == "split":
            for p in "qkv":
                state[f"{stem}.attn.{p}_proj.weight"] = normal(hidden, hidden, scale=hidden**-0.5)
                if p != "k":
                    state[f"{stem}.attn.{p}_proj.bias"] = normal(hidden, scale=0.1)
        else:
            state[f"{stem}.attn.qkv.weight"] = normal(3 * hidden, hidden, scale=hidden**-0.5)
            if qkv == "fused_bias":
                state[f"{stem}.attn.qkv.bias"] = normal(3 * hidden, scale=0.1)
            elif qkv == "q_v_bias":
                state[f"{stem}.attn.q_bias"] = normal(hidden, scale=0.1)
                state[f"{stem}.attn.v_bias"] = normal(hidden, scale=0.1)
        if qk_norm:
            norm(f"{stem}.attn.q_norm", hd)
            norm(f"{stem}.attn.k_norm", hd)
        state[f"{stem}.attn.proj.weight"] = normal(hidden, hidden, scale=hidden**-0.5)
        state[f"{stem}.attn.proj.bias"] = normal(hidden, scale=0.1)
        if layer_scale:
            state[f"{stem}.gamma_1"] = 1 + normal(hidden, scale=0.3)
            state[f"{stem}.gamma_2"] = 1 + normal(hidden, scale=0.3)
        if gated:
            _swiglu_keys(
                state, rng, f"{stem}.mlp", hidden, mlp_dim, gated == "split", inner_norm, normal
            )
        else:
            state[f"{stem}.mlp.fc1.weight"] = normal(mlp_dim, hidden, scale=hidden**-0.5)
            state[f"{stem}.mlp.fc1.bias"] = normal(mlp_dim, scale=0.1)
        state[f"{stem}.mlp.fc2.weight"] = normal(hidden, mlp_dim, scale=mlp_dim**-0.5)
        state[f"{stem}.mlp.fc2.bias"] = normal(hidden, scale=0.1)
    norm(final, hidden)
    if num_classes:
        state["head.weight"] = normal(num_classes, hidden, scale=hidden**-0.5)
        state["head.bias"] = normal(num_classes, scale=0.1)
    return state
