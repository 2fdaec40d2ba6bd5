"""The command lines of the programs that other programs start, in one place: the
trainers (`trainer_command`) and the tools (`tool_command`), run by this Python as
installed modules (`python -m keras_vit_trainers.pretrain ...`, `python -m
keras_vit_tools.<tool> ...`), so that what a test, a benchmark or tools/demo.py starts is
what a user types, from the repository or from a wheel install, in any folder.

Stdlib only: importing this module starts nothing heavy.
"""

import os
import sys

# The folder above cli/: the repository in a checkout (the benchmarks and tests read and
# write their results there). In a wheel install it is site-packages: no program writes
# under it; theirs go under the current folder or the folders their flags give.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable

# Where tools/demo.py (and the benchmarks that train the demo's model) keep its
# Fashion-MNIST records by default: under runs/ of the current folder, with the run.
DEMO_DATA_DIR = os.path.join("runs", "data", "fashion_mnist")


def trainer_command(trainer, config, data_dir, model_dir, *extra):
    """`python -m keras_vit_trainers.<trainer> --config=... --data_dir=... --model_dir=...
    EXTRA` (trainer: pretrain | finetune) as an argument list; no --data_dir for None (a
    dataset named by the config, e.g. TFDS's)."""
    return [
        PY,
        "-m",
        f"keras_vit_trainers.{trainer}",
        f"--config={config}",
        *([f"--data_dir={data_dir}"] if data_dir is not None else []),
        f"--model_dir={model_dir}",
        *extra,
    ]


def tool_command(tool, *flags):
    """`python -m keras_vit_tools.<tool> FLAGS` as an argument list."""
    return [PY, "-m", f"keras_vit_tools.{tool}", *flags]
