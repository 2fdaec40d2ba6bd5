"""What a long run does when a host is taken or lost (docs/training.md, "Preemption and
lost workers"; the reasons in docs/design.md, "Faults").

Preemption: GCE, TPU VMs and Kubernetes send SIGTERM before they take a host. While
`fit` runs, `PreemptionWatch` turns SIGTERM into a flag; at the end of the step in
flight every worker learns whether any of them was signalled (one all-reduce of the
flag per step under MultiWorkerMirroredStrategy, so that all stop at the same step),
saves that step's checkpoint and stops; the trainer then exits with EXIT_PREEMPTED
after one line. Rerunning the same command resumes at that step, inside the
checkpoint interval (trainers/train_lib.py trains the interval's rest first).

Resume: under several workers each holds its own checkpoints; `resume_step` gathers
every worker's two (the newest and the one before it) once, before training, and all
restore the newest step that every worker holds, or the run stops with one line
naming each worker's steps.

A lost worker: collectives time out after `config.collective_timeout` seconds
(trainers/strategy.py) and TensorFlow's coordination service reports a worker whose
heartbeats stop; `lost_worker_line` turns either error into one line naming the
worker, and the trainer exits with EXIT_LOST_WORKER instead of waiting forever.
"""

import logging
import re
import signal
import threading

import keras
import tensorflow as tf

log = logging.getLogger("trainers")

# The trainer's exit codes for these events (docs/training.md lists them all). 75 is
# EX_TEMPFAIL of sysexits.h: try again later, as a scheduler should.
EXIT_PREEMPTED = 75
EXIT_LOST_WORKER = 4


class Preempted(Exception):
    """Training stopped on SIGTERM with the step in flight checkpointed."""

    def __init__(self, step, checkpoint_dir):
        super().__init__(
            f"preempted (SIGTERM): step {step} saved in {checkpoint_dir}; rerun the same "
            "command to resume from it"
        )
        self.step, self.checkpoint_dir = step, checkpoint_dir


class ResumeMismatch(ValueError):
    """The workers hold checkpoints of no common step."""


def _is_multi_worker(strategy):
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def _local_replicas(strategy):
    return max(1, len(strategy.extended.worker_devices))


def gather_per_worker(strategy, values):
    """`values` (a list of ints, the same length on every worker) of each worker, in
    worker order: [[worker 0's], [worker 1's], ...]. One all-gather under
    MultiWorkerMirroredStrategy; [values] under any other strategy."""
    if not _is_multi_worker(strategy):
        return [list(values)]
    local = tf.constant([list(values)], tf.int64)
    rows = strategy.gather(strategy.run(lambda: local), axis=0).numpy()
    # one row per replica; a worker's replicas are consecutive and hold the same values
    return [list(map(int, row)) for row in rows[:: _local_replicas(strategy)]]


def resume_step(strategy, held):
    """(step, which): the step every worker resumes from and which of this worker's
    checkpoints holds it ('latest' or 'previous'; None for step 0). `held`: this
    worker's (latest step, previous step), 0 for none. The newest step all workers
    hold; ResumeMismatch when they hold none in common but step 0."""
    per_worker = gather_per_worker(strategy, held)
    if not any(any(steps) for steps in per_worker):
        return 0, None  # a fresh run on every worker
    common = set.intersection(*({s for s in steps if s} for steps in per_worker))
    if not common:
        held_by = "; ".join(f"worker {i}: {_steps_text(s)}" for i, s in enumerate(per_worker))
        raise ResumeMismatch(
            f"the workers' checkpoints share no step ({held_by}): they cannot resume "
            "together. Restore the missing worker's checkpoints folder (RUN/checkpoints "
            "or RUN/workers/worker_N), or train into a new --model_dir."
        )
    step = max(common)
    return step, ("latest" if held[0] == step else "previous")


def _steps_text(steps):
    shown = [str(s) for s in steps if s]
    return "steps " + " and ".join(shown) if shown else "no checkpoint"


class PreemptionWatch(keras.callbacks.Callback):
    """SIGTERM during `fit` -> the step in flight saved by `checkpoint` (a
    callbacks.RunCheckpoint) on every worker, and training stopped.

    Use as a context manager around `fit` (it owns the SIGTERM handler only there,
    and puts the previous one back); `preempted_step` is the saved step, or None."""

    def __init__(self, strategy, checkpoint):
        super().__init__()
        self.strategy, self.checkpoint = strategy, checkpoint
        self.preempted_step = None
        self._signalled = threading.Event()
        self._previous = None
        self._all_reduce = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
        return False

    def _on_sigterm(self, signum, frame):
        if not self._signalled.is_set():
            log.info("SIGTERM: saving the step in flight, then stopping")
        self._signalled.set()

    def _any_worker_signalled(self):
        flag = int(self._signalled.is_set())
        if not _is_multi_worker(self.strategy):
            return bool(flag)
        if self._all_reduce is None:  # traced once: an eager collective costs ~50x more
            strategy = self.strategy

            @tf.function
            def all_reduce(flag):
                per_replica = strategy.run(tf.identity, args=(flag,))
                return strategy.reduce("SUM", per_replica, axis=None)

            self._all_reduce = all_reduce
        return bool(self._all_reduce(tf.constant(flag, tf.int32)).numpy())

    def on_train_batch_end(self, batch, logs=None):
        if self.preempted_step is not None or not self._any_worker_signalled():
            return
        self.preempted_step = self.checkpoint.save_step()
        self.model.stop_training = True


# "/job:worker/replica:0/task:1" in TensorFlow's errors names a task.
_TASK = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")
_LOST = (
    "heartbeat",
    "unavailable",
    "deadline exceeded",
    "deadline_exceeded",
    "timed out",
    "connection reset",
    "failed to connect",
    "socket closed",
    "peer",
)


def lost_worker_line(error, this_task=None, timeout=None):
    """One line naming the worker a collective lost, or None when `error` is not a
    lost peer (another error, to be reported as itself). `this_task`: (job, index) of
    this process, not named as lost."""
    if not isinstance(error, (tf.errors.OpError, RuntimeError)):
        return None
    text = str(error)
    lowered = text.lower()
    if not isinstance(error, (tf.errors.UnavailableError, tf.errors.DeadlineExceededError)):
        if not any(word in lowered for word in _LOST):
            return None
    tasks = [(job, int(i)) for job, i in _TASK.findall(text)]
    others = sorted({t for t in tasks if t != this_task})
    if others:
        who = ", ".join(f"{job} {i}" for job, i in others)
        named = f"lost {who}"
    else:
        named = "lost a worker"
    waited = f" (collective_timeout={timeout:g} s)" if timeout else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = next(
        (l for l in lines if any(w in l.lower() for w in _LOST)), lines[0] if lines else ""
    )
    return (
        f"{named}: a collective failed{waited}: {first[:200]}. Restart every worker with "
        "the same command: they resume from the newest step all of them saved."
    )
