"""No private Keras API anywhere in the repository (issue 47).

Every tracked .py file (`git ls-files '*.py'`) is parsed, and these are failures, each
named file:line:

- an import of Keras' private tree or of the Keras 2 packages: `keras.src`,
  `keras._tf_keras`, `tf_keras` (`import`, `from ... import`, `importlib.import_module`,
  or the attribute `keras.src`);
- an underscored attribute reached through the `keras` module (`keras.backend._x`,
  `keras.Model._x`), and a Keras attribute assigned (`keras.Model.fit = ...`,
  `setattr(keras.X, ...)`): patching Keras. Tests may fake a public Keras function with
  pytest's `monkeypatch`, which undoes it after the test;
- a private attribute of Keras' classes (`KERAS_PRIVATE`: every `_name` the classes in
  `KERAS_CLASSES` and their Keras/TensorFlow bases define or set on `self`, read from the
  installed Keras) reached on an object (`model._jit_compile`, `super()._flatten_layers()`),
  or defined, or reached on `self`/`cls`, inside a Keras class of ours (a subclass of a
  Keras class, or a mixin listed among such a subclass's bases): an override.

Our own underscored names are not Keras': `self._inputs` in a class that is not a Keras
class, a module's `_helper`, and an attribute of ours on a Keras subclass whose name
Keras does not use, are fine.
"""

import ast
import functools
import inspect
import os
import subprocess
import textwrap

import keras

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRIVATE_MODULES = ("keras.src", "keras._tf_keras", "tf_keras")

# The Keras classes whose private names are refused: the bases a Keras program subclasses
# or drives (the trainers' loop: Model, optimizers, callbacks, losses, metrics, random
# generators). Each one's Keras/TensorFlow bases are read too.
KERAS_CLASSES = (
    keras.layers.Layer,
    keras.Model,
    keras.Sequential,
    keras.Variable,
    keras.Loss,
    keras.Metric,
    keras.metrics.Mean,
    keras.random.SeedGenerator,
    keras.optimizers.schedules.LearningRateSchedule,
    *(
        obj
        for module in (keras.optimizers, keras.callbacks)
        for obj in vars(module).values()
        if inspect.isclass(obj)
    ),
)


def _is_private(name):
    return name.startswith("_") and not name.startswith("__")


@functools.lru_cache(maxsize=None)
def _private_names_of(cls):
    """The underscored names `cls` defines or sets on `self` in its source."""
    names = {name for name in vars(cls) if _is_private(name)}
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return names
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and _is_private(node.attr)
        ):
            names.add(node.attr)
    return names


def keras_private_names(classes=KERAS_CLASSES):
    """Every private name of `classes` and of their bases from Keras or TensorFlow."""
    names = set()
    for base in {base for cls in classes for base in inspect.getmro(cls)}:
        if base.__module__.split(".")[0] in ("keras", "tensorflow"):
            names |= _private_names_of(base)
    return names - {"_abc_impl"}


KERAS_PRIVATE = keras_private_names()


