"""The named ViT variants of the paper's Table 1 and its hybrids (§3.1, §4.1), as data."""

# (hidden_size, mlp_dim, num_heads, num_layers) per model size (Table 1 + Ti/S of
# the AugReg paper).
SIZES = {
    "Ti": dict(hidden_size=192, mlp_dim=768, num_heads=3, num_layers=12),
    "S": dict(hidden_size=384, mlp_dim=1536, num_heads=6, num_layers=12),
    "B": dict(hidden_size=768, mlp_dim=3072, num_heads=12, num_layers=12),
    "L": dict(hidden_size=1024, mlp_dim=4096, num_heads=16, num_layers=24),
    "H": dict(hidden_size=1280, mlp_dim=5120, num_heads=16, num_layers=32),
}

VARIANTS = {
    f"ViT_{size}{patch}": dict(patch_size=patch, **SIZES[size])
    for size, patch in [
        ("Ti", 16),
        ("S", 16),
        ("S", 32),
        ("B", 8),
        ("B", 16),
        ("B", 32),
        ("L", 16),
        ("L", 32),
        ("H", 14),
    ]
}


def _hybrid(size, patch, num_layers):
    return dict(
        patch_size=patch, resnet={"num_layers": num_layers, "width_factor": 1}, **SIZES[size]
    )


# ResNet (units per stage) + ViT, as the official configs: the ResNet's stride
# (4 for the stem, x2 per stage after the first) times the patch size gives the
# effective patch of the name. R+Ti/16 is the stem alone with 8x8 patches: its
# stride is 4 (conv 2 x max-pool 2), so at 224 px its grid is 7x7 (effective
# /32), whatever the official name and config comment ("/16") say.
HYBRID_VARIANTS = {
    "R50_ViT_B16": _hybrid("B", 1, (3, 4, 9)),
    "R50_ViT_L32": _hybrid("L", 1, (3, 4, 6, 3)),
    "R26_ViT_S32": _hybrid("S", 1, (2, 2, 2, 2)),
    "R26_ViT_B32": _hybrid("B", 1, (2, 2, 2, 2)),
    "R_Ti16": _hybrid("Ti", 8, ()),
}


def variant_name(config):
    """The name of the (plain or hybrid) variant whose architecture `config` has
    (a hybrid's `resnet` normalised as `keras_vit.layers.resnet.resnet_spec`
    does), or None."""
    for name, arch in {**VARIANTS, **HYBRID_VARIANTS}.items():
        if all(config.get(key) == value for key, value in arch.items()) and config.get(
            "resnet"
        ) == arch.get("resnet"):
            return name
    return None
