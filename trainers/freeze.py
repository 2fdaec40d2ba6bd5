"""What a fine-tuning run trains: `config.freeze`.

none       every variable (full fine-tuning; the paper's recipe)
backbone   the head only (a linear probe on the frozen representation): every layer
           of the model but `head` is made non-trainable before compiling, so the
           optimizer, its weight decay and its EMA never see the backbone's variables
"""

MODES = ("none", "backbone")


def check(mode):
    """Raises ValueError naming the flag for an unknown `mode`."""
    if mode not in MODES:
        raise ValueError(
            f"--config.freeze={mode!r}: expected one of {', '.join(MODES)} "
            "(backbone: train the head only)"
        )


def apply(model, mode):
    """Makes `model`'s layers non-trainable as `mode` says (module docstring).

    Raises:
        ValueError: an unknown mode, or `backbone` on a model without a `head` layer
            (headless, or an objective such as masked patch prediction).
    """
    check(mode)
    if mode == "none":
        return
    names = [layer.name for layer in model.layers]
    if "head" not in names:
        raise ValueError(
            f"--config.freeze=backbone: model {model.name!r} has no 'head' layer to "
            "train (its layers: " + ", ".join(names) + ")"
        )
    for layer in model.layers:  # the model itself stays trainable, or nothing would be
        layer.trainable = layer.name == "head"
