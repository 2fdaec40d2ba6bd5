"""The one checkpoint entry point: what a `weights` value is, opened once.

`open_source(weights, arch)` classifies `weights` once, by the first of `KINDS`
that claims it, and returns a `Source`: the file it read, what the file records
for the model built from it (`metadata`, `keras_vit.checkpoint.metadata`; a
Keras file's whole model `config`) and a way to read its arrays under the
official names. `keras_vit.factory` builds a model from what it records;
`keras_vit.checkpoint.loader` assigns the arrays.

The kinds, in the order they are tried:

    Hub name          'hf://<org>/<name>' or 'hf-hub:<org>/<name>': a timm /
                      transformers repository, downloaded by huggingface_hub
                      (`hub`), opened as a timm / transformers directory
    AugReg file name  'augreg:<file name>': downloaded (`registry`), an .npz
    URL               http(s)://..., or any other URL of an .npz (gs://...):
                      downloaded; `registry.resolve` says which are allowed
    .keras file       a Keras model archive (`keras_files`)
    .weights.h5 file  Keras weights, with the config beside them if there is one
    timm / transformers file
                      a state dict: .safetensors, .bin, .pth, .pt (`interop`)
    timm / transformers directory
                      a Hub directory: config.json naming a timm `architecture`
                      or a transformers `model_type`, and model.safetensors or
                      pytorch_model.bin (`interop`)
    run directory     a trainers/ run (`keras_vit.run_directory`): its
                      model_config.json and model.weights.h5
    .npz file         an official checkpoint: a path ending in .npz, any other
                      existing file, or a path with a separator
    registry name     a short name of the model's variant ('imagenet21k', ...)

A new format is one more `Kind`: a test of the value and an opener returning a
`Source` whose `read` gives the official names (`keras_vit.checkpoint.layout`).
"""

import dataclasses
import functools
import os
from typing import Callable

from keras_vit import run_directory
from keras_vit.checkpoint import augreg, hub, interop, keras_files, metadata, npz, registry
from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.layers.resnet import resnet_stride
from keras_vit.variants import variant_name


@dataclasses.dataclass(frozen=True, eq=False)
class Source:
    """An opened checkpoint.

    Attributes:
        origin: the file it reads (a download's path in the cache, a run's
            model.weights.h5); `str(source)` is this.
        metadata: what the file records for the model built from it: classifier,
            channels, representation_size, num_classes, image_size, grid_size,
            where it says them (`keras_vit.checkpoint.metadata`).
        read: read(model) -> {official name: array}: the arrays, for the model
            they go to (a Keras weights file keeps them by layer, and the model's
            layers name them; an official file ignores the model).
        config: the model config a Keras file records (`get_config`), or a
            timm / transformers file's equivalent where its config.json records
            every size (`interop.model_config`); else None.
        kind: the name of the `Kind` that opened it.
    """

    origin: str
    metadata: dict
    read: Callable = dataclasses.field(repr=False)
    config: dict = None
    kind: str = None

    def __str__(self):
        return self.origin


@dataclasses.dataclass(frozen=True)
class Kind:
    """A kind of `weights` value: `claims(weights)` says whether a string is one;
    `open(weights, arch)` opens it (`open_source`'s arguments)."""

    name: str
    claims: Callable
    open: Callable


def architecture(patch_size, hidden_size, mlp_dim, num_heads, num_layers, resnet=None, given=None):
    """What `open_source` needs to know of the model a checkpoint goes to: its
    sizes (a square patch as an int, as the variants list it) and, for hybrids,
    the normalised `resnet` spec with its downsampling `stride`. `given`: the sizes
    its caller gave (the others are defaults, which a file that records its own
    sizes overrides: `keras_vit.from_weights`); None: all of them."""
    if not isinstance(patch_size, int) and patch_size[0] == patch_size[1]:
        patch_size = int(patch_size[0])
    arch = dict(
        patch_size=patch_size,
        hidden_size=hidden_size,
        mlp_dim=mlp_dim,
        num_heads=num_heads,
        num_layers=num_layers,
    )
    if resnet is not None:
        arch.update(resnet=resnet, stride=resnet_stride(resnet))
    if given is not None:
        arch["given"] = tuple(given)
    return arch


