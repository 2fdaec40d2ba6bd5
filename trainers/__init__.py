"""Training programs for keras_vit on tf.distribute (see trainers/README.md)."""
