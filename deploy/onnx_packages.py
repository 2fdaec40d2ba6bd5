"""The packages the ONNX export and its runtime need (the `onnx` extra: tf2onnx,
onnxruntime, onnx), and the error every ONNX module of deploy/ raises.

Imported lazily, so that deploy/ loads without them and a missing one is named
with the command that installs it."""

import importlib

REQUIRED = ("onnx", "onnxruntime", "tf2onnx")
INSTALL_COMMAND = "pip install -e '.[onnx]'"


class ExportError(RuntimeError):
    """The model cannot be exported as asked, a package is missing, or the file
    does not follow the model; the message says which."""


def require_packages():
    """{name: module} of tf2onnx, onnxruntime and onnx; ExportError naming the
    missing ones and the command that installs them."""
    modules, missing = {}, []
    for name in REQUIRED:
        try:
            modules[name] = importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ExportError(
            f"ONNX export needs {', '.join(missing)} (not installed): "
            f"`{INSTALL_COMMAND}` installs tf2onnx, onnxruntime and onnx."
        )
    return modules


def versions():
    """{package: version} of the packages the export and the runtime use."""
    return {
        name: getattr(module, "__version__", "?") for name, module in require_packages().items()
    }