def open_source(weights, arch=None):
    """Classifies `weights` (a string or path) once and opens it.

    Args:
        weights: a registry short name ('imagenet21k', ... see
            `keras_vit.checkpoint.registry`), 'augreg:<AugReg file name>', an
            https:// or gs:// URL of an official `.npz`, or a path: an official
            `.npz`, a `.keras` or `.weights.h5` file, a trainers/ run directory,
            a timm or transformers state dict file or Hub directory; or a Hub
            name, 'hf://<org>/<name>' or 'hf-hub:<org>/<name>' (`hub`).
        arch: the architecture of the model it goes to (`architecture`; may hold
            'variant', its name): a short name and an AugReg name are that
            variant's, and it turns an official file's grid into a resolution.
            None where no model is known yet (a run directory or a Keras file
            record their own).
    Returns:
        the `Source`.
    Raises:
        FileNotFoundError: a path that does not exist.
        ValueError: a malformed AugReg name or URL, an AugReg checkpoint of another
            architecture (before any download); CheckpointError (a ValueError) for an
            unknown short name.
        registry.DownloadError: a download that cannot be made (offline, ...).
        ImportError: a Hub name without huggingface_hub installed.
        CheckpointError: a file that is not a checkpoint.
        keras_vit.run_directory.RunDirectoryError: a run directory without its
            exported model, or with an unreadable config.
    """
    weights = os.fspath(weights)
    kind = next(kind for kind in KINDS if kind.claims(weights))
    return dataclasses.replace(kind.open(weights, arch), kind=kind.name)


def _download(weights, arch):
    """A registry short name, an AugReg file name or a URL: its Entry, fetched
    into the cache (once), read as an official `.npz`."""
    variant = (arch.get("variant") or variant_name(arch)) if arch else None
    entry = registry.resolve(weights, variant)
    if entry is None:  # a CheckpointError (a ValueError): the programs' one line, exit 2
        known = registry.names_for(variant) if variant else []
        raise CheckpointError(
            f"weights={weights!r} is neither an existing file nor a registered "
            f"checkpoint name for {variant or 'this architecture'}"
            + (f" (registered: {', '.join(known)})" if known else "")
            + "; any published file is also 'augreg:<AugReg file name>' or an "
            "https:// / gs:// URL of its .npz."
        )
    path = os.fspath(registry.fetch(entry))
    params = npz.read_npz(path)
    meta = metadata.from_params(params, arch, entry, weights)
    return Source(path, meta, lambda model: params)


def _npz(path, arch):
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Weights file not found: {path}")
    params = npz.read_npz(path)
    return Source(path, metadata.from_params(params, arch), lambda model: params)


def _keras(path, arch):
    config = keras_files.read_archive_config(path)
    read = functools.partial(keras_files.read_archive_arrays, path)
    return Source(path, _recorded(config, path, CheckpointError), read, config)


def _weights_h5(path, arch):
    """A `.weights.h5` file: with its model's config beside it, what that records;
    without, nothing (the model's arguments say it all)."""
    if not run_directory.exists(path):
        raise FileNotFoundError(f"Weights file not found: {path}")
    config = keras_files.config_beside(path)
    meta = _recorded(config, path, CheckpointError) if config is not None else {}
    read = functools.partial(keras_files.read_weights_file, path)
    return Source(path, meta, read, config)


def _run(path, arch):
    """A training run's exported model; a directory with a model.weights.h5 and no
    config is read as that file alone."""
    run = run_directory.RunDirectory(path)
    if not run.has_model() and run_directory.exists(run.weights):
        return _weights_h5(run.weights, arch)
    config = run.read_model_config()  # RunDirectoryError: what is missing or unreadable
    meta = _recorded(config, run.model_config, run_directory.RunDirectoryError)
    read = functools.partial(keras_files.read_weights_file, run.weights)
    return Source(run.weights, meta, read, config)


def _interop_file(path, arch):
    origin, _, meta, read, config = interop.open_file(path, arch)
    return Source(origin, meta, read, config)


def _interop_directory(path, arch):
    origin, _, meta, read, config = interop.open_directory(path, arch)
    return Source(origin, meta, read, config)


def _hub(weights, arch):
    """A Hub name: its repository's files fetched (`hub.fetch`), opened as a
    timm / transformers directory."""
    return _interop_directory(hub.fetch(weights), arch)


def _recorded(config, origin, error):
    """`metadata.from_config`, its ValueError as `error` naming `origin`."""
    try:
        return metadata.from_config(config)
    except ValueError as e:
        raise error(f"{origin}: {e}") from e


def _is_url(weights):
    return weights.startswith(("http://", "https://")) or (
        "://" in weights and weights.partition("#")[0].endswith(".npz")
    )


def _is_npz_path(weights):
    return weights.endswith(".npz") or os.sep in weights or os.path.isfile(weights)


KINDS = (
    Kind("Hub name", hub.claims, _hub),
    Kind("AugReg file name", lambda w: w.startswith(augreg.PREFIX), _download),
    Kind("URL", _is_url, _download),
    Kind(".keras file", lambda w: w.endswith(".keras"), _keras),
    Kind(".weights.h5 file", lambda w: w.endswith(keras_files.WEIGHTS_SUFFIX), _weights_h5),
    Kind("timm / transformers file", interop.claims_file, _interop_file),
    Kind("timm / transformers directory", interop.claims_directory, _interop_directory),
    Kind("run directory", run_directory.isdir, _run),
    Kind(".npz file", _is_npz_path, _npz),
    Kind("registry name", lambda w: True, _download),
)
