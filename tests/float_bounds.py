"""Per-element error bounds for float32 results checked against a float64 reference.

Why: a float32 kernel's summation order is the kernel's choice (oneDNN picks blocking
and vector width by instruction set: AVX2, AVX-512, AMX; XLA and Eigen pick others),
so a tolerance fitted on one CPU fails on another. The bounds here follow from the
computation instead, and hold for any order.

The model. u = 2**-24 is float32's unit roundoff: each operation's relative error is at
most u. A sum of n terms t_i computed in float32 in any order has

    |s_hat - s| <= g(n) * u * sum|t_i|,    g(n) = min(n, LAMBDA * sqrt(n)).

n * u is the worst case of every order (Higham, "Accuracy and Stability of Numerical
Algorithms", 2nd ed., Lemma 3.1 / Theorem 3.1: gamma_n = n u / (1 - n u), whose
O(u**2) part is negligible for n u << 1). Reached only when all n roundings go the same
way, it is a poor bound for long sums; Higham & Mary ("A new approach to probabilistic
rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019, Theorem 2.4) show that with
the rounding errors modelled as independent and mean zero (true to first order of any
round-to-nearest kernel, whatever its order) the error is at most
LAMBDA * sqrt(n) * u * sum|t_i| with probability >= 1 - 2 n exp(-LAMBDA**2 / 2).
LAMBDA = 8 puts that failure probability below 2.6e-14 * n per element, negligible
for every tensor in this suite; the min() keeps the deterministic bound where it is
the tighter one (n <= 64). Inputs that carry an error of their own (a standardised
kernel, a normalised activation) propagate it to first order; products of two errors
(O(u**2)) are dropped.

Constants are fixed here once, with this reasoning; a test never scales them.
"""

import math

import numpy as np
import numpy_resnet as ref

U = 2.0**-24  # float32 unit roundoff (round to nearest)
LAMBDA = 8.0  # Higham & Mary's lambda: failure probability <= 2n exp(-32) per element


def g(n):
    """The growth factor of a float32 sum of n terms: min(n, LAMBDA * sqrt(n))."""
    return min(float(n), LAMBDA * math.sqrt(n))


def sum_bound(abs_terms_sum, n):
    """Bound on the rounding error of a float32 sum of n terms whose absolute values
    add up to `abs_terms_sum` (elementwise), e.g. a dot product: sum|x_i w_i|."""
    return g(n) * U * np.asarray(abs_terms_sum, np.float64)


def assert_within(actual, expected, bound, what=""):
    """|actual - expected| <= bound elementwise, with the worst element named."""
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    bound = np.broadcast_to(np.asarray(bound, np.float64), expected.shape)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    excess = np.abs(actual - expected) - bound
    worst = np.unravel_index(np.argmax(excess), excess.shape)
    assert excess[worst] <= 0, (
        f"{what}: |float32 - float64| = {abs(actual[worst] - expected[worst]):.3g} at "
        f"{worst} exceeds the derived bound {bound[worst]:.3g} (value {expected[worst]:.4g})"
    )


# --- the hybrids' ResNet (numpy_resnet), value and bound side by side ---------------


def standardized_kernel_bound(w):
    """Per-element error bound of the float32 weight standardisation of the exact
    float32 kernel `w` (HWIO): w - mean, over (std + 1e-5), per output channel over
    m = H*W*I terms. Returns (exact standardised kernel, bound)."""
    w = np.asarray(w, np.float64)
    m = int(np.prod(w.shape[:3]))
    mean = w.mean(axis=(0, 1, 2))
    e_mean = U * (g(m) + 1) * np.abs(w).mean(axis=(0, 1, 2))  # sum, then / m
    c = w - mean
    e_c = e_mean + U * np.abs(c)  # subtraction
    var = (c**2).mean(axis=(0, 1, 2))
    e_var = U * (g(m) + 2) * var + 2 * (np.abs(c) * e_c).mean(axis=(0, 1, 2))
    std = np.sqrt(var)
    denom = std + ref.STD_EPS
    rel_denom = (std * (e_var / (2 * var) + U)) / denom + U  # sqrt, + eps
    standardized = c / denom
    return standardized, (e_c + np.abs(c) * (rel_denom + U)) / denom  # division


