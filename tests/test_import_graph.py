"""keras_vit's modules import one another without a circle, imports inside
functions included (a circle closed inside a function still ties the modules
together: neither can be understood, tested or loaded without the other)."""

import ast
import pathlib

import keras_vit

PACKAGE = pathlib.Path(keras_vit.__file__).parent


def module_name(path, root):
    """'keras_vit.checkpoint.loader' for <root>/keras_vit/checkpoint/loader.py; a
    package's __init__.py is the package."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path, root, modules):
    """The modules of `modules` that the file `path` imports, at any depth of its
    code (inside functions too).

    `from P import n` is an edge to the module P.n where that is a module (P's
    __init__ running first is Python's way of reaching it, not something the
    importer uses), else to P; `import P.n` is an edge to P.n. Relative imports
    are resolved against the file's package."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                edges.add(submodule if submodule in modules else base)
    return {edge for edge in edges if edge in modules and edge != name}


def import_graph(package):
    """{module: the modules it imports} for every .py file under `package`."""
    root = package.parent
    paths = sorted(package.rglob("*.py"))
    modules = {module_name(path, root) for path in paths}
    return {module_name(path, root): imported_modules(path, root, modules) for path in paths}


def find_cycle(graph):
    """A list of modules [a, b, ..., a] that import one another in a circle, or
    None (depth-first search: a module reached again while still on the path)."""
    on_path, done = [], set()

    def visit(module):
        if module in on_path:
            return on_path[on_path.index(module) :] + [module]
        if module in done:
            return None
        on_path.append(module)
        for target in sorted(graph[module]):
            cycle = visit(target)
            if cycle:
                return cycle
        on_path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        cycle = visit(module)
        if cycle:
            return cycle
    return None


def test_a_circle_closed_inside_a_function_is_found(tmp_path):
    """The checker itself, on a package of three files."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def f():\n    from pkg.a import g\n")
    (package / "c.py").write_text("from . import b\nimport os\n")
    graph = import_graph(package)
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.b"}}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]
    (package / "b.py").write_text("def f():\n    import pkg\n")
    graph = import_graph(package)
    assert graph["pkg.b"] == {"pkg"} and find_cycle(graph) is None


def test_keras_vit_has_no_import_cycle():
    graph = import_graph(PACKAGE)
    assert {"keras_vit.checkpoint.loader", "keras_vit.vision_transformer"} <= set(graph)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
