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


# The program folders and the names they are installed (and imported) under (setup.cfg).
ROOT = PACKAGE.parent
PROGRAM_FOLDERS = {
    "cli": "keras_vit_cli",
    "data": "keras_vit_data",
    "configs": "keras_vit_configs",
    "deploy": "keras_vit_deploy",
    "trainers": "keras_vit_trainers",
    "tools": "keras_vit_tools",
    "benchmarks": "keras_vit_benchmarks",
}


def folder_graph(root, folders):
    """{folder: the other folders its modules import} over `folders` ({folder on disk:
    installed name}) and keras_vit, imports inside functions included."""
    names = {"keras_vit": "keras_vit", **folders}
    folder_of = {}
    files = {}
    for folder, installed in names.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            module = ".".join((installed, *parts))
            folder_of[module] = folder
            files[module] = path
    graph = {folder: set() for folder in names}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [base]
            else:
                continue
            for target in targets:
                top = target.split(".")[0]
                for other, installed in names.items():
                    if top == installed and other != folder_of[module]:
                        graph[folder_of[module]].add(other)
    return graph


def test_the_folder_checker_sees_a_function_level_import_across_folders(tmp_path):
    for folder in ("keras_vit", "low", "high"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "high" / "a.py").write_text("from kv_low import b\n")
    (tmp_path / "low" / "b.py").write_text("def f():\n    from kv_high.a import g\n")
    graph = folder_graph(tmp_path, {"low": "kv_low", "high": "kv_high"})
    assert graph == {"keras_vit": set(), "low": {"high"}, "high": {"low"}}
    assert find_cycle(graph) in (["high", "low", "high"], ["low", "high", "low"])


def test_no_program_folder_imports_a_folder_that_imports_it_back():
    graph = folder_graph(ROOT, PROGRAM_FOLDERS)
    cycle = find_cycle(graph)
    assert cycle is None, "folders import one another: " + " -> ".join(cycle)
    # The floors: the library imports no program; cli/ imports none of ours but the
    # library; data/ only the library, configs and cli; deploy/ nothing above data.
    assert graph["keras_vit"] == set()
    assert graph["cli"] <= {"keras_vit"}
    assert graph["data"] <= {"keras_vit", "configs", "cli"}
    assert graph["deploy"] <= {"keras_vit", "configs", "cli", "data"}
    assert "tools" not in graph["trainers"] and "benchmarks" not in graph["tools"]


def test_every_program_folder_is_in_the_install_map():
    """setup.cfg's package_dir is the one map from folder to installed name: each
    program folder with an __init__.py is listed there, as this test's map says."""
    import configparser

    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    package_dir = dict(
        line.split("=")
        for line in setup["options"]["package_dir"].strip().splitlines()
        if line.strip()
    )
    package_dir = {k.strip(): v.strip() for k, v in package_dir.items()}
    assert package_dir == {installed: folder for folder, installed in PROGRAM_FOLDERS.items()}
    packages = {folder.name for folder in ROOT.iterdir() if (folder / "__init__.py").is_file()}
    assert packages == {"keras_vit", *PROGRAM_FOLDERS}
