"""The named ViT variants of the paper's Table 1, as data."""

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
    for size, patch in [("Ti", 16), ("S", 16), ("S", 32), ("B", 8), ("B", 16),
                        ("B", 32), ("L", 16), ("L", 32), ("H", 14)]
}


def variant_name(config):
    """The name of the variant whose architecture `config` has, or None."""
    for name, arch in VARIANTS.items():
        if all(config.get(key) == value for key, value in arch.items()):
            if not config.get("resnet"):
                return name
    return None
