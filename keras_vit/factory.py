"""Build, then load: the one path from a `weights=` value to a model.

`from_weights(weights, **arguments)` opens the checkpoint once
(`keras_vit.checkpoint.open_source`: a registry name, an AugReg file name or a
URL is downloaded once into the cache, a path is read), builds
`VisionTransformer(**arguments)` with what the checkpoint records where the
arguments leave it open (resolution, channels, classifier, pre_logits width,
classes: `CHECKPOINT_DEFAULTS`; and the sizes, `ARCHITECTURE`, where the file records a
whole model config: a run directory, a `.keras` file, or where its shapes give them: a
timm / transformers state dict, `keras_vit.checkpoint.sizes`), then assigns the checkpoint's arrays
(`keras_vit.checkpoint.loader.load`). The named builders (`ViT_B16(weights=...)`,
`HybridViT`, `build_model`) are `from_weights` calls, as keras.applications'
functions and keras-hub's `from_preset` build, then load.

Imports go one way: this module -> `keras_vit.vision_transformer` (which reads no
file) and -> `keras_vit.checkpoint` (which builds no model).
"""

from keras_vit.applications_args import NOT_GIVEN
from keras_vit.checkpoint import loader, sizes, source
from keras_vit.families import FAMILY_OPTIONS
from keras_vit.vision_transformer import VisionTransformer

# The constructor arguments that follow the checkpoint where not given (None, or
# NOT_GIVEN for representation_size, whose None means "no pre_logits"): what it
# records of the model, and the options of its family (timm's exact GELU, ...).
CHECKPOINT_DEFAULTS = (
    "image_size",
    "channels",
    "classifier",
    "representation_size",
    "num_classes",
    *FAMILY_OPTIONS,
    "preprocessing",  # the input normalisation a timm / transformers file states
)


# The sizes a whole model config records (a run directory's or a `.keras` file's, a timm /
# transformers config.json's: `Source.config`): `from_weights` takes them from it where
# the arguments do not give them, as it takes `CHECKPOINT_DEFAULTS` from any checkpoint.
ARCHITECTURE = ("patch_size", "hidden_size", "mlp_dim", "num_heads", "num_layers", "resnet")


def from_weights(weights, **arguments):
    """A `VisionTransformer` built from what `weights` records, then loaded from it.

    Args:
        weights: a registry name ('imagenet21k', ... see
            `keras_vit.checkpoint.registry`), 'augreg:<AugReg file name>' (any
            file of gs://vit_models/augreg/, `keras_vit.checkpoint.augreg`), an
            https:// or gs:// URL of an official `.npz`, a path to an official
            `.npz`, a `.keras` or a `.weights.h5` file or a trainers/ run
            directory, a timm state dict (`.safetensors`, `.bin`, `.pth`) or
            Hub directory, a transformers ViT directory
            (`keras_vit.checkpoint.interop`), or an opened
            `keras_vit.checkpoint.Source`. None: no weights,
            `VisionTransformer(**arguments)`.
        **arguments: `VisionTransformer`'s (keras.applications' included). The
            architecture (patch_size, hidden_size, ..., resnet) is theirs, else
            the file's (a config it records, or a state dict's shapes), else the
            constructor's defaults; where they leave `CHECKPOINT_DEFAULTS`
            open, the checkpoint's values are used. What a state dict cannot
            tell and no published model of its shape settles (its heads, a CLIP
            tower's QuickGELU, ...: `keras_vit.checkpoint.sizes`) must be given. A file
            that states it has no head builds headless (its features) unless
            `include_top=True`, `num_classes` or `classes` asks for one. Another
            `num_classes` gives a fresh zero head, another `image_size` resized position embeddings,
            other `channels` an adapted RGB kernel. `posemb_resize` ('official',
            'timm', 'transformers') chooses how position embeddings are resized
            (default: as the file's own code, `keras_vit.checkpoint.load`).
    Returns:
        the model, its weights loaded.
    Raises:
        TypeError: an unknown keyword argument (named).
        FileNotFoundError, ValueError (an unknown registry name, a malformed
        AugReg name or URL, an AugReg checkpoint of another architecture,
        contradictory arguments), `keras_vit.checkpoint.registry.DownloadError`
        (not cached and not downloadable: the URL and the cache path are named),
        CheckpointError (a file that is not a checkpoint, or does not fit, or
        does not say an argument that is not given: named),
        `keras_vit.run_directory.RunDirectoryError` (a run without its model).
    """
    posemb_resize = arguments.pop("posemb_resize", None)  # `loader.load`'s option
    if weights is None:
        return VisionTransformer(**arguments)
    given = VisionTransformer.given_arguments(**arguments)
    opened = weights
    if not isinstance(weights, source.Source):
        arch = source.architecture(
            given["patch_size"],
            given["hidden_size"],
            given["mlp_dim"],
            given["num_heads"],
            given["num_layers"],
            given["resnet"],
            given=[key for key in ARCHITECTURE if key in arguments],
        )
        opened = source.open_source(weights, arch)
    sizes.require_determined(opened.origin, opened.metadata, arguments)
    opened = sizes.determined(opened)  # the arguments say what the file does not
    # The sizes the file records: a whole config's, else those its shapes give.
    found = {**(opened.metadata.get("sizes") or {}), **(opened.config or {})}
    recorded = {
        key: found[key]
        for key in ARCHITECTURE
        if found.get(key) is not None and key not in arguments
    }
    if recorded:
        arguments = {**recorded, **arguments}
        given = VisionTransformer.given_arguments(**arguments)
    model = VisionTransformer(**with_checkpoint_defaults(arguments, given, opened.metadata))
    return loader.load(model, opened, posemb_resize)


def with_checkpoint_defaults(arguments, given, metadata):
    """`arguments` with the checkpoint's value of each of `CHECKPOINT_DEFAULTS`
    that `given` (`VisionTransformer.given_arguments(**arguments)`) leaves open.

    A checkpoint without pre_logits gives representation_size None; the other
    keys are filled only where the checkpoint says them. A checkpoint that states
    it has no head (metadata include_top False: `keras_vit.checkpoint.metadata`)
    gives a headless model (its features) unless the arguments ask for a head
    (include_top, num_classes or classes given).
    """
    arguments = dict(arguments)
    asks_for_head = "include_top" in arguments or given["num_classes"] is not None
    if metadata.get("include_top") is False and not asks_for_head:
        arguments["include_top"] = False
    for key in CHECKPOINT_DEFAULTS:
        if key == "representation_size":
            if given[key] is NOT_GIVEN:
                arguments[key] = metadata.get(key)
        elif given[key] is None and metadata.get(key) is not None:
            arguments[key] = metadata[key]
    return arguments
