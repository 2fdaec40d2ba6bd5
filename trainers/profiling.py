"""The profiler window of a run (config.profile_steps): a TensorFlow profiler trace of
the steps from `first` to `last`, a trainers/controller.py action."""

import logging

import tensorflow as tf

from keras_vit_trainers import controller

log = logging.getLogger("trainers")


class ProfileWindow(controller.Action):
    """A TensorFlow profiler trace of the steps from `first` to `last` (config.
    profile_steps) in `logdir` (TensorBoard's profile tab reads LOGDIR/plugins/profile);
    both are step boundaries."""

    def __init__(self, first, last, logdir):
        self.first, self.last, self.logdir = int(first), int(last), logdir
        self._tracing = self._done = False

    def next_step(self, step):
        return next((s for s in (self.first, self.last) if s > step), None)

    def before_steps(self, step):
        if not (self._tracing or self._done) and self.first <= step < self.last:
            tf.profiler.experimental.start(self.logdir)
            self._tracing = True

    def after_steps(self, boundary):
        if self._tracing and boundary.step >= self.last:
            self.end(boundary.step)

    def end(self, step):
        if self._tracing:
            tf.profiler.experimental.stop()
            self._tracing, self._done = False, True
            log.info("profile of steps %d-%d written to %s", self.first, self.last, self.logdir)
