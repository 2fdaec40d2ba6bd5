"""keras_vit.inspect: rollout, attention distance, position-embedding similarity,
embedding-filter PCA, on hand-made attention matrices and tiny models."""

import itertools
import math

import keras
import numpy as np
import pytest
from tiny_models import tiny_vit

import keras_vit
from keras_vit import inspect as vit_inspect

GRID = (3, 4)  # non-square, so rows/cols mix-ups show
CELL = (5.0, 7.0)  # non-square pixel cells, likewise


def random_attention(rng, layers, batch, heads, tokens):
    logits = rng.normal(size=(layers, batch, heads, tokens, tokens)) * 3
    weights = np.exp(logits)
    return list(weights / weights.sum(-1, keepdims=True))


def uniform_attention(layers, batch, heads, tokens):
    return [np.full((batch, heads, tokens, tokens), 1.0 / tokens)] * layers


def tiny_model(classifier="token", **kwargs):
    """tests/tiny_models.py's ViT on 12x16 images (a 3x4 grid of 4 px patches), two blocks."""
    return tiny_vit(image_size=(12, 16), num_layers=2, classifier=classifier, **kwargs)


def make_attention_uniform(model):
    """Zero query and key projections: every logit is 0, so attention is uniform."""
    for block in model.get_layer("Transformer").blocks:
        attention = block.attention
        for name in ("query_kernel", "query_bias", "key_kernel", "key_bias"):
            variable = getattr(attention, name)
            variable.assign(np.zeros(variable.shape, "float32"))


def brute_force_mean_distance(grid, cell):
    """Mean Euclidean distance over all ordered pairs of cell centres, by loops."""
    rows, cols = grid
    centres = [((r + 0.5) * cell[0], (c + 0.5) * cell[1]) for r in range(rows) for c in range(cols)]
    total = sum(math.dist(a, b) for a, b in itertools.product(centres, repeat=2))
    return total / len(centres) ** 2


# -- rollout -------------------------------------------------------------------------


def test_rollout_rows_sum_to_one(rng):
    weights = random_attention(rng, layers=4, batch=2, heads=3, tokens=13)
    result = vit_inspect.rollout(weights)
    assert result.shape == (2, 13, 13)
    np.testing.assert_allclose(result.sum(-1), 1.0, rtol=0, atol=1e-12)
    assert (result >= 0).all()


def test_rollout_of_identity_attention_is_identity():
    weights = [np.broadcast_to(np.eye(13), (2, 3, 13, 13))] * 5
    np.testing.assert_array_equal(
        vit_inspect.rollout(weights), np.broadcast_to(np.eye(13), (2, 13, 13))
    )


def test_rollout_averages_heads_adds_identity_and_multiplies_later_layers_on_the_left(rng):
    first, second = random_attention(rng, layers=2, batch=1, heads=2, tokens=5)
    # Rows of softmax weights sum to 1, so mean_h A + I has row sums 2.
    expected = ((second.mean(1) + np.eye(5)) / 2) @ ((first.mean(1) + np.eye(5)) / 2)
    np.testing.assert_allclose(vit_inspect.rollout([first, second]), expected, atol=1e-14)


def test_uniform_attention_gives_a_uniform_class_token_map():
    tokens = 1 + GRID[0] * GRID[1]
    result = vit_inspect.rollout(uniform_attention(6, 2, 3, tokens))
    maps = vit_inspect.rollout_maps(result, GRID, num_prefix_tokens=1)
    assert maps.shape == (2, *GRID)
    np.testing.assert_allclose(maps, 1.0 / (GRID[0] * GRID[1]), rtol=1e-12)


