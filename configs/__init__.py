"""The trainers' recipes (ml_collections config files), installed as keras_vit_configs.

A `--config` value names one by path or by name (`find`), so that the same command works
in the repository and with a wheel install, from any folder:

  --config=configs/fashion_mnist.py        a file (relative to the current folder)
  --config=configs/families.py:dinov2      a file with get_config's argument
  --config=fashion_mnist_hybrid            an installed recipe by name
  --config=families:dinov2                 ... with get_config's argument
  --config=configs/fashion_mnist.py        where no such file is here: the installed one

Stdlib only: finding a recipe imports none of them (nor TensorFlow); `load` imports
the one it loads.
"""

import os

FOLDER = os.path.dirname(os.path.abspath(__file__))  # the installed recipes
_PREFIX = "configs" + os.sep  # the repository's folder, as the docs' commands write it


class ConfigNotFound(ValueError):
    """A --config value that is neither a file nor an installed recipe's name."""


def names():
    """The installed recipes' names (each module of this package with a `get_config`)."""
    found = []
    for entry in sorted(os.listdir(FOLDER)):
        if entry.endswith(".py") and not entry.startswith("_"):
            with open(os.path.join(FOLDER, entry), encoding="utf-8") as f:
                if "\ndef get_config(" in f.read():
                    found.append(entry[:-3])
    return found


def find(value):
    """The config file ml_collections loads for `--config=value` (module docstring):
    `value` itself where its file part is a file (or a remote path), else the installed
    recipe it names, with the same `:argument`. Raises ConfigNotFound, one line listing
    the installed names."""
    file, colon, argument = value.partition(":")  # ml_collections splits at the first ":"
    if "://" in value or os.path.isfile(file):
        return value
    name = file[len(_PREFIX) :] if file.startswith((_PREFIX, "configs/")) else file
    name = name[:-3] if name.endswith(".py") else name
    if name and os.sep not in name and "/" not in name and name in names():
        return os.path.join(FOLDER, f"{name}.py") + colon + argument
    raise ConfigNotFound(
        f"--config={value}: no such file nor installed config (give a config file's path, or "
        f"one of {', '.join(names())}, e.g. --config=fashion_mnist or --config=families:dinov2)"
    )


def load(value):
    """The ConfigDict of `--config=value` (`find`; `:argument` passed to get_config), as
    the trainers' --config flag loads it: imports the recipe (and ml_collections)."""
    import importlib.util

    path, _, argument = find(value).partition(":")
    spec = importlib.util.spec_from_file_location("keras_vit_recipe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(argument) if argument else module.get_config()


def run_name(value):
    """The name a run of `--config=value` goes by (tools/demo.py's run folder):
    the recipe's file name, with its argument ('families_dinov2')."""
    file, _, argument = value.partition(":")
    name = os.path.splitext(os.path.basename(file))[0]
    return f"{name}_{argument}" if argument else name
