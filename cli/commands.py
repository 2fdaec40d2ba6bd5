"""The command lines of the programs that other programs start, in one place: the
trainers (`trainer_command`) and the tools (`tool_command`), run by this Python
from the repository's folders, so that what a test, a benchmark or tools/demo.py
starts is what a user types.

Stdlib only: importing this module starts nothing heavy.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
PY = sys.executable

# Where tools/demo.py and the benchmarks that train the demo's model keep its
# Fashion-MNIST records by default: under runs/, with everything else a run writes.
DEMO_DATA_DIR = os.path.join(ROOT, "runs", "data", "fashion_mnist")


def trainer_command(trainer, config, data_dir, model_dir, *extra):
    """`python trainers/<trainer>.py --config=... --data_dir=... --model_dir=... EXTRA`
    (trainer: pretrain | finetune) as an argument list; no --data_dir for None (a
    dataset named by the config, e.g. TFDS's)."""
    return [
        PY,
        os.path.join(ROOT, "trainers", f"{trainer}.py"),
        f"--config={config}",
        *([f"--data_dir={data_dir}"] if data_dir is not None else []),
        f"--model_dir={model_dir}",
        *extra,
    ]


def tool_command(tool, *flags):
    """`python tools/<tool>.py FLAGS` as an argument list."""
    return [PY, os.path.join(ROOT, "tools", f"{tool}.py"), *flags]
