"""`make wheel-check`: keras_vit installs and runs as a library from its wheel alone.

    .venv/bin/python .ci/wheel_check.py

1. Copies the files git tracks or would track (a fresh clone's tree, with uncommitted edits)
   to a temporary folder and builds the sdist and, from the sdist, the wheel (`python -m
   build`), then `twine check --strict` on both.
2. Checks the wheel's file list against the source tree and setup.cfg (its one owner): every
   module under the packages' folders, the package data, nothing else (no tests, no runs).
3. Installs the wheel with its own requirements (Keras, NumPy, SciPy, absl-py,
   ml-collections) and its `jax` extra into a fresh venv: Keras' numpy backend imports JAX
   (its convolutions and FFTs are JAX's): whatever the backend, Keras needs one of
   TensorFlow, JAX or torch, and JAX is the smallest. No TensorFlow or torch may come along.
4. There, from an empty folder (the repository is not on the path) and under
   KERAS_BACKEND=numpy, builds a tiny ViT on an official-layout checkpoint and compares its
   logits with the float64 NumPy reference (tests/numpy_vit.py) within the fidelity goal of
   tests/test_fidelity.py; checks decode_predictions (the shipped class names) and that
   `keras_vit.__version__` is the wheel's version.

5. Installs the wheel with its `tensorflow-cpu,train` extras (`PROGRAM_EXTRAS`) into a
   second fresh venv and, from an empty folder, runs the programs as a user of the wheel
   does (`PROGRAMS`): `keras-vit-make-tfrecords` on a small folder of PNG images the check
   draws, `keras-vit-demo --steps=2` on those records (its recipe found in the installed
   configs, its trainer and export tools started as modules), `keras-vit-pretrain
   --config=fashion_mnist` (a recipe by name) for two steps, `keras-vit-export-savedmodel`
   of that run, and `keras-vit-pretrain --help` (exit 0, its own usage). Everything they
   write must be under the folder (`check_written`): nothing in site-packages. The demo's
   run must hold its two steps' metrics, the SavedModel and the float16 TFLite report,
   and its output must name the metrics (`check_demo`).

Prints one line per step; a failure exits non-zero with one line naming the problem.
"""

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

# The tiny model of step 4: `random_params` names and `build_model` (VisionTransformer) ones.
TINY = dict(patch=8, hidden=32, mlp=64, heads=2, layers=2, grid=(4, 4), num_classes=3)
TINY_KWARGS = dict(patch_size=8, hidden_size=32, mlp_dim=64, num_heads=2, num_layers=2)
IMAGE_SHAPE = (2, 32, 32, 3)  # (batch, height, width, channels): the checkpoint's 4x4 grid
CLASS_INDICES = [0, 999]  # decode_predictions: the first and last ImageNet-1k class
# The wheel's extra that gives Keras' numpy backend what it imports (setup.cfg's `jax`).
EXTRA = "jax"
# Distributions the library must not pull in, nor import under the numpy backend.
HEAVY = ("tensorflow", "tf-keras", "torch")


class CheckError(Exception):
    """A failed check: its message is the one line printed."""


def say(message):
    print(f"wheel-check: {message}", flush=True)


def run(command, what, **kwargs):
    """Runs `command` with its output captured; a failure raises with its last lines."""
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-15:]
        raise CheckError(f"{what} failed (exit {result.returncode}):\n" + "\n".join(tail))
    return result.stdout


