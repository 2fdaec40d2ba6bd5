"""Where the model to deploy comes from: a trainer run directory, or a named
variant with weights; and the class names that label its outputs."""

import json

import keras_vit
from keras_vit import run_directory


class SourceError(ValueError):
    """The model, its weights or its class names cannot be used as given."""


def load_run_dir(run_dir):
    """The `keras_vit.VisionTransformer` exported by a training run directory
    (`keras_vit.run_directory`: RUN/model_config.json + RUN/model.weights.h5)."""
    try:
        return run_directory.RunDirectory(run_dir).read_model()
    except run_directory.RunDirectoryError as e:
        raise SourceError(f"--run_dir={run_dir}: {e}") from e


def build_named(name, weights, num_classes=None, image_size=None):
    """`keras_vit.build_model(name, weights=...)`, e.g. ('ViT_B16', 'imagenet21k').
    Weights are required: exporting random weights is never what is meant."""
    if not weights:
        raise SourceError(
            f"--model={name} needs --weights (a registry name such as "
            "'imagenet21k', or a .npz/.keras/.weights.h5 path)."
        )
    kwargs = {"weights": weights}
    if num_classes:
        kwargs["num_classes"] = int(num_classes)
    if image_size:
        kwargs["image_size"] = int(image_size)
    return keras_vit.build_model(name, **kwargs)


def load_model(run_dir=None, model=None, weights=None, num_classes=None, image_size=None):
    """The model named by exactly one of `run_dir` or `model` (+ `weights`)."""
    if bool(run_dir) == bool(model):
        raise SourceError("Give exactly one of --run_dir=RUN or --model=NAME --weights=W.")
    if run_dir:
        if weights or num_classes or image_size:
            raise SourceError(
                "--weights, --num_classes and --image_size go with --model; "
                "a --run_dir holds its own."
            )
        return load_run_dir(run_dir)
    return build_named(model, weights, num_classes, image_size)


def read_class_names(path, num_classes=None):
    """Class names from a text file (one per line) or a JSON file with a
    'class_names' list (tools/make_tfrecords.py's manifest.json, a run's
    class_names.json); there must be exactly `num_classes` of them (None: any number).
    Local or remote paths (`keras_vit.run_directory`'s file I/O)."""
    if not run_directory.exists(path):
        raise SourceError(f"--class_names={path}: no such file.")
    with run_directory.open_file(path) as f:
        if path.endswith(".json"):
            try:
                names = json.load(f).get("class_names")
            except (json.JSONDecodeError, AttributeError) as e:
                raise SourceError(f"{path}: expected a JSON object with 'class_names'.") from e
            if not isinstance(names, list):
                raise SourceError(f"{path}: no 'class_names' list.")
        else:
            names = [line.rstrip("\r\n") for line in f if line.strip()]
    if num_classes is not None and len(names) != num_classes:
        raise SourceError(
            f"{path} has {len(names)} class names; the model has {num_classes} classes."
        )
    return [str(name) for name in names]
