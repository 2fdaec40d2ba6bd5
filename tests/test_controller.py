"""The trainer's host loop (trainers/controller.py) and its actions, in-process against a
fake step and a fake clock: where the loop stops, when it reads the figures, what each
action does at its boundaries (checkpoint, log, progress, evaluations, Keras callbacks,
preemption, the time limit), a divergence, a resume and a rollback's cut of the run's records. The
same objects drive the real trainer (trainers/train_lib.py `fit`); the processes of
tests/test_train_faults.py check what only a process can show (signals, kill -9, lost
workers)."""

import json
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit.run_directory import RunDirectory
from keras_vit_trainers import (
    checkpointing,
    controller,
    evaluators,
    faults,
    keras_callbacks,
    time_limit,
    timeline,
    train_log,
)


class FakeStep:
    """n updates take n seconds of the fake clock; each update's loss is `loss(step)`
    (default: the step itself), summed until `read`."""

    def __init__(self, clock, loss=float):
        self.clock, self.loss = clock, loss
        self.step, self.calls, self.reads = 0, [], []
        self.sums = {"loss": 0.0, "updates": 0.0}

    def __call__(self, n):
        self.calls.append((self.step, n))
        for _ in range(n):
            self.step += 1
            self.sums["loss"] += self.loss(self.step)
            self.sums["updates"] += 1
        self.clock.now += n

    def read(self):
        self.reads.append(self.step)
        sums, self.sums = self.sums, {"loss": 0.0, "updates": 0.0}
        return sums, {"learning_rate": 0.1}


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Recorder(controller.Action):
    """Records what it is told; due every `every` steps; `cost`: seconds of the fake
    clock each of its runs takes (an evaluation)."""

    def __init__(self, every=0, clock=None, cost=0.0):
        self.every, self.clock, self.cost = every, clock, cost
        self.events = []

    def next_step(self, step):
        return controller.next_multiple(step, self.every)

    def due(self, step):
        return controller.itstime(step, self.every)

    def begin(self, step):
        self.events.append(("begin", step))

    def after_steps(self, boundary):
        self.events.append(("after", boundary.step, boundary.read, boundary.seconds))
        if self.clock and self.due(boundary.step):
            self.clock.now += self.cost

    def on_diverged(self, boundary):
        self.events.append(("diverged", boundary.step))

    def end(self, step):
        self.events.append(("end", step))


def _controller(actions, total=25, spe=3, loss=float, should_stop=lambda: False):
    clock = Clock()
    step = FakeStep(clock, loss)
    return controller.Controller(step, step.read, total, spe, actions, should_stop, clock), step


def test_itstime_and_next_multiple():
    assert [s for s in range(1, 13) if controller.itstime(s, 4)] == [4, 8, 12]
    assert [s for s in range(1, 11) if controller.itstime(s, 4, total=10)] == [4, 8, 10]
    assert not any(controller.itstime(s, 0) or controller.itstime(s, -1) for s in range(5))
    assert [controller.next_multiple(s, 5) for s in (0, 4, 5, 9)] == [5, 5, 10, 10]
    assert controller.next_multiple(3, 0) is None


def test_stops_at_every_boundary_and_reads_only_where_an_action_is_due():
    log, evaluation = Recorder(every=10), Recorder(every=6)
    loop, step = _controller([log, evaluation], total=25, spe=4)
    assert loop.train(0) == 25
    stops = [start + n for start, n in step.calls]
    # steps_per_execution (4) from each stop, the log's 10s, the evaluation's 6s, the last step
    assert stops == [4, 6, 10, 12, 16, 18, 20, 24, 25]
    assert step.reads == [6, 10, 12, 18, 20, 24, 25]
    assert [e[1] for e in log.events if e[0] == "after" and e[2]] == step.reads
    assert log.events[0] == ("begin", 0) and log.events[-1] == ("end", 25)