def copy_source(dest):
    """The files of a fresh clone, with the working tree's edits: git's tracked files and
    untracked ones it does not ignore (no build/, *.egg-info/ or caches from earlier runs)."""
    listing = run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        f"git ls-files in {ROOT} (the check builds from a git checkout)",
    )
    for name in filter(None, listing.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is left out
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def package_layout(setup_cfg):
    """(version, {package: source folder relative to the root}, {package: data globs}),
    read from setup.cfg by setuptools (its `attr:` version statically, as the build does)."""
    from setuptools.config.setupcfg import read_configuration

    config = read_configuration(str(setup_cfg))
    options = config["options"]
    package_dir = options.get("package_dir", {})

    def folder(package):
        top, _, rest = package.partition(".")
        return "/".join(filter(None, [package_dir.get(top, top), rest.replace(".", "/")]))

    folders = {package: folder(package) for package in options["packages"]}
    return config["metadata"]["version"], folders, options.get("package_data", {})


def expected_wheel_files(src, folders, package_data):
    """{path in the wheel: path in `src`}: every module under each top-level package's
    folder (so that a subpackage missing from setup.cfg shows) and the package data."""
    expected = {}
    for package, folder in folders.items():
        if "." in package:
            continue  # walked with its top-level package
        for path in sorted((src / folder).rglob("*.py")):
            expected[f"{package}/{path.relative_to(src / folder).as_posix()}"] = path
    for package, patterns in package_data.items():
        base = src / folders[package]
        for pattern in patterns:
            for path in sorted(base.glob(pattern)):
                wheel_path = f"{package.replace('.', '/')}/{path.relative_to(base).as_posix()}"
                expected[wheel_path] = path
    return expected


def check_wheel_files(wheel, src, folders, package_data):
    """The wheel holds exactly the expected files, byte for byte; returns their count."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if not n.split("/")[0].endswith(".dist-info")]
        expected = expected_wheel_files(src, folders, package_data)
        missing = sorted(set(expected) - set(names))
        if missing:
            raise CheckError(
                f"{wheel.name} lacks {missing[0]} (from {expected[missing[0]].relative_to(src)}"
                f"; {len(missing)} missing in all): is its package in setup.cfg [options] "
                "packages, its data in [options.package_data]?"
            )
        extra = sorted(set(names) - set(expected))
        if extra:
            raise CheckError(
                f"{wheel.name} holds {extra[0]} ({len(extra)} unexpected files in all), which "
                "is no module of a package folder nor package data"
            )
        for name in names:
            if archive.read(name) != expected[name].read_bytes():
                raise CheckError(f"{wheel.name}: {name} differs from {expected[name]}")
    return len(names)


def check_sdist_files(sdist, folders, name, version):
    """The sdist holds the packages' folders and the build's own files, nothing else."""
    allowed = {folder.split("/")[0] for folder in folders.values()}
    allowed |= {"PKG-INFO", "setup.cfg", "pyproject.toml", "README.md", "MANIFEST.in"}
    allowed |= {f"{name}.egg-info"}
    licenses = ("LICEN[CS]E*", "COPYING*", "NOTICE*", "AUTHORS*")  # setuptools adds these
    prefix = f"{name}-{version}"
    with tarfile.open(sdist) as archive:
        for member in archive.getnames():
            top, _, rest = member.partition("/")
            first = rest.split("/")[0]
            known = first in allowed or any(fnmatch.fnmatch(first, p) for p in licenses)
            if top != prefix or (rest and not known):
                raise CheckError(f"{sdist.name} holds {member}: not a package nor a build file")


def build(src, dist):
    """The sdist and the wheel (built from the sdist), checked by twine; their paths."""
    started = time.monotonic()
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(src)], "python -m build")
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise CheckError(f"python -m build made {wheels + sdists}, not one wheel and one sdist")
    seconds = time.monotonic() - started
    run([sys.executable, "-m", "twine", "check", "--strict", *map(str, wheels + sdists)], "twine")
    say(f"built {sdists[0].name} and {wheels[0].name} ({seconds:.0f} s); twine check passed")
    return wheels[0], sdists[0]


def install(venv, wheel, extras=EXTRA):
    """A fresh venv holding the wheel, its requirements and its `extras`; returns its
    Python and the seconds taken."""
    started = time.monotonic()
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "python -m venv")
    python = venv / "bin" / "python"
    # This environment's pip installs into the new interpreter (no pip inside it to set up).
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-compile",  # Python compiles what it imports: a third of the time saved
            f"{wheel}[{extras}]",
        ],
        f"pip install {wheel.name}[{extras}]",
    )
    return python, time.monotonic() - started


def make_case(folder):
    """Writes the checkpoint and the images of step 4; returns what the run must give:
    the float64 reference logits, their tolerance and decode_predictions' classes."""
    os.environ["KERAS_BACKEND"] = "numpy"  # this process's own keras_vit: no TensorFlow to load
    sys.path.insert(0, str(TESTS))
    from numpy_vit import random_params, vit_forward
    from test_fidelity import ATOL  # float32 logits vs the float64 reference: the goal

    sys.path.insert(0, str(ROOT))
    import keras_vit

    params = random_params(**TINY, seed=0)
    np.savez(folder / "checkpoint.npz", **params)
    images = np.random.default_rng(1).uniform(-1, 1, IMAGE_SHAPE).astype(np.float32)
    np.save(folder / "images.npy", images)
    expected = vit_forward(params, images, num_layers=TINY["layers"])
    one_hot = np.eye(1000, dtype=np.float32)[CLASS_INDICES]
    decoded = json.loads(json.dumps(keras_vit.decode_predictions(one_hot, top=1)))
    return expected, ATOL, decoded


# Run by the fresh venv's Python with -I (no PYTHONPATH, no user site, no script folder on
# sys.path) in an empty folder; argv: the case folder. Prints one JSON object.
CHILD = """
import importlib.metadata, json, sys
from pathlib import Path
import numpy as np
import keras
import keras_vit

case = Path(sys.argv[1])
model = keras_vit.build_model({kwargs}, weights=str(case / "checkpoint.npz"))
logits = model.predict(np.load(case / "images.npy"), verbose=0)
np.save(case / "logits.npy", logits)
print(json.dumps(dict(
    backend=keras.backend.backend(),
    module=keras_vit.__file__,
    prefix=sys.prefix,
    version=keras_vit.__version__,
    installed_version=importlib.metadata.version("keras_vit"),
    keras=keras.__version__,
    numpy=np.__version__,
    jax=importlib.metadata.version("jax"),
    imported=sorted(name for name in {heavy} if name in sys.modules),
    distributions=sorted(d.metadata["Name"].lower() for d in importlib.metadata.distributions()),
    decoded=keras_vit.decode_predictions(np.eye(1000, dtype=np.float32)[{indices}], top=1),
)))
"""


def run_installed(python, case, cwd):
    """Step 4's program in the fresh venv; returns its report and logits."""
    env = {**os.environ, "KERAS_BACKEND": "numpy", "KERAS_HOME": str(cwd / "keras_home")}
    modules = tuple(name.replace("-", "_") for name in HEAVY)
    code = CHILD.format(kwargs=TINY_KWARGS, heavy=modules, indices=CLASS_INDICES)
    output = run(
        [str(python), "-I", "-c", code, str(case)],
        "the tiny forward pass in the fresh venv",
        cwd=cwd,
        env=env,
    )
    return json.loads(output.strip().splitlines()[-1]), np.load(case / "logits.npy")


def check_installed(report, logits, expected, atol, decoded, version):
    """Step 4's checks on the report of `run_installed`."""
    if report["backend"] != "numpy":
        raise CheckError(f"the fresh venv ran Keras' {report['backend']} backend, not numpy")
    if not report["module"].startswith(report["prefix"]):
        raise CheckError(f"keras_vit came from {report['module']}, not the fresh venv")
    if report["imported"]:
        raise CheckError(f"import keras_vit loaded {report['imported']} under the numpy backend")
    heavy = [d for d in report["distributions"] if d.startswith(HEAVY)]
    if heavy:
        raise CheckError(f"installing the wheel pulled in {heavy}: check install_requires")
    if report["version"] != version or report["installed_version"] != version:
        raise CheckError(
            f"keras_vit.__version__ is {report['version']!r} and the installed metadata says "
            f"{report['installed_version']!r}, the wheel {version!r}"
        )
    if report["decoded"] != decoded:
        raise CheckError(f"decode_predictions gave {report['decoded']}, expected {decoded}")
    if logits.shape != expected.shape:
        raise CheckError(f"logits of shape {logits.shape}, expected {expected.shape}")
    error = np.abs(logits.astype(np.float64) - expected)
    worst = tuple(int(i) for i in np.unravel_index(np.argmax(error), error.shape))
    if not error[worst] <= atol:  # NaN fails too
        raise CheckError(
            f"logits[{worst}] = {logits[worst]} differ from the float64 reference "
            f"{expected[worst]:.6g} by {error[worst]:.3g} (> {atol:g})"
        )
    return error[worst]


# Step 5: the extras the programs need, and a small image folder for them.
PROGRAM_EXTRAS = "tensorflow-cpu,train"
IMAGE_SPLITS = {"train": 8, "test": 4}  # PNGs per class and split
IMAGE_CLASSES = ("a", "b", "c")
IMAGE_SIDE = 28  # the demo recipes' image size
# A model of milliseconds per step, whatever the recipe, and batches the folder fills.
TINY_FLAGS = (
    "--config.batch_size=8",
    "--config.evals.test.batch_size=8",
    "--config.jit_compile=False",
)
VIT_FLAGS = (
    "--config.model.hidden_size=16",
    "--config.model.mlp_dim=32",
    "--config.model.num_heads=2",
    "--config.model.num_layers=1",
    "--config.model.patch_size=7",
)
# (what, the command from the empty folder); `{run}` is the pre-training run's folder.
PROGRAMS = (
    (
        "keras-vit-make-tfrecords on a folder of images",
        ["keras-vit-make-tfrecords", "--source=folder:images", "--output_dir=data", "--noprogress"],
    ),
    ("keras-vit-demo --steps=2", ["keras-vit-demo", "--steps=2", "--data_dir=data", *TINY_FLAGS]),
    (
        "keras-vit-pretrain --config=fashion_mnist",
        [
            "keras-vit-pretrain",
            "--config=fashion_mnist",
            "--data_dir=data",
            "--model_dir=runs/vit",
            "--config.total_steps=2",
            "--config.warmup_steps=0",
            *TINY_FLAGS,
            *VIT_FLAGS,
        ],
    ),
    (
        "keras-vit-export-savedmodel",
        ["keras-vit-export-savedmodel", "--run_dir=runs/vit", "--output=runs/vit/export/1"],
    ),
    ("keras-vit-pretrain --help", ["keras-vit-pretrain", "--help"]),
)
# The demo's run folder: its default recipe's name (tools/demo.py DEMO_CONFIG).
DEMO_RUN = "fashion_mnist_hybrid"
# What the folder holds after them: the check's images, and what the programs wrote.
WRITTEN = {"images", "data", "runs"}


def write_images(folder):
    """IMAGE_SPLITS' grey PNGs in folder/{split}/{class}/ (class k: band k bright)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    band = IMAGE_SIDE // len(IMAGE_CLASSES)
    for split, count in IMAGE_SPLITS.items():
        for k, name in enumerate(IMAGE_CLASSES):
            (folder / split / name).mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 60, (IMAGE_SIDE, IMAGE_SIDE), dtype=np.uint8)
                pixels[k * band : (k + 1) * band] += 150
                Image.fromarray(pixels).save(folder / split / name / f"{i}.png")


def listing(folder):
    """The names in `folder` (a set)."""
    return {path.name for path in folder.iterdir()}


def check_written(cwd_names, site_before, site_after):
    """The programs wrote only under the folder they ran in: it holds WRITTEN alone,
    and site-packages (its names before and after) gained nothing."""
    if cwd_names != WRITTEN:
        raise CheckError(
            f"the programs' folder holds {sorted(cwd_names)}, expected {sorted(WRITTEN)}"
        )
    added = sorted(site_after - site_before)
    if added:
        raise CheckError(f"the programs wrote {added} into site-packages")


def site_packages(python):
    """The fresh venv's site-packages folder."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(run([str(python), "-I", "-c", code], "sysconfig").strip())


def run_programs(python, cwd, home):
    """Step 5's programs in the venv of `python`, from the empty folder `cwd`; returns
    the seconds each took and `--help`'s output."""
    bin_dir = python.parent
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KERAS_BACKEND")}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        KERAS_HOME=str(home / "keras"),
        HOME=str(home),  # nothing of the user's: TFDS, matplotlib and Keras write under HOME
        CUDA_VISIBLE_DEVICES="",
    )
    write_images(cwd / "images")
    site = site_packages(python)
    before = listing(site)
    seconds, outputs = {}, {}
    for what, command in PROGRAMS:
        started = time.monotonic()
        outputs[what] = run([str(bin_dir / command[0]), *command[1:]], what, cwd=cwd, env=env)
        seconds[what] = time.monotonic() - started
    check_written(listing(cwd), before, listing(site))
    check_demo(cwd / "runs" / DEMO_RUN, outputs["keras-vit-demo --steps=2"])
    return seconds, outputs["keras-vit-pretrain --help"]