def std_conv(x, e_x, w, stride=1):
    """StdConv2D of (x, its error bound e_x) with the raw kernel w: (value, bound)."""
    ws, e_w = standardized_kernel_bound(w)
    n = int(np.prod(w.shape[:3]))
    value = ref.conv_same(x, ws, stride)
    abs_terms = ref.conv_same(np.abs(x), np.abs(ws), stride)
    bound = (
        sum_bound(abs_terms, n)
        + ref.conv_same(np.abs(x), e_w, stride)
        + ref.conv_same(e_x, np.abs(ws) + e_w, stride)
    )
    return value, bound


def group_norm(x, e_x, scale, bias, groups=ref.GROUPS, eps=ref.GN_EPS):
    """GroupNorm of (x, e_x): (value, bound), whichever way the kernel computes it:
    two-pass or one-pass variance (E[x^2] - mean^2, the larger bound is taken), and
    (x - mean) * r * scale + bias or x * (r * scale) + (bias - mean * r * scale)."""
    b, h, w, c = x.shape
    m = h * w * (c // groups)
    axes = (1, 2, 4)

    def grouped(a):
        return np.reshape(a, (b, h, w, groups, c // groups))

    gx, ge = grouped(x), grouped(e_x)
    mean = gx.mean(axis=axes, keepdims=True)
    e_mean = ge.mean(axis=axes, keepdims=True) + U * (g(m) + 1) * np.abs(gx).mean(
        axis=axes, keepdims=True
    )
    sq = (gx**2).mean(axis=axes, keepdims=True)
    var = ((gx - mean) ** 2).mean(axis=axes, keepdims=True)
    e_var = (
        U * (g(m) + 3) * (sq + mean**2)
        + 2 * (np.abs(gx) * ge).mean(axis=axes, keepdims=True)
        + 2 * np.abs(mean) * e_mean
    )
    r = 1.0 / np.sqrt(var + eps)
    # + eps (u), then 1/sqrt: correctly rounded sqrt and division cost 2u; a vectorised
    # rsqrt approximation refined by Newton's step is within 2 ulp = 4u; take 5u.
    rel_r = e_var / (2 * (var + eps)) + 6 * U
    gamma = np.abs(grouped(np.broadcast_to(np.reshape(scale, -1), (b, h, w, c))))
    beta = np.abs(grouped(np.broadcast_to(np.reshape(bias, -1), (b, h, w, c))))
    value = ref.group_norm(x, scale, bias, groups, eps)
    bound = (
        gamma * r * (ge + e_mean)
        + gamma * r * (np.abs(gx) + np.abs(mean)) * (rel_r + 3 * U)
        + U * (beta + np.abs(grouped(value)))
    )
    return value, bound.reshape(b, h, w, c)


def relu(x, e_x):
    return ref.relu(x), e_x


def max_pool(x, e_x, size=3, stride=2):
    """Max pooling is 1-Lipschitz in the max norm of its window."""
    return (
        ref.max_pool_same(x, size, stride),
        ref._windows(e_x, size, size, stride, 0.0).max(axis=(3, 4)),
    )


def unit(x, e_x, p, prefix, features, stride):
    """numpy_resnet.unit with its bound."""

    def conv_gn(inputs, e_in, name, gn, s=1):
        y, e_y = std_conv(inputs, e_in, p[f"{prefix}/{name}/kernel"], s)
        return group_norm(y, e_y, p[f"{prefix}/{gn}/scale"], p[f"{prefix}/{gn}/bias"])

    residual, e_res = x, e_x
    if x.shape[-1] != 4 * features or stride != 1:
        residual, e_res = conv_gn(x, e_x, "conv_proj", "gn_proj", stride)
    y, e_y = relu(*conv_gn(x, e_x, "conv1", "gn1"))
    y, e_y = relu(*conv_gn(y, e_y, "conv2", "gn2", stride))
    y, e_y = conv_gn(y, e_y, "conv3", "gn3")
    total = residual + y
    return relu(total, e_res + e_y + U * np.abs(total))


def stem(x, e_x, p):
    """numpy_resnet.stem with its bound."""
    y, e_y = std_conv(x, e_x, p["conv_root/kernel"], 2)
    y, e_y = relu(*group_norm(y, e_y, p["gn_root/scale"], p["gn_root/bias"]))
    return max_pool(y, e_y, 3, 2)
