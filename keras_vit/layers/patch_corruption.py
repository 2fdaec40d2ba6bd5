"""Corruption of patch embeddings for masked patch prediction (paper §4.6, App. B.1.2)."""

import keras
from keras import ops

# The corruption kinds, as `corruption_kinds` reports them per position.
KEPT, MASKED, REPLACED, UNCHANGED = 0, 1, 2, 3


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchCorruption(keras.layers.Layer):
    """Corrupts a fraction of the patch embeddings, BERT-style.

    In every image, `corruption_rate * tokens` positions (rounded half up, at
    least one) are chosen uniformly without replacement: the *corrupted*
    positions, whose patches the model is asked to predict. Each corrupted
    position, independently, is
      - replaced by the learnable [mask] embedding with probability `mask_prob`,
      - replaced by the (uncorrupted) embedding of a uniformly random *other*
        patch of the same image with probability `random_prob`,
      - left unchanged otherwise (the paper: 50%; 80% / 10% / 10%).
    The other positions are passed through untouched.

    The layer corrupts whenever it is called, in training and inference alike
    (it exists for the pre-training task; the fine-tuned model does not have
    it). Randomness comes from a `keras.random.SeedGenerator`, so a seeded layer
    gives the same sequence of corruptions on every run.

    Input shape: (batch, tokens, hidden) patch embeddings, before the class
    token and the position embeddings. Output: a tuple
      - (batch, tokens, hidden): the corrupted embeddings,
      - (batch, tokens) float: 1.0 at the corrupted positions, else 0.0.
    `corruption_kinds(inputs)` returns the per-position kind
    (KEPT / MASKED / REPLACED / UNCHANGED) instead, for inspection.

    Weight: `mask_embedding` (hidden,), initialised normal(stddev=0.02) like the
    position embeddings.

    Args:
        corruption_rate: fraction of positions corrupted per image, in (0, 1].
        mask_prob, random_prob: probabilities, for a corrupted position, of the
            [mask] embedding and of a random other patch; the rest stay unchanged.
        seed: int seed of the layer's SeedGenerator (None: random).
    """

    def __init__(
        self,
        corruption_rate=0.5,
        mask_prob=0.8,
        random_prob=0.1,
        seed=None,
        embeddings_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not 0.0 < corruption_rate <= 1.0:
            raise ValueError(f"corruption_rate must be in (0, 1], got {corruption_rate}.")
        if mask_prob < 0 or random_prob < 0 or mask_prob + random_prob > 1.0:
            raise ValueError(
                f"mask_prob={mask_prob} and random_prob={random_prob} must be >= 0 and "
                "sum to at most 1 (the rest of the corrupted patches stay unchanged)."
            )
        self.corruption_rate = float(corruption_rate)
        self.mask_prob = float(mask_prob)
        self.random_prob = float(random_prob)
        self.seed = seed
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or keras.initializers.RandomNormal(stddev=0.02)
        )
        self.seed_generator = keras.random.SeedGenerator(seed)

    def build(self, input_shape):
        if len(input_shape) != 3:
            raise ValueError(
                f"{self.name}: expected (batch, tokens, hidden) patch "
                f"embeddings, got shape {tuple(input_shape)}."
            )
        if self.random_prob and input_shape[1] is not None and input_shape[1] < 2:
            raise ValueError(
                f"{self.name}: random_prob={self.random_prob} needs at least "
                f"2 patches to pick another from, got {input_shape[1]}."
            )
        self.mask_embedding = self.add_weight(
            name="mask_embedding", shape=(input_shape[-1],), initializer=self.embeddings_initializer
        )

    def num_corrupted(self, num_tokens):
        """Positions corrupted per image of `num_tokens` patches."""
        return max(1, int(self.corruption_rate * num_tokens + 0.5))

    def corruption_kinds(self, embeddings):
        """(batch, tokens) int32 corruption kinds (KEPT, MASKED, REPLACED or
        UNCHANGED), drawn from the layer's seed generator."""
        shape = ops.shape(embeddings)
        batch, tokens = shape[0], shape[1]
        num_tokens = embeddings.shape[1]
        if num_tokens is None:
            raise ValueError(f"{self.name}: the number of tokens must be known.")
        # Rank of a uniform draw: the `k` lowest ranks are k positions chosen
        # uniformly without replacement.
        noise = keras.random.uniform((batch, tokens), seed=self.seed_generator)
        ranks = ops.argsort(ops.argsort(noise, axis=-1), axis=-1)
        corrupted = ranks < self.num_corrupted(num_tokens)
        draw = keras.random.uniform((batch, tokens), seed=self.seed_generator)
        kind = ops.where(
            draw < self.mask_prob,
            MASKED,
            ops.where(draw < self.mask_prob + self.random_prob, REPLACED, UNCHANGED),
        )
        return ops.cast(ops.where(corrupted, kind, KEPT), "int32")

    def call(self, embeddings):
        kinds = self.corruption_kinds(embeddings)
        return self.apply_corruption(embeddings, kinds), ops.cast(
            ops.not_equal(kinds, KEPT), embeddings.dtype
        )

    def apply_corruption(self, embeddings, kinds):
        """Corrupts (batch, tokens, hidden) `embeddings` as (batch, tokens) `kinds` say."""
        shape = ops.shape(embeddings)
        batch, tokens = shape[0], shape[1]
        # A uniformly random other position: own index + an offset in [1, tokens).
        offset = keras.random.randint((batch, tokens), 1, tokens, seed=self.seed_generator)
        source = (ops.arange(tokens)[None, :] + offset) % tokens
        source = ops.broadcast_to(ops.expand_dims(source, -1), shape)
        others = ops.take_along_axis(embeddings, source, axis=1)
        mask = ops.broadcast_to(
            ops.cast(self.mask_embedding, embeddings.dtype), ops.shape(embeddings)
        )
        kinds = ops.expand_dims(kinds, -1)
        out = ops.where(kinds == MASKED, mask, embeddings)
        return ops.where(kinds == REPLACED, others, out)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape), tuple(input_shape[:2])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "corruption_rate": self.corruption_rate,
                "mask_prob": self.mask_prob,
                "random_prob": self.random_prob,
                "seed": self.seed,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            }
        )
        return config