def check_demo(run_dir, output):
    """`keras-vit-demo --steps=2` trained its two steps into runs/DEMO_RUN, exported the
    SavedModel and the float16 TFLite file with its report, and named its metrics."""
    metrics = run_dir / "metrics.json"
    if not metrics.is_file() or json.loads(metrics.read_text()).get("step") != 2:
        raise CheckError(f"the demo left no metrics.json of step 2 in {run_dir}")
    for written in ("export/saved_model/1/saved_model.pb", "export/model_float16.json"):
        if not (run_dir / written).is_file():
            raise CheckError(f"the demo wrote no {written} in {run_dir}")
    agreement = json.loads((run_dir / "export/model_float16.json").read_text())["top1_agreement"]
    if not 0 <= agreement <= 1:
        raise CheckError(f"the demo's TFLite report gives top-1 agreement {agreement}")
    if f"runs/{DEMO_RUN}/metrics.json" not in output:
        raise CheckError(f"the demo's output names no runs/{DEMO_RUN}/metrics.json")


def check_help(output):
    """`keras-vit-pretrain --help` printed the program's own usage and an example."""
    for expected in ("keras-vit-pretrain --config=", "Example", "--model_dir"):
        if expected not in output:
            raise CheckError(f"keras-vit-pretrain --help printed no {expected!r}")


