"""The eva.py families keras_vit loads (timm 1.0.31, `models/eva.py`), as the tests
build them: each timm architecture's state dict options (`numpy_eva.random_eva_state`),
its forward's settings (`numpy_eva.eva_forward`) and the keras_vit options the
file alone must give. Sizes: the architecture's width and heads (a bare file
names its heads by its width), two blocks; 224 px, as timm makes them.
"""

import numpy as np

# timm's settings of each architecture (eva.py's model functions), written out.
_DINOV3_ROPE = dict(
    kind="dinov3", temperature=100.0, grid_indexing="ij", rotate_half=True, reference_grid=None
)
_DINOV3 = dict(
    sizes=dict(hidden=384, heads=6, mlp_dim=1536, patch=16),
    state=dict(registers=4, qkv="fused", layer_scale=True),
    forward=dict(rope=_DINOV3_ROPE, eps=1e-5, pool="avg"),
    options=dict(
        num_registers=4,
        absolute_position_embedding=False,
        classifier="token_gap",
        layer_norm_epsilon=1e-5,
        rope=_DINOV3_ROPE,
    ),
)
_QKVB = dict(registers=4, qkv="q_v_bias", layer_scale=True)
_ROPE_VIT = dict(
    sizes=dict(hidden=384, heads=6, mlp_dim=1536, patch=16),
    state=dict(qkv="fused_bias", layer_scale=True),
)
_AXIAL_100 = dict(
    kind="axial", temperature=100.0, grid_indexing="xy", rotate_half=False, reference_grid=None
)
_MIXED = dict(
    kind="mixed", temperature=10.0, grid_indexing="xy", rotate_half=False, reference_grid=None
)
_EVA02_ROPE = dict(
    kind="axial",
    temperature=10000.0,
    grid_indexing="ij",
    rotate_half=False,
    reference_grid=[16, 16],
)
FAMILIES = {
    "vit_small_patch16_dinov3": _DINOV3,
    # q_bias / v_bias: LingBot-Vision has the same keys and pools the class token; a
    # bare file of them does not say which: its config.json does, or its name
    # (`unnamed`: the argument a file named otherwise must be given).
    "vit_small_patch16_dinov3_qkvb": {
        **_DINOV3,
        "state": _QKVB,
        "unnamed": {"classifier": "token_gap"},
    },
    "vit_small_patch16_lingbot": {
        **_DINOV3,
        "state": _QKVB,
        "forward": {**_DINOV3["forward"], "pool": "token"},
        "options": {**_DINOV3["options"], "classifier": "token"},
        "unnamed": {"classifier": "token"},
    },
    "eva02_tiny_patch14_224": dict(
        sizes=dict(hidden=192, heads=3, mlp_dim=512, patch=14),
        state=dict(
            pos_embed=True, qkv="q_v_bias", gated="packed", layer_scale=False, final="fc_norm"
        ),
        forward=dict(rope=_EVA02_ROPE, eps=1e-6, pool="avg"),
        options=dict(gated_mlp=True, fc_norm=True, classifier="token_gap", rope=_EVA02_ROPE),
    ),
    "vit_small_patch16_rope_mixed_224": {
        **_ROPE_VIT,
        "state": dict(qkv="fused_bias", layer_scale=True, mixed_rope=True),
        "forward": dict(rope=_MIXED, eps=1e-6, pool="token"),
        "options": dict(absolute_position_embedding=False, classifier="token", rope=_MIXED),
    },
    "vit_small_patch16_rope_224": {
        **_ROPE_VIT,
        "forward": dict(rope=_AXIAL_100, eps=1e-6, pool="token"),
        "options": dict(absolute_position_embedding=False, classifier="token", rope=_AXIAL_100),
    },
}
DEPTH = 2
IMAGE_SIZE = 224


def state_options(family, seed=0):
    """`numpy_eva.random_eva_state`'s arguments for `family` (a key of FAMILIES)."""
    spec = FAMILIES[family]
    sizes = spec["sizes"]
    grid = IMAGE_SIZE // sizes["patch"]
    return dict(**sizes, depth=DEPTH, grid=(grid, grid), seed=seed, **spec["state"])


def rotary_model(**options):
    """A tiny keras_vit model (16 x 24 px, 4-pixel patches, two blocks 16 wide) with
    `options`, its weights moved far from any initialiser's."""
    import keras_vit

    model = keras_vit.VisionTransformer(
        image_size=(16, 24),
        patch_size=4,
        hidden_size=16,
        mlp_dim=32,
        num_heads=2,
        num_layers=2,
        approximate_gelu=False,
        num_classes=3,
        **options,
    )
    rng = np.random.default_rng(0)
    model.set_weights(
        [w + rng.normal(0, 0.3, w.shape).astype(w.dtype) for w in model.get_weights()]
    )
    return model


# Models with the rotary families' options that save_timm writes in eva.py's layout.
WRITTEN = {
    "dinov3": dict(
        rope="dinov3",
        absolute_position_embedding=False,
        num_registers=2,
        layer_scale_init=0.1,
        layer_norm_epsilon=1e-5,
        classifier="token_gap",
    ),
    "eva02": dict(
        rope={"kind": "axial", "reference_grid": (4, 4)},
        gated_mlp=True,
        mlp_norm=True,
        fc_norm=True,
        classifier="token_gap",
    ),
    "mixed, qk_norm, packed SwiGLU": dict(
        rope="mixed",
        absolute_position_embedding=False,
        qk_norm=True,
        gated_mlp=True,
        layer_scale_init=0.1,
    ),
}
