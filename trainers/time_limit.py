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

With `shorten` (`config.time_limit_anneal`, what `make demo` sets), the limit first
brings the schedule's end forward instead: at the first boundary from which the
planned steps and the reserve would end past the limit at a lasting, settled pace
(SHORTEN_SPAN_S), the learning rate's decay is restarted from there to end at the step
that fits (less SHORTEN_MARGIN of the steps left), so that a run on a machine that
slowed down still ends annealed, not cut in the middle of its decay. The run then ends at that
step as a finished run (the step saved, one line). It shortens once: a machine that
slows down again after it is stopped at a boundary as above. The shortening is
recorded with the run's plan (trainers/checkpointing.py `record_shortening`) before
the next step trains, so a resumed run follows the same schedule and ends at the same
step.

The limit is one process's clock: a multi-worker run's workers could stop at different
steps, so `config_checks` refuses it there. `make demo` sets it (tools/demo_budget.py).
"""

import bisect
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
# The share of the steps that still fit which a shortening leaves unplanned: the machine
# may slow down a little more.
SHORTEN_MARGIN = 0.1
# A shortening acts on a lasting, settled pace only: the plan has not fitted at the pace
# of the last SHORTEN_SPAN_S seconds for SHORTEN_SPAN_S, and that pace and the one of the
# SHORTEN_SPAN_S before agree within SETTLED. At the start (the first steps after the
# compilation run slower: on the Zen 5 kind the median of the demo's first five
# intervals planned 5,094 steps where 9,240 fitted) and during a change of pace it waits.
SHORTEN_SPAN_S = 30.0
SETTLED = 0.2


class TimeLimit(controller.Action):
    """Stops training at the last boundary from which the next boundary and
    `reserve_steps` more updates, at the pace of the moment, end before `deadline`
    (seconds on `clock`'s scale: time.time by default). `save(step)` saves that step;
    `reached` says it stopped the run (the controller's `should_stop` reads it).

    `shorten(at, end)`, where given, brings the schedule's end forward first (module
    docstring); `end_step`: where the run's schedule ends now (a resumed run whose
    schedule was shortened: that end, and it is not shortened again)."""

    def __init__(
        self,
        deadline,
        save,
        total_steps,
        reserve_steps=0,
        clock=time.time,
        shorten=None,
        end_step=None,
    ):
        self.deadline, self.save = float(deadline), save
        self.total_steps, self.reserve_steps = int(total_steps), int(reserve_steps)
        self.clock, self.shorten = clock, shorten
        self.end_step = self.total_steps if end_step is None else int(end_step)
        self.shortened = self.end_step < self.total_steps
        self.reached = False
        self._last = None  # (step, time) at the previous boundary; None: before the first
        self._paces = collections.deque(maxlen=WINDOW)  # seconds per update
        self._points = []  # (step, time) of the boundaries since the first, for `shorten`
        self._missing_since = None  # since when the plan has not fitted, for `shorten`

    def begin(self, step):
        self._last = None
        self._points, self._missing_since = [], None

    def next_step(self, step):
        return self.end_step if self.shortened and step < self.end_step else None

    def after_steps(self, boundary):
        now = self.clock()
        last, self._last = self._last, (boundary.step, now)
        if self.shortened and boundary.step == self.end_step:
            self._stop(
                f"training ended at step {boundary.step}, where its shortened schedule "
                f"ends ({self.total_steps} planned), its state saved",
                boundary.step,
            )
            return
        if last is None:  # the first call since the start: it compiled
            return
        updates = boundary.step - last[0]
        if updates <= 0 or boundary.step >= self.end_step:
            return
        self._paces.append((now - last[1]) / updates)
        if self.shorten and not self.shortened:
            self._points.append((boundary.step, now))  # kept only while it may shorten
            if self._shortened(boundary.step, now):
                return
        if len(self._paces) < MIN_INTERVALS:
            return
        pace = statistics.median(self._paces)
        if now + pace * (updates + self.reserve_steps) <= self.deadline:
            return
        self._stop(
            f"training stopped at step {boundary.step} of {self.end_step} to end by "
            f"{self._deadline()}, its state saved; rerun the same command to train the rest",
            boundary.step,
        )

    def _spans(self, now):
        """(seconds per step over the last span of training, over the span before it),
        or None before there are two. The span is SHORTEN_SPAN_S, or the last 4
        intervals' time where that is longer."""
        points = self._points
        if len(points) < 9:
            return None
        span = max(SHORTEN_SPAN_S, points[-1][1] - points[-5][1])

        def before(t):  # the last point at or before time t
            i = bisect.bisect_right([p[1] for p in points], t) - 1
            return points[i] if i >= 0 else None

        middle, first = before(now - span), before(now - 2 * span)
        if middle is None or first is None or not points[-1][0] > middle[0] > first[0]:
            return None
        del points[: points.index(first)]  # older points are never read again
        recent = (now - middle[1]) / (points[-1][0] - middle[0])
        return recent, (middle[1] - first[1]) / (middle[0] - first[0])

    def _shortened(self, step, now):
        """Brings the schedule's end forward where the planned steps and the reserve
        would end past the limit at the pace of the last span, have done so for a whole
        span, and the pace is settled (the span before agrees within SETTLED); plans at
        the slower of the two. Whether it did."""
        spans = self._spans(now)
        if spans is None:
            return False
        recent, older = spans
        if step + (self.deadline - now) / recent - self.reserve_steps >= self.end_step:
            self._missing_since = None
            return False
        if self._missing_since is None:
            self._missing_since = now
        if now - self._missing_since < SHORTEN_SPAN_S:
            return False
        if abs(recent - older) > SETTLED * min(recent, older):
            return False
        pace = max(recent, older)
        fit = (self.deadline - now) / pace - self.reserve_steps  # updates that end in time
        end = step + int(fit * (1 - SHORTEN_MARGIN))
        if end <= step:
            return False
        self.shorten(step, end)
        self.end_step, self.shortened = end, True
        log.warning(
            "time limit: at step %d the learning rate's decay restarts to end at step %d "
            "of %d (%.3g s a step now), so that training ends annealed by %s",
            step,
            end,
            self.total_steps,
            pace,
            self._deadline(),
        )
        return True

    def _deadline(self):
        return time.strftime("%H:%M:%S", time.localtime(self.deadline))

    def _stop(self, message, step):
        self.save(step)
        self.reached = True
        log.warning("time limit: %s", message)