def test_gap_map_is_the_mean_over_token_rows(rng):
    tokens = GRID[0] * GRID[1]
    result = vit_inspect.rollout(random_attention(rng, 2, 1, 2, tokens))
    maps = vit_inspect.rollout_maps(result, GRID, num_prefix_tokens=0)
    np.testing.assert_allclose(maps[0].ravel(), result[0].mean(0), atol=1e-14)
    # An attention that sends every token to patch (1, 2) puts the whole map there.
    sink = np.zeros((1, 1, tokens, tokens))
    sink[..., 1 * GRID[1] + 2] = 1.0
    maps = vit_inspect.rollout_maps(vit_inspect.rollout([sink] * 8), GRID, 0)
    assert np.unravel_index(maps[0].argmax(), GRID) == (1, 2)
    assert maps[0, 1, 2] > 0.99


def test_rollout_rejects_bad_shapes():
    with pytest.raises(ValueError, match="layer 1"):
        vit_inspect.rollout([np.ones((1, 1, 4, 4)) / 4, np.ones((1, 1, 5, 5)) / 5])
    with pytest.raises(ValueError, match=r"\(batch, 13, 13\)"):
        vit_inspect.rollout_maps(np.eye(12)[None], GRID, 1)


def test_model_attention_maps_with_zeroed_queries_and_keys_are_uniform():
    for classifier in ("token", "gap"):
        model = tiny_model(classifier)
        make_attention_uniform(model)
        images = np.random.default_rng(0).uniform(-1, 1, (2, 12, 16, 3)).astype("float32")
        maps = vit_inspect.attention_maps(model, images)
        assert maps.shape == (2, *GRID)
        np.testing.assert_allclose(maps, 1.0 / 12, rtol=1e-5)


def test_upsample_keeps_a_constant_map_and_sizes_it():
    maps = np.full((2, *GRID), 0.25)
    up = vit_inspect.upsample(maps, (12, 16))
    assert up.shape == (2, 12, 16)
    np.testing.assert_allclose(up, 0.25)


# -- mean attention distance -------------------------------------------------------


def test_attention_to_self_has_distance_zero():
    tokens = 1 + GRID[0] * GRID[1]
    weights = [np.broadcast_to(np.eye(tokens), (2, 3, tokens, tokens))] * 2
    distance = vit_inspect.mean_attention_distance(weights, GRID, CELL, 1)
    assert distance.shape == (2, 3)
    np.testing.assert_array_equal(distance, 0.0)


def test_uniform_attention_gives_the_grids_mean_pairwise_distance():
    expected = brute_force_mean_distance(GRID, CELL)
    assert vit_inspect.uniform_attention_distance(GRID, CELL) == pytest.approx(expected)
    for prefix in (0, 1):
        tokens = prefix + GRID[0] * GRID[1]
        distance = vit_inspect.mean_attention_distance(
            uniform_attention(3, 2, 4, tokens), GRID, CELL, prefix
        )
        np.testing.assert_allclose(distance, expected, rtol=1e-12)


def test_attention_to_one_patch_gives_the_mean_distance_to_it():
    rows, cols = GRID
    weights = np.zeros((1, 2, rows * cols, rows * cols))
    weights[:, 0, :, 0] = 1.0  # head 0: everyone looks at patch (0, 0)
    weights[:, 1, :, rows * cols - 1] = 1.0  # head 1: at the last patch
    distance = vit_inspect.mean_attention_distance([weights], GRID, CELL, 0)
    to_first = np.mean(
        [math.hypot(r * CELL[0], c * CELL[1]) for r in range(rows) for c in range(cols)]
    )
    to_last = np.mean(
        [
            math.hypot((rows - 1 - r) * CELL[0], (cols - 1 - c) * CELL[1])
            for r in range(rows)
            for c in range(cols)
        ]
    )
    np.testing.assert_allclose(distance[0], [to_first, to_last], rtol=1e-12)


def test_model_attention_distance_is_in_pixels():
    model = tiny_model("token")
    make_attention_uniform(model)
    images = np.zeros((1, 12, 16, 3), "float32")
    distance = vit_inspect.attention_distance(model, images)
    assert distance.shape == (2, 2)
    np.testing.assert_allclose(distance, brute_force_mean_distance(GRID, (4, 4)), rtol=1e-5)