def test_figures_are_the_means_since_the_last_read_over_training_time_alone():
    clock = Clock()
    evaluation = Recorder(every=5, clock=clock, cost=100.0)  # an evaluation takes 100 s
    step = FakeStep(clock)
    loop = controller.Controller(step, step.read, 10, 2, [evaluation], clock=clock)
    seen = []

    class Figures(controller.Action):
        def after_steps(self, boundary):
            if boundary.read:
                seen.append((boundary.step, boundary.logs, boundary.seconds))

    loop.actions.append(Figures())
    loop.train(0)
    # steps 1-5 (loss 1..5) in 5 s; then 6-10 in 5 s, the evaluation's 100 s left out
    assert seen == [
        (5, {"loss": 3.0, "learning_rate": 0.1}, 5.0),
        (10, {"loss": 8.0, "learning_rate": 0.1}, 5.0),
    ]


def test_a_resumed_run_starts_at_its_step_and_keeps_the_schedule():
    log = Recorder(every=10)
    loop, step = _controller([log], total=25, spe=4)
    step.step = 10  # what the restored checkpoint holds
    loop.train(10)
    assert [start + n for start, n in step.calls] == [14, 18, 20, 24, 25]
    assert log.events[0] == ("begin", 10)


def test_a_nan_loss_stops_at_the_read_names_the_steps_and_saves_nothing(tmp_path):
    checkpoints = _checkpoint_action(tmp_path, every=10, total=40)
    log = Recorder(every=5)
    loss = lambda s: float("nan") if s == 13 else 1.0  # noqa: E731
    loop, step = _controller([checkpoints, log], total=40, spe=40, loss=loss)
    with pytest.raises(controller.Diverged) as raised:
        loop.train(0)
    assert (raised.value.first, raised.value.last) == (11, 15)
    assert checkpointing.saved_steps(str(tmp_path)) == [10]
    assert checkpoints.last_good == 10
    assert ("diverged", 15) in log.events and log.events[-1] == ("end", 15)
    assert ("after", 15, True, 5.0) not in log.events


def test_a_callback_that_stops_training_stops_after_its_boundary():
    model = keras.Sequential([keras.layers.Dense(1)])
    model.stop_training = False

    class StopAt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch + 1 >= 7:
                self.model.stop_training = True

    logger = train_log.RunLogger(every=5, global_batch=2, total_steps=20)
    user = keras.callbacks.CallbackList([StopAt()], model=model)
    action = keras_callbacks.KerasCallbacks(user, logger, every=5, total_steps=20)
    loop, step = _controller(
        [logger, action], total=20, spe=3, should_stop=lambda: model.stop_training
    )
    assert loop.train(0) == 8  # boundaries 3, 5, 8: the first at or after step 7


