"""An independent NumPy (float64) reference of the hybrids' ResNet, written from the
equations of the official `vit_jax/models_resnet.py` and the root block of
`vit_jax/models_vit.py`, reading parameters by their checkpoint names
('conv_root/kernel', 'gn_root/scale', 'block1/unit1/conv1/kernel', ...).

It shares no code with keras_vit. Padding is TF/XLA 'SAME', written out here:
out = ceil(n / s), total = max((out - 1) * s + k - n, 0), top/left gets total // 2.
"""

import numpy as np

STD_EPS = 1e-5  # weight standardisation: added to the std
GN_EPS = 1e-6
GROUPS = 32


def same_padding(size, kernel, stride):
    """(before, after) padding of TF/XLA 'SAME' along one axis."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def _windows(x, kh, kw, stride, pad_value):
    """Padded sliding windows: (B, out_h, out_w, kh, kw, C)."""
    pads = [
        (0, 0),
        same_padding(x.shape[1], kh, stride),
        same_padding(x.shape[2], kw, stride),
        (0, 0),
    ]
    x = np.pad(x, pads, constant_values=pad_value)
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(1, 2))
    win = win[:, ::stride, ::stride]  # (B, oh, ow, C, kh, kw)
    return win.transpose(0, 1, 2, 4, 5, 3)


def standardize(w, eps=STD_EPS):
    """w <- w - mean; w <- w / (std + eps); per output channel over (H, W, in)."""
    w = w - w.mean(axis=(0, 1, 2))
    return w / (w.std(axis=(0, 1, 2)) + eps)


def conv_same(x, w, stride=1):
    """Cross-correlation with an HWIO kernel, TF 'SAME' zero padding, no bias."""
    kh, kw, cin, cout = w.shape
    win = _windows(x, kh, kw, stride, 0.0)
    b, oh, ow = win.shape[:3]
    return (win.reshape(b * oh * ow, kh * kw * cin) @ w.reshape(-1, cout)).reshape(b, oh, ow, cout)


def std_conv(x, w, stride=1):
    return conv_same(x, standardize(w), stride)


def group_norm(x, scale, bias, groups=GROUPS, eps=GN_EPS):
    """Statistics per sample and group over (H, W, C / groups), two-pass variance."""
    b, h, w, c = x.shape
    g = x.reshape(b, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = ((g - mean) ** 2).mean(axis=(1, 2, 4), keepdims=True)
    g = (g - mean) / np.sqrt(var + eps)
    return g.reshape(b, h, w, c) * np.reshape(scale, -1) + np.reshape(bias, -1)


def max_pool_same(x, size=3, stride=2):
    """Max pooling with TF 'SAME' padding (padded cells never win)."""
    return _windows(x, size, size, stride, -np.inf).max(axis=(3, 4))


def relu(x):
    return np.maximum(x, 0.0)


def unit(x, p, prefix, features, stride):
    """One bottleneck unit ('ResidualUnit'); prefix like 'block1/unit1'."""

    def conv_gn(inputs, name, gn, s=1):
        y = std_conv(inputs, p[f"{prefix}/{name}/kernel"], s)
        return group_norm(y, p[f"{prefix}/{gn}/scale"], p[f"{prefix}/{gn}/bias"])

    residual = x
    if x.shape[-1] != 4 * features or stride != 1:
        residual = conv_gn(x, "conv_proj", "gn_proj", stride)
    y = relu(conv_gn(x, "conv1", "gn1"))
    y = relu(conv_gn(y, "conv2", "gn2", stride))
    y = conv_gn(y, "conv3", "gn3")
    return relu(residual + y)


def stem(x, p):
    """Root block: StdConv 7x7/2 -> GN -> ReLU -> max-pool 3x3/2 SAME."""
    x = std_conv(x, p["conv_root/kernel"], 2)
    x = relu(group_norm(x, p["gn_root/scale"], p["gn_root/bias"]))
    return max_pool_same(x, 3, 2)


def resnet_forward(params, images, num_layers, width=64, return_stages=False):
    """Feature map (B, h, w, 4 * width * 2**(S-1)) (or `width` for the stem alone)
    of images (B, H, W, 3); with return_stages the list [stem, block1, ...]."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x = stem(np.asarray(images, np.float64), p)
    stages = [x]
    for s, units in enumerate(num_layers):
        for u in range(units):
            stride = 2 if (s > 0 and u == 0) else 1
            x = unit(x, p, f"block{s + 1}/unit{u + 1}", width * 2**s, stride)
        stages.append(x)
    return stages if return_stages else x


def random_resnet_params(num_layers, width=64, in_channels=3, old_gn=False, seed=0):
    """Random params under the checkpoint names; GroupNorm scale/bias shaped (C,),
    or (1, 1, 1, C) like old files with old_gn=True. Scales are such that every
    term matters (non-trivial GN scales, gn3 not zero)."""
    rng = np.random.default_rng(seed)
    p = {}

    def conv(name, k, cin, cout):
        p[f"{name}/kernel"] = (rng.standard_normal((k, k, cin, cout)) * 0.5 + 0.1).astype(
            np.float32
        )

    def gn(name, c):
        shape = (1, 1, 1, c) if old_gn else (c,)
        p[f"{name}/scale"] = (1 + 0.3 * rng.standard_normal(shape)).astype(np.float32)
        p[f"{name}/bias"] = (0.2 * rng.standard_normal(shape)).astype(np.float32)

    conv("conv_root", 7, in_channels, width)
    gn("gn_root", width)
    cin = width
    for s, units in enumerate(num_layers):
        features = width * 2**s
        for u in range(units):
            prefix = f"block{s + 1}/unit{u + 1}"
            stride = 2 if (s > 0 and u == 0) else 1
            if cin != 4 * features or stride != 1:
                conv(f"{prefix}/conv_proj", 1, cin, 4 * features)
                gn(f"{prefix}/gn_proj", 4 * features)
            conv(f"{prefix}/conv1", 1, cin, features)
            gn(f"{prefix}/gn1", features)
            conv(f"{prefix}/conv2", 3, features, features)
            gn(f"{prefix}/gn2", features)
            conv(f"{prefix}/conv3", 1, features, 4 * features)
            gn(f"{prefix}/gn3", 4 * features)
            cin = 4 * features
    return p


def output_channels(num_layers, width=64):
    return width if not num_layers else 4 * width * 2 ** (len(num_layers) - 1)


def hybrid_forward(params, images, *, num_layers, width=64, vit_layers, **vit_kwargs):
    """Logits of a hybrid: this ResNet, then `numpy_vit.vit_forward` on its
    feature map (the patch embedding cuts the feature map into patches)."""
    from numpy_vit import vit_forward

    features = resnet_forward(params, images, num_layers, width)
    return vit_forward(params, features, num_layers=vit_layers, **vit_kwargs)


def random_hybrid_params(*, resnet, width=64, old_gn=False, seed=0, **vit_kwargs):
    """Random params of a whole hybrid under the published names: the ResNet's
    and `numpy_vit.random_params(**vit_kwargs)` with the feature map's channels."""
    from numpy_vit import random_params

    params = random_resnet_params(resnet, width, old_gn=old_gn, seed=seed)
    params.update(
        random_params(channels=output_channels(resnet, width), seed=seed + 1, **vit_kwargs)
    )
    return params
