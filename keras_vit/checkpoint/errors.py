"""The error raised for unusable checkpoints."""


class CheckpointError(ValueError):
    """A weights file that cannot be loaded into the model: the message names the
    file and what is wrong (key, shapes, missing or unexpected keys)."""