def test_model_functions_give_the_same_numbers_in_chunks():
    model = tiny_model("token")
    images = np.random.default_rng(3).uniform(-1, 1, (4, 12, 16, 3)).astype("float32")
    weights = model.attention_weights(images)
    whole = vit_inspect.mean_attention_distance(weights, GRID, (4, 4), 1)
    np.testing.assert_allclose(
        vit_inspect.attention_distance(model, images, batch_size=2), whole, rtol=1e-6
    )
    np.testing.assert_allclose(
        vit_inspect.attention_maps(model, images, batch_size=2),
        vit_inspect.rollout_maps(vit_inspect.rollout(weights), GRID, 1),
        rtol=1e-6,
    )


def test_attention_distance_rejects_a_wrong_grid():
    with pytest.raises(ValueError, match="layer 0 weights must be"):
        vit_inspect.mean_attention_distance([np.ones((1, 1, 5, 5)) / 5], GRID, CELL, 1)


# -- position-embedding similarity --------------------------------------------------


def test_position_embedding_similarity_of_a_model():
    model = tiny_model("token")
    similarity = vit_inspect.position_embedding_similarity(model)
    assert similarity.shape == (*GRID, *GRID)
    flat = similarity.reshape(12, 12)
    np.testing.assert_allclose(np.diag(flat), 1.0, rtol=1e-12)
    np.testing.assert_allclose(flat, flat.T, atol=1e-12)
    # Independently: the class token's embedding is left out, rows are the grid.
    table = keras.ops.convert_to_numpy(
        model.get_layer("Transformer").position_embedding.pos_embedding
    )[0, 1:]
    a, b = table[1 * 4 + 2], table[2 * 4 + 0]
    assert similarity[1, 2, 2, 0] == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_cosine_similarity_grid_rejects_zero_and_misshaped_embeddings():
    with pytest.raises(ValueError, match="index 3"):
        vit_inspect.cosine_similarity_grid(
            np.eye(12)[:, :11] * (np.arange(12) != 3)[:, None] + 0.0, GRID
        )
    with pytest.raises(ValueError, match=r"\(12, D\)"):
        vit_inspect.cosine_similarity_grid(np.ones((13, 4)), GRID)


# -- embedding filters ------------------------------------------------------------


def test_principal_components_are_orthonormal_and_find_the_main_direction(rng):
    direction = rng.normal(size=30)
    direction /= np.linalg.norm(direction)
    samples = rng.normal(size=(200, 1)) * 10 * direction + rng.normal(size=(200, 30)) * 0.1
    components, explained = vit_inspect.principal_components(samples, 8)
    assert components.shape == (8, 30)
    np.testing.assert_allclose(components @ components.T, np.eye(8), atol=1e-12)
    assert abs(components[0] @ direction) > 0.999
    assert explained[0] > 0.9 and np.all(np.diff(explained) <= 0) and explained.sum() <= 1


def test_embedding_filter_components_of_a_model():
    model = tiny_model("gap")
    components, explained = vit_inspect.embedding_filter_components(model, num_components=6)
    assert components.shape == (6, 4, 4, 3)
    flat = components.reshape(6, -1)
    np.testing.assert_allclose(flat @ flat.T, np.eye(6), atol=1e-10)
    # Grey: the filters summed over colour channels (what R = G = B inputs see).
    grey, _ = vit_inspect.embedding_filter_components(model, num_components=4, grayscale=True)
    assert grey.shape == (4, 4, 4, 1)
    kernel = keras.ops.convert_to_numpy(model.get_layer("embedding").kernel).sum(axis=2)
    expected, _ = vit_inspect.principal_components(kernel.reshape(16, 16).T, 4)
    np.testing.assert_allclose(np.abs(grey.reshape(4, 16) @ expected.T), np.eye(4), atol=1e-8)
    # At most D=16 filters: asking for more gives 16 components.
    components, _ = vit_inspect.embedding_filter_components(model, num_components=40)
    assert len(components) == 16
    # A 1-channel model's filters are grey already: the same as its kernel's components.
    grey_model = tiny_model("gap", input_shape=(12, 16, 1))
    components, _ = vit_inspect.embedding_filter_components(grey_model, num_components=3)
    assert components.shape == (3, 4, 4, 1)
    kernel = keras.ops.convert_to_numpy(grey_model.get_layer("embedding").kernel)
    expected, _ = vit_inspect.principal_components(kernel.reshape(16, 16).T, 3)
    np.testing.assert_allclose(np.abs(components.reshape(3, 16) @ expected.T), np.eye(3), atol=1e-8)


