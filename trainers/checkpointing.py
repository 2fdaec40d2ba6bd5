"""The run's checkpoints: `tf.train.CheckpointManager`s keyed by the optimizer step.

RUN/checkpoints holds the newest `keep` checkpoints (`ckpt-STEP`), and with
`keep_every` > 0, RUN/checkpoints/history one checkpoint of every multiple of
`keep_every` steps, never deleted: the history to roll back to after a divergence.
The state (`training_state`) is the model's variables, the optimizer's (moments, EMA,
step), and so every random generator's state of the model (dropout, attention dropout,
stochastic depth): a resume is exact with them on, and it restores onto any number of
replicas or workers.

One copy per job: the chief writes; under MultiWorkerMirroredStrategy the other
workers take part in each save (as tf.distribute requires) into a folder of their own
that is removed at once. With `async_save` the chief's saves run in TensorFlow's
background thread (`CheckpointOptions(experimental_enable_async_checkpoint=True)`):
training waits only for the copy of the state off the devices.

RUN/checkpoints/plan.json records the global batch and the steps of the run whose
checkpoints these are: a resume under another global batch or another schedule length
is refused in one line (the data position and the learning rate are functions of
them). A time limit that brought the schedule's end forward (trainers/time_limit.py)
records it there too (`record_shortening`): the step it starts at, its end and the
learning rate there, which a resume restores (`shortening`).
"""

import json
import os
import posixpath
import re
import shutil
import tempfile

import tensorflow as tf

from keras_vit import run_directory
from keras_vit_trainers import controller

PLAN_FILE = "plan.json"
HISTORY = "history"
PREFIX = "ckpt"
# What the releases before this one wrote (Keras' BackupAndRestore files; a copy per
# worker under RUN/workers): refused with one line, not misread.
OLD_FILES = ("training_metadata.json", "latest.weights.h5")


class CheckpointError(ValueError):
    """Checkpoints that cannot be resumed: another plan, an old format, a missing step."""


def training_state(model, optimizer):
    """The tf.train.Checkpoint of everything a resume needs (module docstring): the
    tf.Variables behind the model's variables (its weights and its random generators'
    states) and the optimizer's (step, moments, EMA), by position. TensorFlow's own
    variables, not the Keras objects, so that TensorFlow's asynchronous saving can copy
    them (it cannot copy a Keras 3 variable: "tf.function only supports singleton
    tf.Variables", Keras 3.15 / TF 2.21; tests/test_checkpointing.py)."""
    return tf.train.Checkpoint(
        model=_variables(model.variables), optimizer=_variables(optimizer.variables)
    )


def saved_steps(directory):
    """The steps of the checkpoints in `directory` and its history, newest first
    (without opening them)."""
    paths = []
    for folder in (directory, os.path.join(directory, HISTORY)):
        state = tf.train.get_checkpoint_state(folder) if run_directory.exists(folder) else None
        paths += list(state.all_model_checkpoint_paths) if state else []
    return sorted({s for s in map(_step_of, paths) if s is not None}, reverse=True)


def _step_of(path):
    match = re.search(rf"{PREFIX}-(\d+)$", path)
    return int(match.group(1)) if match else None


def checkpoint_path(directory, step=None):
    """(step, the prefix of its checkpoint) in `directory` or its history, the newest
    for step None; CheckpointError naming the steps there when it has none of `step`."""
    steps = saved_steps(directory)
    step = steps[0] if step is None and steps else step
    for folder in (directory, os.path.join(directory, HISTORY)):
        path = os.path.join(folder, f"{PREFIX}-{step}")
        if step is not None and tf.io.gfile.exists(path + ".index"):
            return int(step), path
    held = ", ".join(map(str, steps)) or "none"
    raise CheckpointError(f"{directory} has no checkpoint of step {step} (it has: {held}).")


def _variables(objects):
    """The tf.Variables behind Keras variables (what a checkpoint holds, by position)."""
    return [v.value for v in objects]


def restore_model(model, directory, step=None):
    """Restores the variables of `model` (built, of the run's architecture) from the
    checkpoint of `step` (default: the newest) in `directory` (RUN/checkpoints): the
    weights of that step, to look at, evaluate or export (the optimizer's state is left
    out). Returns the step; CheckpointError when there is none."""
    step, path = checkpoint_path(directory, step)
    tf.train.Checkpoint(model=_variables(model.variables)).restore(path).expect_partial()
    return step


def check_not_old(directory):
    """CheckpointError when `directory` (RUN/checkpoints) or RUN/workers holds the
    checkpoints of a release before tf.train checkpoints."""
    run = posixpath.dirname(directory.rstrip("/"))  # not normpath: it breaks gs://, ram://
    old = [os.path.join(directory, n) for n in OLD_FILES]
    old.append(os.path.join(run, "workers"))
    found = [p for p in old if run_directory.exists(p)]
    if found:
        raise CheckpointError(
            f"{found[0]} is a checkpoint of an earlier keras_vit release (Keras "
            "BackupAndRestore), which this trainer does not resume: finish that run with "
            "the release that started it, or start a new --model_dir with "
            f"--init={os.path.join(run, 'model.weights.h5')} if the run exported weights."
        )


