"""The packages the OpenVINO export and its runtime need (the `openvino` extra:
openvino, and nncf for the int8 precisions), where the file keeps the precision
it is computed in, and the error every OpenVINO module of deploy/ raises.

Imported lazily, so that deploy/ loads without them and a missing one is named
with the command that installs it."""

import importlib

INSTALL_COMMAND = "pip install -e '.[openvino]'"
# Where an exported file keeps the inference precision it is to be computed in (its
# rt_info), for deploy/openvino_runtime.py to compile it under. Not OpenVINO's own
# `runtime_options`: its CPU plugin (2026.4) ignores an INFERENCE_PRECISION_HINT
# there, so another program must set the hint itself.
RUNTIME_PRECISION_KEY = ["keras_vit", "inference_precision"]


class ExportError(RuntimeError):
    """The model cannot be converted as asked, a package is missing, or the file
    does not follow its source; the message says which."""


def require(name):
    """The module `name` (openvino, nncf); ExportError naming the extra otherwise."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ExportError(
            f"the OpenVINO export needs {name} (not installed): `{INSTALL_COMMAND}` "
            "installs openvino and nncf."
        ) from e


def versions():
    """{package: version} of openvino (and nncf where installed)."""
    found = {"openvino": require("openvino").__version__}
    try:
        found["nncf"] = importlib.import_module("nncf").__version__
    except ImportError:
        pass
    return found
