"""The kernel's share of a real trainer run, input pipeline included: the trainer's
minor page faults a second and its system share of CPU time, sampled every
--every seconds from /proc/PID/stat (all its threads) while it runs.

  python benchmarks/trainer_faults.py [--config=fashion_mnist_hybrid] [--steps=1200] \
      [--data_dir=runs/data/fashion_mnist] [--every=10] [--config.KEY=VALUE ...]

benchmarks/step_faults.py measures the update alone (synthetic batch) under each
allocator; this one the whole trainer (`python -m keras_vit_trainers.pretrain`), so that
tf.data's buffers and the decoded cache are counted too. Its start (imports, the decoded
cache, XLA) shows as the first samples; training is the steady ones after it. Run it
with LD_PRELOAD=... to try an allocator. Linux only. Prints one line per sample, then the
trainer's output.
"""

import os
import subprocess
import sys
import tempfile
import time

import keras_vit_configs
from keras_vit_cli import commands, console
from keras_vit_tools.demo import _opt


def sample(pid):
    """(minor faults, user seconds, system seconds) of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[7]), int(fields[11]) / tick, int(fields[12]) / tick


def main(argv):
    args = list(argv)
    config = keras_vit_configs.find(_opt(args, "config", "fashion_mnist_hybrid"))
    steps = int(_opt(args, "steps", "1200"))
    data_dir = _opt(args, "data_dir", commands.DEMO_DATA_DIR)
    every = float(_opt(args, "every", "10"))
    model_dir = tempfile.mkdtemp(prefix="trainer_faults_")
    cmd = commands.trainer_command(
        "pretrain",
        config,
        data_dir,
        model_dir,
        "--strategy=default",
        f"--config.total_steps={steps}",
        f"--config.warmup_steps={steps // 15}",  # the demo configs' share
        f"--config.checkpoint_every={steps}",
        "--config.evals.test.every=0",
        *args,
    )
    out = tempfile.TemporaryFile("w+")
    env = console.quiet_environment(dict(os.environ))
    trainer = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    before = None
    while trainer.poll() is None:
        try:
            now = (time.time(), *sample(trainer.pid))
        except OSError:  # it ended between poll and read
            break
        if before:
            seconds, faults = now[0] - before[0], now[1] - before[1]
            user, system = now[2] - before[2], now[3] - before[3]
            print(
                f"{seconds:4.1f} s: {faults / seconds:9.0f} faults/s, user {user:5.1f} s, "
                f"system {system:4.1f} s ({100 * system / max(user + system, 1e-9):4.1f}%)",
                flush=True,
            )
        before = now
        time.sleep(every)
    out.seek(0)
    print(out.read()[-2000:])
    sys.exit(trainer.returncode)


if __name__ == "__main__":
    main(sys.argv[1:])
