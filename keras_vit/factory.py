"""`weights=`: the one place where a model's weights argument is resolved.

`VisionTransformer(..., weights=w)` and everything built on it (the named
builders `ViT_B16(weights=w)`, `HybridViT`, `build_model`) construct through
`VisionTransformer.__init__`, which hands `w` to `resolve_weights` below: it
opens the weights (a registry name, an AugReg file name or a URL is downloaded
once into the cache, a path is read), completes the constructor's arguments
with what the checkpoint implies (resolution, channels, classifier, pre_logits
width, classes) where they were not given, and returns the opened source, which `load` assigns once the (pure) model graph
is built. Nothing else in `keras_vit` opens files or the network to build a
model: with `weights=None`, and in `from_config`, construction touches neither.

Imports go one way: `vision_transformer` -> `factory` -> `checkpoint.loader`.
Neither this module nor the loader imports the model class; where a source
model must be rebuilt from its config (a `.weights.h5` beside its config), the
class is passed in (`model_class`).
"""

from keras_vit.checkpoint import loader


class _NotGiven:
    """The default of an argument whose None is a value of its own (e.g.
    `representation_size=None`: no pre_logits layer), so that "not given" (follow
    the checkpoint, or the model's own default) can be told apart from None."""

    __slots__ = ()

    def __repr__(self):
        return "<not given>"

    def __reduce__(self):  # copies and pickles stay the singleton
        return "NOT_GIVEN"


NOT_GIVEN = _NotGiven()

# The constructor arguments that follow the checkpoint where not given (None, or
# NOT_GIVEN for representation_size, whose None means "no pre_logits").
CHECKPOINT_DEFAULTS = ("image_size", "channels", "classifier", "representation_size", "num_classes")


def resolve_weights(weights, arguments, model_class):
    """Opens `weights` for the architecture in `arguments` and fills in, where not
    given, what the checkpoint implies.

    Args:
        weights: a registry name ('imagenet21k', ... see
            `keras_vit.checkpoint.registry`), 'augreg:<AugReg file name>' (any
            file of gs://vit_models/augreg/, `keras_vit.checkpoint.augreg`), an
            https:// or gs:// URL of an official `.npz`, or a path to an official
            `.npz`, a `.keras` or a `.weights.h5` file (or a trainers/ run
            directory).
        arguments: the constructor's arguments as a dict: the architecture
            (patch_size, hidden_size, mlp_dim, num_heads, num_layers; `resnet`
            normalised, or None) and `CHECKPOINT_DEFAULTS`, None where not given
            (NOT_GIVEN for representation_size).
        model_class: builds a source model from its config (`from_config`),
            for a `.weights.h5` file with its config beside it.
    Returns:
        (arguments, source): a copy of `arguments` with the checkpoint's values
        where not given, and the opened `loader.WeightsSource` for `load`.
    Raises:
        FileNotFoundError, ValueError (an unknown registry name, a malformed
        AugReg name or URL, an AugReg checkpoint of another architecture),
        `keras_vit.checkpoint.registry.DownloadError` (not cached and not
        downloadable: the URL and the cache path are named), CheckpointError.
    """
    arch = loader.architecture(
        arguments["patch_size"],
        arguments["hidden_size"],
        arguments["mlp_dim"],
        arguments["num_heads"],
        arguments["num_layers"],
        arguments.get("resnet"),
    )
    source = loader.open_source(weights, arch, model_class)
    meta = source.metadata
    arguments = dict(arguments)
    for key in CHECKPOINT_DEFAULTS:
        if key == "representation_size":
            if arguments[key] is NOT_GIVEN:
                arguments[key] = meta.get(key)  # a checkpoint without pre_logits: none
        elif arguments[key] is None and meta.get(key) is not None:
            arguments[key] = meta[key]
    return arguments, source


def load(model, source):
    """Assigns an opened source (`resolve_weights`) to the model built from its
    arguments: all-or-nothing, resizing position embeddings, fresh heads."""
    loader.load_source(model, source)
