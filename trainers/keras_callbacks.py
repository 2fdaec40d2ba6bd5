"""The user's Keras callbacks in the trainer's loop (`train_lib.run(callbacks=...)`, then
config.callbacks'), a trainers/controller.py action.

What Keras' `fit` would call, at the trainer's boundaries: `on_train_begin`;
`on_train_batch_begin(step)` before each call of the step function;
`on_train_batch_end(step - 1, logs)` at every boundary (logs: the figures read there,
else the last checkpoint interval's); `on_epoch_end(n, logs)` at the end of the n-th
checkpoint interval (an epoch, to a callback, is a checkpoint interval; the last may
be shorter), before that boundary's evaluations (which a preemption a callback asks
for then cuts short); `on_train_end(logs)`. A callback that sets
`model.stop_training` stops the run after the boundary (the controller's
`should_stop`).
"""

from keras_vit_trainers import controller


class KerasCallbacks(controller.Action):
    """`callbacks` (a keras.callbacks.CallbackList) at the trainer's boundaries;
    `logger`: the run's RunLogger (trainers/train_log.py), whose last interval's logs
    are passed where no figures were read."""

    def __init__(self, callbacks, logger, every, total_steps):
        self.callbacks, self.logger = callbacks, logger
        self.every, self.total_steps = int(every), int(total_steps)

    def begin(self, step):
        self.callbacks.on_train_begin()

    def before_steps(self, step):
        self.callbacks.on_train_batch_begin(step)

    def after_steps(self, boundary):
        logs = boundary.logs if boundary.read else dict(self.logger.last_logs)
        self.callbacks.on_train_batch_end(boundary.step - 1, logs)
        if controller.itstime(boundary.step, self.every, self.total_steps):
            epoch = -(-boundary.step // self.every) - 1  # the last may be a partial one
            self.callbacks.on_epoch_end(epoch, logs)

    def end(self, step):
        self.callbacks.on_train_end(self.logger.last_logs)