def test_keras_callbacks_see_what_fit_would_show():
    calls = []

    class Record(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            calls.append("begin")

        def on_train_batch_begin(self, batch, logs=None):
            calls.append(("batch_begin", batch))

        def on_train_batch_end(self, batch, logs=None):
            calls.append(("batch_end", batch, round(logs.get("loss", -1), 3)))

        def on_epoch_end(self, epoch, logs=None):
            calls.append(("epoch_end", epoch, round(logs["loss"], 3)))

        def on_train_end(self, logs=None):
            calls.append(("end", logs["step"]))

    model = keras.Sequential([keras.layers.Dense(1)])
    logger = train_log.RunLogger(every=4, global_batch=2, total_steps=6)
    user = keras.callbacks.CallbackList([Record()], model=model)
    action = keras_callbacks.KerasCallbacks(user, logger, every=4, total_steps=6)
    loop, _ = _controller([logger, action], total=6, spe=3)
    loop.train(0)
    assert calls == [
        "begin",
        ("batch_begin", 0),
        ("batch_end", 2, -1),  # no figures read at step 3: no interval logged yet
        ("batch_begin", 3),
        ("batch_end", 3, 2.5),  # steps 1-4
        ("epoch_end", 0, 2.5),
        ("batch_begin", 4),
        ("batch_end", 5, 5.5),  # steps 5-6
        ("epoch_end", 1, 5.5),
        ("end", 6),
    ]


def test_the_log_keeps_interval_records_and_the_recent_window_for_the_progress_bar(tmp_path):
    run = RunDirectory(str(tmp_path))
    logger = train_log.RunLogger(every=10, global_batch=4, total_steps=25, run_dir=run, log_every=5)
    progress = train_log.TrainingProgress(logger, total_steps=25, global_batch=4)
    shown = []
    progress_update = train_log.TrainingProgress.after_steps

    def after_steps(self, boundary):
        progress_update(self, boundary)
        shown.append((boundary.step, dict(self.bar.postfix)))

    progress.after_steps = after_steps.__get__(progress)
    loop, _ = _controller([logger, progress], total=25, spe=5)
    loop.train(0)
    records = run.read_jsonl(run.train_log)
    assert [r["step"] for r in records] == [10, 20, 25]
    assert [r["loss"] for r in records] == [5.5, 15.5, 23.0]  # means of 1-10, 11-20, 21-25
    # images/s: 10 updates of 4 images in 10 s of the fake clock
    assert records[0]["images_per_second"] == pytest.approx(4.0)
    # the bar: the mean of the last 5 steps at each log point, never a stale interval's
    losses = [postfix.get("loss") for _, postfix in shown]
    assert [float(v) for v in losses] == [3.0, 8.0, 13.0, 18.0, 23.0]


def test_the_progress_bar_follows_a_schedule_shortened_during_training():
    logger = train_log.RunLogger(every=10, global_batch=4, total_steps=25)
    end = [25]  # a time limit's end_step: brought forward to 15 at step 10

    class Shorten(controller.Action):
        def after_steps(self, boundary):
            end[0] = 15 if boundary.step >= 10 else 25

    progress = train_log.TrainingProgress(logger, 25, 4, end_step=lambda: end[0])
    loop, _ = _controller([logger, Shorten(), progress], total=25, spe=5)
    loop.train(0)
    assert progress.bar.total == 15  # not 25: its ETA is that of the steps left to 15


def _tiny_state():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    return model, checkpointing.training_state(model, optimizer)


def _checkpoint_action(directory, every, total):
    _, state = _tiny_state()
    saves = checkpointing.RunCheckpoints(str(directory), state, keep=10)
    return checkpointing.CheckpointAction(saves, every, total)


def test_checkpoints_at_each_interval_and_the_last_step(tmp_path):
    checkpoints = _checkpoint_action(tmp_path, every=10, total=25)
    loop, _ = _controller([checkpoints], total=25, spe=4)
    loop.train(0)
    assert checkpointing.saved_steps(str(tmp_path)) == [25, 20, 10]


def test_sigterm_saves_the_step_at_the_next_boundary_once_and_stops(tmp_path):
    checkpoints = _checkpoint_action(tmp_path, every=10, total=40)
    strategy = tf.distribute.get_strategy()
    preemption = faults.PreemptionHandler(strategy, checkpoints.save_now, str(tmp_path))

    class Signal(controller.Action):  # SIGTERM arrives during the steps ending at `at`
        def __init__(self, at):
            self.at = at

        def after_steps(self, boundary):
            if boundary.step == self.at:
                preemption._on_sigterm(None, None)

    saved = []
    save = checkpoints.checkpoints.save
    checkpoints.checkpoints.save = lambda step: (saved.append(step), save(step))
    # between two checkpoints (step 7), at a scheduled checkpoint (step 20: saved once)
    for at, expected in ((7, [7]), (20, [20, 7])):
        preemption._signalled.clear()
        loop, step = _controller(
            [checkpoints, Signal(at), preemption], total=40, spe=7 if at == 7 else 10
        )
        step.step = 0 if at == 7 else 10
        with pytest.raises(faults.Preempted) as raised, preemption:
            loop.train(step.step)
        assert raised.value.step == at
        assert checkpointing.saved_steps(str(tmp_path)) == expected
        assert saved == expected[::-1]


def test_an_evaluation_cut_short_by_a_preemption_runs_again_at_the_resume(tmp_path):
    run = RunDirectory(str(tmp_path))
    ran = []

    class Eval(evaluators.Evaluator):
        def run(self, model, step=None, should_stop=None):
            if should_stop and should_stop():
                return {}  # ended early: nothing recorded
            ran.append(step)
            return self.record(step, {}, {"accuracy": 0.5})

    stop = [True]
    action = evaluators.EvaluationAction(Eval("val", 10, None), None, run, True, lambda: stop[0])
    action.after_steps(controller.Boundary(10))  # cut short at step 10
    assert not os.path.exists(run.eval_log) and ran == []
    stop[0] = False
    action.begin(10)  # the resumed run: step 10 has no result, so it runs first
    action.begin(10)  # ... and once only
    action.begin(15)  # not one of its steps
    assert ran == [10]
    assert run.read_jsonl(run.eval_log) == [{"step": 10, "name": "val", "accuracy": 0.5}]


def _events(folder):
    steps = []
    for name in sorted(os.listdir(folder)):
        if "tfevents" in name:
            for record in tf.data.TFRecordDataset(os.path.join(folder, name)).as_numpy_iterator():
                event = tf.compat.v1.Event.FromString(record)
                steps += [(event.step, v.tag) for v in event.summary.value]
    return sorted(steps)


def test_a_rollback_cuts_every_record_after_its_step(tmp_path):
    run = RunDirectory(str(tmp_path))
    for name in ("train", "validation"):
        writer = tf.summary.create_file_writer(run.tensorboard(name))
        with writer.as_default():
            for step in (10, 20, 30, 40):
                tf.summary.scalar(f"{name}/loss", step / 10, step=step)
        writer.close()
    for step in (10, 20, 30, 40):
        run.append_jsonl(run.train_log, {"step": step, "loss": 1.0})
        run.append_jsonl(run.eval_log, {"step": step, "name": "validation"})
    run.write_json(run.metrics, {"step": 40})

    timeline.cut_after(run, 20)

    for name in ("train", "validation"):
        assert _events(run.tensorboard(name)) == [(10, f"{name}/loss"), (20, f"{name}/loss")]
        assert len([n for n in os.listdir(run.tensorboard(name)) if "tfevents" in n]) == 1
    assert [r["step"] for r in run.read_jsonl(run.train_log)] == [10, 20]
    assert [r["step"] for r in run.read_jsonl(run.eval_log)] == [10, 20]
    assert not os.path.exists(run.metrics)
    # a resumed run's own points come after: each step has one value
    writer = tf.summary.create_file_writer(run.tensorboard("train"))
    with writer.as_default():
        tf.summary.scalar("train/loss", 3.5, step=30)
    writer.close()
    assert _events(run.tensorboard("train")) == [(s, "train/loss") for s in (10, 20, 30)]
    timeline.cut_after(run, 30)  # nothing after 30: nothing rewritten
    assert _events(run.tensorboard("train")) == [(s, "train/loss") for s in (10, 20, 30)]


def test_boundary_figures():
    boundary = controller.Boundary(4, True, {"loss": 8.0, "updates": 4.0}, {"learning_rate": 1.0})
    assert boundary.logs == {"loss": 2.0, "learning_rate": 1.0} and boundary.finite()
    assert not controller.Boundary(4, True, {"loss": math.inf, "updates": 1.0}).finite()
    assert np.isfinite(controller.Boundary(4).seconds)


def test_profile_window_asks_for_its_boundaries():
    from keras_vit_trainers import profiling

    window = profiling.ProfileWindow(5, 8, "/nonexistent")
    loop, step = _controller([window], total=12, spe=4)
    window.before_steps = lambda s: None  # no profiler here: the schedule only
    loop.train(0)
    assert [start + n for start, n in step.calls] == [4, 5, 8, 12]
    assert json.dumps(window.next_step(8)) == "null"


def test_a_finished_run_trains_nothing_and_ends_its_actions():
    log = Recorder(every=10)
    loop, step = _controller([log], total=20, spe=4)
    step.step = 20
    assert loop.train(20) == 20
    assert step.calls == [] and step.reads == []
    assert log.events == [("begin", 20), ("end", 20)]


class SlowingStep(FakeStep):
    """A fake step whose updates take 1 s of the fake clock until `slow_from`, then
    `factor` s each: a machine that another job slows down in the middle of the run."""

    def __init__(self, clock, slow_from, factor):
        super().__init__(clock)
        self.slow_from, self.factor = slow_from, factor

    def __call__(self, n):
        start = self.step
        super().__call__(n)
        slow = max(0, self.step - max(start, self.slow_from))
        self.clock.now += slow * (self.factor - 1)


def _limited_run(tmp_path, deadline, reserve, slow_from, factor, total=100, spe=5):
    clock = Clock()
    step = SlowingStep(clock, slow_from, factor)
    checkpoints = _checkpoint_action(tmp_path, every=50, total=total)
    limit = time_limit.TimeLimit(deadline, checkpoints.save_now, total, reserve, clock=clock)
    loop = controller.Controller(
        step, step.read, total, spe, [checkpoints, limit], lambda: limit.reached, clock
    )
    return loop.train(0), limit, clock


def test_a_time_limit_stops_a_run_that_slowed_down_in_time_for_its_reserve(tmp_path):
    # 300 steps of 1 s and a reserve of 20 steps fit a limit at 330 s; the machine is
    # three times slower from step 100: once the median pace has turned, the run stops
    # where the reserve at the slow pace still ends by the limit, and one more step
    # would not have left it.
    last, limit, clock = _limited_run(
        tmp_path, 330.0, 20, slow_from=100, factor=3.0, total=300, spe=1
    )
    assert limit.reached and 100 < last < 300
    assert clock.now + 20 * 3.0 <= 330.0 < clock.now + 1 * 3.0 + 20 * 3.0
    assert checkpointing.saved_steps(str(tmp_path))[0] == last  # the step kept
    # The machine that keeps its pace trains every step: the limit never acts.
    last, limit, clock = _limited_run(
        tmp_path / "steady", 330.0, 20, slow_from=300, factor=3.0, total=300, spe=1
    )
    assert (last, limit.reached, clock.now) == (300, False, 300.0)


def test_a_time_limit_brings_the_decay_forward_once_and_the_run_ends_there(tmp_path, caplog):
    """The machine of the test above, with `shorten` (config.time_limit_anneal): once
    the median pace has turned, the schedule's end is brought forward to the step that
    the reserve, at the slow pace, still leaves in time, less SHORTEN_MARGIN of the steps
    left; the run trains to that step, saves it and ends there, annealed."""
    clock = Clock()
    step = SlowingStep(clock, 100, 3.0)
    checkpoints = _checkpoint_action(tmp_path, every=50, total=300)
    shortened = []
    limit = time_limit.TimeLimit(
        330.0,
        checkpoints.save_now,
        300,
        20,
        clock=clock,
        shorten=lambda at, end: shortened.append((at, end, clock.now)),
    )
    loop = controller.Controller(
        step, step.read, 300, 1, [checkpoints, limit], lambda: limit.reached, clock
    )
    with caplog.at_level("WARNING", logger="trainers"):
        last = loop.train(0)
    ((at, end, then),) = shortened
    assert 100 < at < end == last < 300 and limit.reached
    fit = (330.0 - then) / 3.0 - 20  # steps at the slow pace that end in time
    assert end == at + int(fit * (1 - time_limit.SHORTEN_MARGIN))
    assert clock.now + 20 * 3.0 <= 330.0  # trained to the end, the reserve still fits
    assert checkpointing.saved_steps(str(tmp_path))[0] == end
    lines = [r.getMessage() for r in caplog.records if "time limit" in r.getMessage()]
    assert lines == [
        f"time limit: at step {at} the learning rate's decay restarts to end at step {end} "
        f"of 300 (3 s a step now), so that training ends annealed by "
        f"{limit._deadline()}",
        f"time limit: training ended at step {end}, where its shortened schedule ends (300 "
        "planned), its state saved",
    ]
    # The machine that keeps its pace is never shortened.
    shortened.clear()
    limit = time_limit.TimeLimit(330.0, lambda s: None, 300, 20, clock=Clock(), shorten=fail)
    steady = Clock()
    step = FakeStep(steady)
    limit.clock = steady
    loop = controller.Controller(step, step.read, 300, 1, [limit], lambda: limit.reached, steady)
    assert (loop.train(0), limit.reached) == (300, False)


def test_a_slow_start_does_not_shorten_the_schedule():
    """The first steps after the compilation run slower (on the Zen 5 kind the demo's
    first five intervals at 1,058 images/s planned 5,094 steps where 9,240 fitted): the
    limit waits for a settled pace, and the run that fits at its steady pace trains every
    step."""

    class SlowStart(FakeStep):
        def __call__(self, n):
            start = self.step
            super().__call__(n)
            self.clock.now += 4.0 * max(0, min(self.step, 10) - start)  # 5 s a step until 10

    clock = Clock()
    step = SlowStart(clock)
    limit = time_limit.TimeLimit(380.0, lambda s: None, 300, 20, clock=clock, shorten=fail)
    loop = controller.Controller(step, step.read, 300, 1, [limit], lambda: limit.reached, clock)
    assert (loop.train(0), limit.reached) == (300, False)
    assert clock.now + 20 <= 380.0  # it fitted: 40 s of slow start, 290 s, the reserve


def fail(*args):
    raise AssertionError(f"called with {args}")


def test_a_resumed_shortened_run_ends_where_its_schedule_ends_and_is_not_shortened_again():
    """A resume after a shortening (end_step recorded): a boundary at that step, the
    step saved, training over; however slow the machine, no second shortening."""
    clock = Clock()
    step = SlowingStep(clock, 0, 10.0)
    saved = []
    limit = time_limit.TimeLimit(1e4, saved.append, 300, 0, clock=clock, shorten=fail, end_step=150)
    loop = controller.Controller(step, step.read, 300, 40, [limit], lambda: limit.reached, clock)
    assert loop.train(0) == 150 and saved == [150]
    assert [n for _, n in step.calls] == [40, 40, 40, 30]


def test_one_slow_interval_does_not_stop_a_run(tmp_path):
    """A slow boundary (30 s of an evaluation at step 50) is one interval: the median
    pace keeps, and 100 steps of 1 s, the 30 s and a reserve of 20 steps fit 160 s."""
    clock = Clock()
    step = FakeStep(clock)
    limit = time_limit.TimeLimit(160.0, lambda s: None, 100, 20, clock=clock)
    loop = controller.Controller(
        step,
        step.read,
        100,
        1,
        [Recorder(every=50, clock=clock, cost=30.0), limit],
        lambda: limit.reached,
        clock,
    )
    assert loop.train(0) == 100 and not limit.reached


def test_a_time_limit_is_one_line_and_a_resumed_run_trains_the_rest(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="trainers"):
        last, _, _ = _limited_run(tmp_path, 60.0, 0, slow_from=0, factor=1.0)
    assert last == 60  # at 60 s the next boundary (65 s) would be past the limit
    (line,) = [r.getMessage() for r in caplog.records if "time limit" in r.getMessage()]
    assert line.startswith("time limit: training stopped at step 60 of 100") and "rerun" in line
    checkpoints = _checkpoint_action(tmp_path, every=50, total=100)
    assert checkpoints.restore(60) == 60


def test_the_trainer_stops_at_its_time_limit_and_a_rerun_trains_the_rest(tmp_path):
    """train_lib.run with a limit already at hand: the first boundary's step saved, a
    finished run's metrics there, and the same command later trains to the end."""
    import time

    import trainer_testing as testing

    from keras_vit_configs import fashion_mnist
    from keras_vit_trainers import train_config, train_lib

    data, run = str(tmp_path / "data"), str(tmp_path / "run")
    testing.make_tiny_data(data, n_train=64, n_test=32, per_shard=32)

    def train(**keys):
        recipe = testing.tiny_config(
            fashion_mnist.get_config(), total_steps=12, checkpoint_every=4, log_every=1, **keys
        )
        config = train_config.resolve(recipe, "pretrain")
        return train_lib.run(
            config, data_dir=data, model_dir=run, strategy=tf.distribute.get_strategy()
        )

    stopped = train(time_limit=time.time(), time_limit_reserve_steps=1)
    # The first call (it compiles) and MIN_INTERVALS intervals to know the pace.
    first = 1 + time_limit.MIN_INTERVALS
    assert (stopped["step"], stopped["total_steps"]) == (first, 12)
    assert 0.0 <= stopped["test_accuracy"] <= 1.0  # the final evaluations ran
    assert checkpointing.saved_steps(os.path.join(run, "checkpoints"))[0] == first
    finished = train()
    assert (finished["step"], finished["resumed_from_step"]) == (12, first)


def test_the_trainer_ends_annealed_at_a_shortened_end_and_a_resume_keeps_that_schedule(
    tmp_path, monkeypatch
):
    """train_lib.run with config.time_limit_anneal on a machine three times slower from
    step 6 (a fake clock of the boundary's step: 1 s a step, then 3 s). With two spans of
    history (from 63 s, step 25) the plan is seen to miss the limit; a span later, the
    slow pace settled, at step 35 the decay is brought forward to end at step 48,
    recorded in the plan; the run ends there as a finished run. The same command then
    trains nothing more, and a resume from step 32 (before the shortening), with the limit
    or without one, retrains the same schedule to the same weights."""
    import trainer_testing as testing

    from keras_vit_configs import fashion_mnist
    from keras_vit_trainers import train_config, train_lib

    start = 2e9  # the fake clock's step 0, seconds since 1970

    class SlowingLimit(time_limit.TimeLimit):
        def after_steps(self, boundary):
            k = boundary.step
            self.clock = lambda: start + k + 2 * max(0, k - 6)
            super().after_steps(boundary)

    monkeypatch.setattr(time_limit, "TimeLimit", SlowingLimit)
    data, run = str(tmp_path / "data"), str(tmp_path / "run")
    testing.make_tiny_data(data, n_train=64, n_test=32, per_shard=32)

    def train(**keys):
        limit = dict(
            time_limit=start + 138,  # at step 35 (93 s), at the slow pace, 15 more fit
            time_limit_anneal=True,
        )
        recipe = testing.tiny_config(
            fashion_mnist.get_config(),
            total_steps=60,
            checkpoint_every=4,
            checkpoint_keep=20,
            log_every=1,
            **{**limit, **keys},
        )
        config = train_config.resolve(recipe, "pretrain")
        return train_lib.run(
            config, data_dir=data, model_dir=run, strategy=tf.distribute.get_strategy()
        )

    ended = train()
    assert time_limit.SHORTEN_SPAN_S == 30.0  # the spans this clock is drawn for
    assert (ended["step"], ended["total_steps"]) == (48, 60)
    assert 0.0 <= ended["test_accuracy"] <= 1.0  # the final evaluations ran
    checkpoint_dir = os.path.join(run, "checkpoints")
    assert checkpointing.saved_steps(checkpoint_dir) == list(range(48, 0, -4))
    at, end, learning_rate = checkpointing.shortening(checkpoint_dir)
    assert (at, end) == (35, 48) and 0 < learning_rate < 2e-3
    weights = testing.load_weights(run)
    again = train()
    assert (again["step"], again["resumed_from_step"]) == (48, 48)
    replayed = train(resume_step=32)
    assert (replayed["step"], replayed["resumed_from_step"]) == (48, 32)
    for name, value in testing.load_weights(run).items():
        np.testing.assert_array_equal(value, weights[name], err_msg=name)
    # The record, not the command's limit, makes the schedule: without a limit now, the
    # resume follows the shortened schedule to the same end and weights.
    unlimited = train(resume_step=32, time_limit=None, time_limit_anneal=False)
    assert (unlimited["step"], unlimited["resumed_from_step"]) == (48, 32)
    for name, value in testing.load_weights(run).items():
        np.testing.assert_array_equal(value, weights[name], err_msg=name)
