"""What a long run does when a host is taken or lost (docs/training.md, "Preemption and
lost workers").

Preemption: GCE, TPU VMs and Kubernetes send SIGTERM before they take a host.
`PreemptionHandler` saves the run's state at the next step boundary and then raises
`Preempted`; the trainer exits with EXIT_PREEMPTED after one line, and rerunning the
same command resumes at that step.
- Under MultiWorkerMirroredStrategy and TPUStrategy it is TensorFlow's own
  `tf.distribute.experimental.PreemptionCheckpointHandler`: the signalled worker
  agrees a step with the others through the coordination service and all of them save
  there (the chief's copy stays).
- Under the default and mirrored strategies (one process) a SIGTERM handler sets a
  flag, read at each step boundary; an evaluation running then is ended at its next
  batch (`evaluation_should_stop`), so the save does not wait for it.

A lost worker: TensorFlow's coordination service notices a worker whose heartbeats
stop and fails the collectives of the others; `lost_worker_line` turns that error into
one line naming the worker, and the trainer exits with EXIT_LOST_WORKER instead of
waiting. (`config.collective_timeout` adds a per-collective timeout, a debugging aid
that TensorFlow documents as such; off by default.)
"""

import logging
import re
import shutil
import signal
import tempfile
import threading

import tensorflow as tf

from keras_vit_trainers import controller

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


def _uses_tensorflow_handler(strategy):
    return isinstance(
        strategy, (tf.distribute.MultiWorkerMirroredStrategy, tf.distribute.TPUStrategy)
    )


class PreemptionHandler(controller.Action):
    """SIGTERM -> the state saved at the next step boundary (`save(step)`, every
    worker), then `Preempted`: the last action at every boundary of the controller
    (trainers/controller.py); use as a context manager around training (it owns the
    SIGTERM handler only there)."""

    def __init__(self, strategy, save, checkpoint_dir):
        self.strategy, self.save, self.checkpoint_dir = strategy, save, checkpoint_dir
        self._signalled = threading.Event()
        self._previous = None
        self._handler = None
        self._scratch = None
        self._step = 0

    def __enter__(self):
        if _uses_tensorflow_handler(self.strategy):
            # The handler restores and saves through the checkpoint it is given; ours
            # are saved by `save_fn` (so that they stay keyed by the step), and it gets
            # a checkpoint of its own, in a scratch folder, for its run counter.
            self._scratch = tempfile.mkdtemp(prefix="keras_vit_preemption_")
            manager = tf.train.CheckpointManager(tf.train.Checkpoint(), self._scratch, 1)
            config = tf.distribute.experimental.TerminationConfig(
                exit_fn=self._exit, save_fn=lambda: self.save(self._step)
            )
            self._handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                self.strategy.cluster_resolver, manager, termination_config=config
            )
        elif threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
        return False

    def _on_sigterm(self, signum, frame):
        if not self._signalled.is_set():
            log.info("SIGTERM: saving at the next step boundary, then stopping")
        self._signalled.set()

    def _exit(self):
        raise Preempted(self._step, self.checkpoint_dir)

    def after_steps(self, boundary):
        """At a step boundary: saves and raises Preempted when a worker was signalled."""
        self._step = int(boundary.step)
        if self._handler is not None:
            self._handler.save_checkpoint_if_preempted()
        elif self._signalled.is_set():
            self.save(self._step)
            raise Preempted(self._step, self.checkpoint_dir)

    def evaluation_should_stop(self):
        """Whether an evaluation should end now (a SIGTERM under a one-process
        strategy; the workers of a multi-worker run evaluate to the end)."""
        return self._signalled.is_set()


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