class RunCheckpoints:
    """Saves and restores `state` (a tf.train.Checkpoint) in `directory`."""

    def __init__(self, directory, state, *, chief=True, keep=3, keep_every=0, async_save=False):
        self.directory, self.state, self.chief = directory, state, chief
        self.keep_every = int(keep_every or 0)
        self.options = tf.train.CheckpointOptions(experimental_enable_async_checkpoint=async_save)
        self.async_save = bool(async_save) and chief
        run_directory.makedirs(directory)
        self.manager = tf.train.CheckpointManager(
            state, directory, max_to_keep=int(keep) if keep else None, checkpoint_name=PREFIX
        )
        self.history = None
        if self.keep_every:
            self.history = tf.train.CheckpointManager(
                state, os.path.join(directory, HISTORY), max_to_keep=None, checkpoint_name=PREFIX
            )

    # --- restore ------------------------------------------------------------------------

    def restore(self, step):
        """Restores the checkpoint of `step`; returns the step. CheckpointError for a
        step not there (naming those that are), or a checkpoint of another model."""
        step, path = checkpoint_path(self.directory, step)
        try:
            # A variable of another shape fails in `restore` (ValueError), of another
            # dtype in its RestoreV2 op, a missing one in the assertion.
            self.state.restore(path).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.InvalidArgumentError) as e:
            raise CheckpointError(
                f"{path} does not hold this run's model and optimizer ({str(e)[:200]}); "
                "train into a new --model_dir."
            ) from e
        return step

    # --- save ---------------------------------------------------------------------------

    def save(self, step):
        """Saves the state as step `step` (every worker calls it; the chief's stays).
        A checkpoint of this step left by an earlier run (one resumed from an older
        step, --config.resume_step) is of another history: written over."""
        step = int(step)
        if not self.chief:
            temporary = tempfile.mkdtemp(prefix="keras_vit_worker_checkpoint_")
            try:
                self.state.write(os.path.join(temporary, PREFIX))
            finally:
                shutil.rmtree(temporary, ignore_errors=True)
            return
        self.manager.save(checkpoint_number=step, options=self.options)
        if self.keep_every and step % self.keep_every == 0:
            self.history.save(checkpoint_number=step, options=self.options)

    def sync(self):
        """Waits for asynchronous saves to be written."""
        if self.async_save:
            self.state.sync()


def check_plan(directory, planned, resumed_step):
    """Writes RUN/checkpoints/plan.json on a fresh run; on a resume refuses another
    global batch or another number of steps in one line (CheckpointError)."""
    path = os.path.join(directory, PLAN_FILE)
    if not resumed_step or not run_directory.exists(path):
        with run_directory.open_file(path, "w") as f:
            json.dump(planned, f)
        return
    try:
        with run_directory.open_file(path) as f:
            saved = json.load(f)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e}); delete it to resume anyway.") from e
    changed = {k: (saved.get(k), v) for k, v in planned.items() if saved.get(k) != v}
    if changed:
        what = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changed.items())
        raise CheckpointError(
            f"{directory} holds checkpoints of another plan ({what}): resuming would change "
            "the data order or the schedule. Rerun with the run's batch_size and total_steps "
            "(any number of workers or replicas), or train into a new --model_dir."
        )


def record_shortening(directory, at, end, learning_rate):
    """Adds the schedule's shortening (from step `at` to end at step `end`, from
    `learning_rate`) to RUN/checkpoints/plan.json."""
    path = os.path.join(directory, PLAN_FILE)
    with run_directory.open_file(path) as f:
        planned = json.load(f)
    planned["shortened"] = {"at": int(at), "end": int(end), "learning_rate": float(learning_rate)}
    with run_directory.open_file(path, "w") as f:
        json.dump(planned, f)


def shortening(directory):
    """(at, end, learning_rate) of the shortening `record_shortening` recorded in
    `directory`'s plan, or None. CheckpointError naming the file for a malformed one."""
    path = os.path.join(directory, PLAN_FILE)
    if not run_directory.exists(path):
        return None
    with run_directory.open_file(path) as f:
        record = json.load(f).get("shortened")
    if record is None:
        return None
    try:
        at, end, lr = int(record["at"]), int(record["end"]), float(record["learning_rate"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(
            f"{path}: 'shortened' is not a schedule shortening ({e!r}); expected at, end "
            "and learning_rate"
        ) from None
    if not 0 <= at < end:
        raise CheckpointError(f"{path}: 'shortened' has at={at}, end={end}: expected at < end")
    return at, end, lr


class CheckpointAction(controller.Action):
    """The run's checkpoint schedule (trainers/controller.py): a save every `every`
    steps and at the last step, before anything else is done at that boundary, and on
    request (`save_now`: a preemption). A step this run saved already is not saved
    twice (a preemption at a scheduled checkpoint). `last_good`: the newest step saved
    or restored, which a divergence names."""

    def __init__(self, checkpoints, every, total_steps):
        self.checkpoints, self.every, self.total_steps = checkpoints, int(every), int(total_steps)
        self.last_saved = None  # the step this run saved last
        self.last_good = 0

    def restore(self, step):
        """Restores the checkpoint of `step` (0: nothing, a fresh run); returns it."""
        if step:
            step = self.checkpoints.restore(step)
        self.last_good = int(step)
        return self.last_good

    def next_step(self, step):
        return controller.next_multiple(step, self.every)

    def due(self, step):
        return controller.itstime(step, self.every, self.total_steps)

    def after_steps(self, boundary):
        if self.due(boundary.step):
            self.save_now(boundary.step)

    def save_now(self, step):
        step = int(step)
        if step == self.last_saved:
            return
        self.checkpoints.save(step)
        self.last_saved = self.last_good = step

    def end(self, step):
        self.checkpoints.sync()
