"""Every layer within a Keras layer or model, found through public attributes only.

Keras keeps the list of a layer's sub-layers under a private name (what its own
`model_supports_jit` walks); its public `Model.layers` lists a model's direct layers
alone. `sublayers` walks what Keras' documented way of composing layers gives:
sub-layers held as attributes (alone, or in a list, tuple or dict, as Keras tracks
them; under torch also a torch Module's `named_children`) under names without a
leading underscore, and each model's `layers`. keras_vit's
own layers hold theirs that way; a built-in Keras layer that keeps its sub-layers under
private names (MultiHeadAttention's projections) counts as one layer here.
"""

import keras


def _children(value):
    """The layers `value` holds: itself if a layer, else those in a list, tuple or dict."""
    if isinstance(value, keras.layers.Layer):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [child for item in value for child in _children(item)]
    return []


def sublayers(layer):
    """The layers within `layer` at any depth, each once, `layer` itself not among
    them (module docstring); parents before their children."""
    seen = {id(layer)}
    found = []
    pending = [layer]
    while pending:
        parent = pending.pop(0)
        children = []
        if isinstance(parent, keras.Model):
            children += parent.layers
        attributes = dict(vars(parent))
        if hasattr(parent, "named_children"):
            # Under torch a Keras layer is a torch Module, which holds its sub-modules
            # apart from its other attributes (public: `named_children`).
            attributes.update(parent.named_children())
        for name, value in attributes.items():
            if not name.startswith("_"):
                children += _children(value)
        for child in children:
            if id(child) not in seen:
                seen.add(id(child))
                found.append(child)
                pending.append(child)
    return found