def _dotted(node):
    """'a.b.c' for a chain of names and attributes; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _keras_chain(node, keras_names):
    """The dotted name of `node` if it is reached through the keras module (`keras.x`,
    an alias of keras, `tf.keras.x`), else None."""
    dotted = _dotted(node)
    if dotted is None:
        return None
    head = dotted.split(".")[0]
    if head in keras_names or dotted.startswith(("tf.keras.", "tensorflow.keras.")):
        return dotted
    return None


def _private_module(name):
    return any(name == m or name.startswith(m + ".") for m in PRIVATE_MODULES)


def _resolve(dotted, keras_names):
    """The Keras class a dotted base name (`keras.layers.Layer`, `K.Model`,
    `tf.keras.Model`) names in the installed Keras, or None."""
    parts = dotted.split(".")
    if parts[0] in ("tf", "tensorflow") and parts[1:2] == ["keras"]:
        parts = parts[1:]
    if parts[0] not in keras_names:
        return None
    obj = keras
    for part in parts[1:]:
        obj = getattr(obj, part, None)
    return obj if inspect.isclass(obj) else None


def _keras_classes(trees, private):
    """{simple name: the Keras private names it must not define or use on self} for the
    classes of `trees` that are Keras classes: a base reached through keras (its own
    private names, or all of `private` where it cannot be resolved), a base that is such
    a class of ours, or a mixin listed among the bases of one (the names of the class it
    is mixed into)."""
    classes = {}  # simple name -> base dotted names
    names = {}
    for tree, keras_names in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [_dotted(base) or "" for base in node.bases]
                classes[node.name] = classes.get(node.name, []) + bases
                for base in node.bases:
                    if _keras_chain(base, keras_names):
                        cls = _resolve(_dotted(base), keras_names)
                        own = keras_private_names([cls]) if cls else private
                        names[node.name] = names.get(node.name, set()) | own
    while True:
        grown = {name: set(own) for name, own in names.items()}
        for name, bases in classes.items():
            ours = {base.split(".")[-1] for base in bases} & set(classes)
            for base in ours & set(names):  # a subclass of a Keras class of ours
                grown[name] = grown.get(name, set()) | names[base]
            if name in names:  # its mixins
                for mixin in ours:
                    grown[mixin] = grown.get(mixin, set()) | names[name]
        if grown == names:
            return names
        names = grown


def _keras_aliases(tree):
    """The names the keras module goes by in a file (`keras`, `import keras as k`)."""
    names = {"keras"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname for a in node.names if a.name == "keras" and a.asname}
    return names


def _on_self(node):
    """Whether `node` is `self`, `cls` or `super()`: the class's own attributes."""
    if isinstance(node, ast.Call):
        return _dotted(node.func) == "super"
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _in_test_monkeypatch(call):
    return isinstance(call.func, ast.Attribute) and _dotted(call.func.value) == "monkeypatch"