def test_hybrid_maps_and_distances_work_and_its_filters_are_the_stems():
    # Stem-only ResNet (stride 4) then 2x2 patches: each token covers 8x8 pixels. Seeded:
    # the float32 and float64 components agree to ~1e-7 over the eigenvalue gap, and an
    # unseeded draw of 64 random kernels can leave two of the top eigenvalues close.
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(
        image_size=32,
        resnet=(),
        patch_size=2,
        hidden_size=16,
        mlp_dim=32,
        num_heads=2,
        num_layers=2,
        num_classes=3,
    )
    make_attention_uniform(model)
    images = np.zeros((2, 32, 32, 3), "float32")
    np.testing.assert_allclose(vit_inspect.attention_maps(model, images), 1.0 / 16, rtol=1e-5)
    np.testing.assert_allclose(
        vit_inspect.attention_distance(model, images),
        brute_force_mean_distance((4, 4), (8, 8)),
        rtol=1e-5,
    )
    assert vit_inspect.position_embedding_similarity(model).shape == (4, 4, 4, 4)
    # The filters that read the pixels: the stem's 64 7x7 kernels, standardised per
    # output channel (zero mean, unit population std) as the convolution uses them.
    components, explained = vit_inspect.embedding_filter_components(model, num_components=5)
    assert components.shape == (5, 7, 7, 3) and explained.shape == (5,)
    raw = keras.ops.convert_to_numpy(model.get_layer("root").conv_root.kernel).astype(np.float64)
    centred = raw - raw.mean(axis=(0, 1, 2), keepdims=True)
    standardised = centred / np.sqrt((centred**2).mean(axis=(0, 1, 2), keepdims=True))
    expected, _ = vit_inspect.principal_components(standardised.reshape(147, 64).T, 5)
    overlap = np.abs(components.reshape(5, 147) @ expected.T)
    np.testing.assert_allclose(overlap, np.eye(5), atol=1e-4)  # float32 kernel, eps 1e-8
    assert "stem" in vit_inspect.pixel_filters(model)[1]


# -- patch-feature PCA -----------------------------------------------------------------


def test_patch_feature_pca_colours_the_principal_components_of_the_patch_tokens(rng):
    """Checked against an eigen-decomposition of the covariance of the last block's
    normalised patch tokens (not the function's SVD), up to each component's sign; the
    register tokens are not among the patches."""
    model = tiny_model(num_registers=2, layer_scale_init=0.5)
    images = rng.uniform(-1, 1, (3, 12, 16, 3)).astype("float32")
    colours, explained = vit_inspect.patch_feature_pca(model, images, batch_size=2)
    assert colours.shape == (3, 3, 4, 3)  # the 3x4 grid of each image; no registers

    features = model.feature_extractor(blocks=(-1,), norm=True)(images)["block2"]
    flat = keras.ops.convert_to_numpy(features).reshape(-1, 16).astype(np.float64)
    centred = flat - flat.mean(axis=0)
    variances, vectors = np.linalg.eigh(centred.T @ centred)
    order = np.argsort(variances)[::-1][:3]
    np.testing.assert_allclose(explained, variances[order] / variances.sum(), rtol=1e-6)
    for k, column in enumerate(order):
        projected = centred @ vectors[:, column]
        scaled = (projected - projected.min()) / (projected.max() - projected.min())
        got = colours[..., k].reshape(-1)
        flipped = 1.0 - scaled  # the other sign of the same component
        assert min(np.abs(got - scaled).max(), np.abs(got - flipped).max()) < 1e-5, k
        assert got.min() == 0.0 and got.max() == 1.0
