"""A wall-clock limit on training (`config.time_limit`: seconds since 1970, None: off;
`config.time_limit_reserve_steps`: the work after training, in training steps), a
trainers/controller.py action.

At each boundary it projects when the next one would come and adds the reserve, both at
the pace of the moment: the median seconds per update of the last `WINDOW` intervals
(the first interval, which compiles the step, left out; a checkpoint's or a log's slow
interval does not set it, a slowdown that lasts does within half a window). What comes
after training (evaluations, exports) slows down with the machine, hence the reserve in
steps. Where that is past the limit, the run stops at this boundary instead: the step is
saved (`save(step)`, the checkpoint action's save-once rule), one line says so, and
training ends as a finished run does (final evaluations, metrics.json with `step` below
`total_steps`, the model). Rerunning the command resumes from that step.

The limit is one process's clock: a multi-worker run's workers could stop at different
steps, so `config_checks` refuses it there. `make demo` sets it (tools/demo_budget.py).
"""

import collections
import logging
import statistics
import time

from keras_vit_trainers import controller

log = logging.getLogger("trainers")

# The intervals whose median pace is the pace of the moment, and how many are needed
# before the limit can act.
WINDOW = 25
MIN_INTERVALS = 5


class TimeLimit(controller.Action):
    """Stops training at the last boundary from which the next boundary and
    `reserve_steps` more updates, at the pace of the moment, end before `deadline`
    (seconds on `clock`'s scale: time.time by default). `save(step)` saves that step;
    `reached` says it stopped the run (the controller's `should_stop` reads it)."""

    def __init__(self, deadline, save, total_steps, reserve_steps=0, clock=time.time):
        self.deadline, self.save = float(deadline), save
        self.total_steps, self.reserve_steps = int(total_steps), int(reserve_steps)
        self.clock = clock
        self.reached = False
        self._last = None  # (step, time) at the previous boundary; None: before the first
        self._paces = collections.deque(maxlen=WINDOW)  # seconds per update

    def begin(self, step):
        self._last = None

    def after_steps(self, boundary):
        now = self.clock()
        last, self._last = self._last, (boundary.step, now)
        if last is None:  # the first call since the start: it compiled
            return
        updates = boundary.step - last[0]
        if updates <= 0 or boundary.step >= self.total_steps:
            return
        self._paces.append((now - last[1]) / updates)
        if len(self._paces) < MIN_INTERVALS:
            return
        pace = statistics.median(self._paces)
        if now + pace * (updates + self.reserve_steps) <= self.deadline:
            return
        self.save(boundary.step)
        self.reached = True
        log.warning(
            "time limit: training stopped at step %d of %d to end by %s, its state saved; "
            "rerun the same command to train the rest",
            boundary.step,
            self.total_steps,
            time.strftime("%H:%M:%S", time.localtime(self.deadline)),
        )