def main():
    with tempfile.TemporaryDirectory(prefix="keras_vit_wheel_") as temp:
        temp = Path(temp)
        src, dist, case, cwd = (temp / name for name in ("src", "dist", "case", "cwd"))
        for folder in (src, case, cwd):
            folder.mkdir()
        copy_source(src)
        version, folders, package_data = package_layout(src / "setup.cfg")
        wheel, sdist = build(src, dist)
        name, wheel_version = wheel.name.split("-")[:2]
        if wheel_version != version:
            raise CheckError(f"{wheel.name} is not version {version} (setup.cfg's)")
        count = check_wheel_files(wheel, src, folders, package_data)
        check_sdist_files(sdist, folders, name, version)
        say(f"{wheel.name}: {count} files, those of {len(folders)} packages and their data")
        python, seconds = install(temp / "venv", wheel)
        say(f"installed {wheel.name}[{EXTRA}] into a fresh venv ({seconds:.0f} s)")
        expected, atol, decoded = make_case(case)
        report, logits = run_installed(python, case, cwd)
        error = check_installed(report, logits, expected, atol, decoded, version)
        say(
            f"keras_vit {version} on keras {report['keras']}, numpy {report['numpy']}, jax "
            f"{report['jax']} (no {', '.join(HEAVY)}), KERAS_BACKEND=numpy, outside the "
            f"repository: logits {logits.shape} within {atol:g} of the float64 reference "
            f"(largest difference {error:.2g}), ImageNet class names shipped"
        )
        programs_python, seconds = install(temp / "venv_programs", wheel, PROGRAM_EXTRAS)
        say(f"installed {wheel.name}[{PROGRAM_EXTRAS}] into a fresh venv ({seconds:.0f} s)")
        empty = temp / "empty"
        empty.mkdir()
        seconds, help_text = run_programs(programs_python, empty, temp / "home")
        check_help(help_text)
        say(
            "from an empty folder: "
            + ", ".join(f"{what} ({s:.0f} s)" for what, s in seconds.items())
            + f"; they wrote only {', '.join(f'{n}/' for n in sorted(WRITTEN - {'images'}))} there"
        )


if __name__ == "__main__":
    try:
        main()
    except CheckError as error:
        sys.exit(f"wheel-check: {error}")
