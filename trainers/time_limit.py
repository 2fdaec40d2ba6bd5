"""A wall-clock limit on training (`config.time_limit`: seconds since 1970, None: off;
`config.time_limit_reserve_steps`: the work after training, in training steps), a
trainers/controller.py action.

At each boundary it projects when the next one would come, from the pace of the last
interval (seconds per update since the previous boundary, so that a machine that slowed
down after the run started is seen at the next boundary), and adds the reserve at that
pace: what comes after training (evaluations, exports) slows down with the machine.
Where that is past the limit, the run stops at this boundary instead: the step is saved
(`save(step)`, the checkpoint action's save-once rule), one line says so, and training
ends as a finished run does (final evaluations, metrics.json with `step` below
`total_steps`, the model). Rerunning the command resumes from that step.

The limit is one process's clock: a multi-worker run's workers could stop at different
steps, so `config_checks` refuses it there. `make demo` sets it (tools/demo_budget.py).
"""

import logging
import time

from keras_vit_trainers import controller

log = logging.getLogger("trainers")


class TimeLimit(controller.Action):
    """Stops training at the last boundary from which the next boundary and
    `reserve_steps` more updates, at the last interval's pace, end before `deadline`
    (seconds on `clock`'s scale: time.time by default). `save(step)` saves that step;
    `reached` says it stopped the run (the controller's `should_stop` reads it)."""

    def __init__(self, deadline, save, total_steps, reserve_steps=0, clock=time.time):
        self.deadline, self.save = float(deadline), save
        self.total_steps, self.reserve_steps = int(total_steps), int(reserve_steps)
        self.clock = clock
        self.reached = False
        self._last = None  # (step, time) at the previous boundary

    def begin(self, step):
        self._last = (step, self.clock())

    def after_steps(self, boundary):
        now = self.clock()
        last_step, last_time = self._last
        self._last = (boundary.step, now)
        updates = boundary.step - last_step
        if boundary.step >= self.total_steps or updates <= 0:
            return
        interval = now - last_time  # the next boundary: about as many updates away
        if now + interval + self.reserve_steps * interval / updates <= self.deadline:
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