def violations(sources, private=None):
    """[(path, line, what)] for {path: source}: the module docstring's rules."""
    private = KERAS_PRIVATE if private is None else private
    parsed = {path: ast.parse(source, path) for path, source in sources.items()}
    trees = [(tree, _keras_aliases(tree)) for tree in parsed.values()]
    keras_classes = _keras_classes(trees, private)
    found = []
    for path, tree in parsed.items():
        keras_names = _keras_aliases(tree)

        def flag(node, what, path=path):
            found.append((path, node.lineno, what))

        def visit(node, own, keras_names=keras_names):
            # `own`: the Keras private names of the Keras class `node` is in, or empty.
            if isinstance(node, ast.ClassDef):
                own = keras_classes.get(node.name, set())
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _private_module(alias.name):
                        flag(node, f"imports {alias.name}")
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
                if _private_module(node.module) or any(map(_private_module, names)):
                    flag(node, f"imports from {node.module}")
            elif isinstance(node, ast.Call):
                func = _dotted(node.func) or ""
                first = node.args[0] if node.args else None
                if (
                    func.split(".")[-1] in ("import_module", "__import__")
                    and isinstance(first, ast.Constant)
                    and isinstance(first.value, str)
                    and _private_module(first.value)
                ):
                    flag(node, f"imports {first.value}")
                if (
                    func == "setattr"
                    and first is not None
                    and _keras_chain(first, keras_names)
                    and not _in_test_monkeypatch(node)
                ):
                    flag(node, f"patches {_dotted(first)}")
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Attribute) and _keras_chain(target, keras_names):
                        flag(node, f"patches {_dotted(target)}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name in own:
                    flag(node, f"overrides Keras' {node.name}")
            if isinstance(node, ast.Attribute):
                chain = _keras_chain(node, keras_names)
                if chain and (node.attr == "src" or node.attr == "_tf_keras"):
                    flag(node, f"uses {chain}")
                elif chain and _is_private(node.attr):
                    flag(node, f"uses {chain}")
                elif _on_self(node.value):
                    if node.attr in own:
                        flag(node, f"uses Keras' private .{node.attr}")
                elif node.attr in private:
                    flag(node, f"uses Keras' private .{node.attr}")
            for child in ast.iter_child_nodes(node):
                visit(child, own, keras_names)

        visit(tree, set())
    return sorted(set(found))


def _tracked_sources():
    paths = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    sources = {}
    for path in paths:
        full = os.path.join(ROOT, path)
        if os.path.exists(full):  # tracked but deleted in the work tree: nothing to read
            with open(full, encoding="utf-8") as f:
                sources[path] = f.read()
    return sources


def test_no_private_keras_api_in_the_repository():
    found = violations(_tracked_sources())
    assert not found, "private Keras API:\n" + "\n".join(
        f"{path}:{line}: {what}" for path, line, what in found
    )


def test_the_private_names_are_keras_own_and_cover_what_we_used_to_reach():
    for name in (
        "_resolve_auto_jit_compile",  # keras_vit/compilation.py, before issue 47
        "_flatten_layers",
        "_inbound_nodes",
        "_distribute_strategy",
        "_jit_compile",
        "_compute_loss",  # trainers/keras_workarounds.py
        "_symbolic_build",
        "_loss_tracker",
        "_all_reduce_sum_gradients",  # trainers/optimizers.py
        "_save_model",  # BackupAndRestore (the former trainers/callbacks.py)
        "_current_epoch",
        "_last_batch_seen",
    ):
        assert name in KERAS_PRIVATE, name
    assert all(_is_private(name) for name in KERAS_PRIVATE)


BAD = """
import keras
import keras.src.trainers
import tf_keras
from keras.src.utils import file_utils
from keras import src
import importlib
importlib.import_module("keras.src.saving")
import keras as K


class Model(K.Model):
    def _resolve_auto_jit_compile(self):
        return super()._resolve_auto_jit_compile()


class Mixin:
    def _flatten_layers(self):
        return self._layers


class Net(Mixin, keras.layers.Layer):
    pass


def helper(model, layer):
    keras.Model.fit = None
    setattr(keras.Model, "fit", None)
    return model._jit_compile, keras.backend._private, keras.src.ops, layer._inbound_nodes
"""
BAD_LINES = {
    3: "imports keras.src.trainers",
    4: "imports tf_keras",
    5: "imports from keras.src.utils",
    6: "imports from keras",
    8: "imports keras.src.saving",
    13: "overrides Keras' _resolve_auto_jit_compile",
    14: "uses Keras' private ._resolve_auto_jit_compile",
    18: "overrides Keras' _flatten_layers",
    19: "uses Keras' private ._layers",
    27: "patches keras.Model.fit",
    28: "patches keras.Model",
}
CLEAN = """
import keras


class Classifier:  # not a Keras class: its `_inputs` is ours
    def _inputs(self, x):
        return x

    def predict(self, x):
        return self._inputs(x)


class Block(keras.layers.Layer):
    def _helper(self):  # a name Keras does not use
        return self._own_state


def _layers(state):
    return state


def test_fake(monkeypatch):
    monkeypatch.setattr(keras.distribution, "list_devices", lambda: [])
"""


def test_the_check_finds_each_kind_and_spares_our_own_names():
    found = violations({"bad.py": BAD})
    by_line = {}
    for _, line, what in found:
        by_line.setdefault(line, []).append(what)
    for line, what in BAD_LINES.items():
        assert what in by_line.get(line, []), (line, what, by_line.get(line))
    assert {
        "uses Keras' private ._jit_compile",
        "uses keras.backend._private",
        "uses keras.src",
        "uses Keras' private ._inbound_nodes",
    } <= set(by_line[29])
    assert violations({"clean.py": CLEAN}) == []
