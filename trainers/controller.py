"""The host loop: run the train step to the next boundary, then hand the step to each
action (Orbit's `Controller.train`, big_vision's `itstime`).

A boundary is the end of one call of the step function (`steps_per_execution`
updates), the run's last step, or a step some action asked for (`Action.next_step`):
a checkpoint, a log point, an evaluation, the profiler window. At each boundary the
controller reads the train step's figures (`read_figures`, which synchronises with the
devices) when an action is due there, stops on a NaN/inf loss (`Diverged`: nothing of
those steps is saved), then calls every action's `after_steps` in order. The actions
own their schedules and their rules (trainers/checkpointing.py `CheckpointAction`,
trainers/train_log.py, trainers/evaluators.py `EvaluationAction`, trainers/faults.py
`PreemptionAction`, trainers/profiling.py, trainers/keras_callbacks.py); the controller
knows none of them, and tests/test_controller.py drives it with a fake step and a
fake clock.
"""

import dataclasses
import math
import time


def itstime(step, every, total=None):
    """Whether an action with period `every` (<= 0: none) is due at `step`: at every
    multiple of `every`, and at `total` (the last step) when given."""
    if total is not None and step == total:
        return True
    return every > 0 and step > 0 and step % every == 0


def next_multiple(step, every):
    """The first multiple of `every` after `step` (None for every <= 0)."""
    return (step // every + 1) * every if every > 0 else None


class Diverged(Exception):
    """The loss of the steps `first`..`last` (the last interval read) is NaN/inf."""

    def __init__(self, first, last):
        super().__init__(f"loss became NaN/inf in steps {first}-{last}")
        self.first, self.last = first, last


@dataclasses.dataclass
class Boundary:
    """What the actions see at a boundary: the step (updates done), and where the
    figures were read there (`read`): the means of the train step's figures since the
    previous read (`logs`: loss, metrics, learning_rate, gradient_norm), their sums
    (`sums`, with 'updates') and the seconds of training they took (`seconds`: step
    calls and reads only, not the actions' time)."""

    step: int
    read: bool = False
    sums: dict = dataclasses.field(default_factory=dict)
    extra: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    @property
    def logs(self):
        n = max(self.sums.get("updates", 0.0), 1.0)
        means = {k: v / n for k, v in self.sums.items() if k != "updates"}
        return {**means, **self.extra}

    def finite(self):
        return all(math.isfinite(v) for v in self.sums.values())


class Action:
    """One thing done at step boundaries. Subclasses override what they need."""

    def next_step(self, step):
        """The next step after `step` at which this action must run (None: no wish)."""
        return None

    def due(self, step):
        """Whether this action does its work at `step` (the figures are read then)."""
        return False

    def begin(self, step):
        """Before the first step call; `step`: the step training starts (resumes) at."""

    def before_steps(self, step):
        """Before a call of the step function that starts at `step`."""

    def after_steps(self, boundary):
        """At a boundary (`Boundary`), in the order the actions were given."""

    def on_diverged(self, boundary):
        """At the boundary whose figures are NaN/inf, instead of `after_steps`."""

    def end(self, step):
        """After the last boundary (also after a divergence, not after an exception)."""


class Controller:
    """Runs `train_steps(n)` (n updates) from a start step to `total_steps`, at most
    `steps_per_execution` updates per call, with `actions` at the boundaries.

    read_figures() -> (sums, extra): the train step's sums since its last read
    ({'loss', metric names..., 'updates'}; then reset) and the figures of the current
    step (learning rate, gradient norm). should_stop() -> bool: a request to stop
    after the current boundary (Keras' `model.stop_training`). clock: seconds.
    """

    def __init__(
        self,
        train_steps,
        read_figures,
        total_steps,
        steps_per_execution,
        actions,
        should_stop=lambda: False,
        clock=time.perf_counter,
    ):
        self.train_steps, self.read_figures = train_steps, read_figures
        self.total_steps, self.steps_per_execution = int(total_steps), int(steps_per_execution)
        self.actions, self.should_stop, self.clock = list(actions), should_stop, clock

    def next_stop(self, step):
        """The next boundary after `step`."""
        wishes = [a.next_step(step) for a in self.actions]
        candidates = [step + self.steps_per_execution, self.total_steps]
        return min(candidates + [s for s in wishes if s is not None and s > step])

    def train(self, step):
        """Trains from `step` (0, or the step a resume restored); returns the last step.
        Raises `Diverged` (after every action's `end`) on a NaN/inf loss."""
        step = int(step)
        for action in self.actions:
            action.begin(step)
        seconds, last_read, diverged = 0.0, step, None
        while step < self.total_steps and not self.should_stop():
            stop = self.next_stop(step)
            for action in self.actions:
                action.before_steps(step)
            start = self.clock()
            self.train_steps(stop - step)
            step = stop
            boundary = Boundary(step)
            if step == self.total_steps or any(a.due(step) for a in self.actions):
                sums, extra = self.read_figures()
                seconds += self.clock() - start
                boundary = Boundary(step, True, sums, extra, seconds)
                if not boundary.finite():
                    diverged = Diverged(last_read + 1, step)
                    for action in self.actions:
                        action.on_diverged(boundary)
                    break
                seconds, last_read = 0.0, step
            else:
                seconds += self.clock() - start
            for action in self.actions:
                action.after_steps(boundary)
        for action in self.actions:
            action.end(step)
        if diverged is not None:
            raise diverged
        return step
