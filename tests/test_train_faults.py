"""A long run on several hosts survives what hosts do: SIGTERM (preemption) saves the step
in flight and a rerun ends with an uninterrupted run's weights, on one process and on two
workers; a worker killed outright ends the other within the collective timeout, with one
line naming it, and restarting both resumes together (docs/training.md, "Preemption and
lost workers"). Real processes on 127.0.0.1, each bounded in time."""

import json
import os
import re
import signal
import time

import keras
import numpy as np
import pytest
import trainer_testing as testing

from keras_vit_trainers import faults

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)

# Long enough that a signal sent just after the first checkpoint lands between two
# checkpoints (a tiny step takes a few milliseconds).
TOTAL, EVERY = 600, 200
STEPS = [
    f"--config.total_steps={TOTAL}",
    f"--config.checkpoint_every={EVERY}",
    "--config.warmup_steps=5",
    "--config.log_every=50",
]
# How long a survivor may take to notice a lost worker: TensorFlow's coordination
# service declares a task lost after its heartbeats stop (no per-collective timeout).
LOST_WORKER_BOUND = 180
MULTI_WORKER = [
    "--strategy=multi_worker",
    "--config.input.shard_by=examples",  # every global batch as one device sees it
]
PREEMPTED = re.compile(r"preempted \(SIGTERM\): step (\d+) saved")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    testing.make_tiny_data(str(d))
    return str(d)


def _wait_for_first_checkpoint(run_dir, procs, timeout=240):
    meta = testing.first_checkpoint_file(run_dir)
    deadline = time.time() + timeout
    while not os.path.exists(meta) and all(p.poll() is None for p in procs):
        assert time.time() < deadline, "no checkpoint within the time limit"
        time.sleep(0.005)
    assert all(p.poll() is None for p in procs), "a process ended before its first checkpoint"
    time.sleep(0.3)  # into the next interval, between two checkpoints


def _assert_same_weights(run_dir, ref_dir):
    w, w_ref = testing.load_weights(run_dir), testing.load_weights(ref_dir)
    assert w.keys() == w_ref.keys()
    for k in w:
        np.testing.assert_allclose(w[k], w_ref[k], rtol=1e-6, atol=1e-7, err_msg=k)


def _resumed_step(stderr):
    m = re.search(r"resumed from step (\d+)", stderr)
    assert m, stderr[-3000:]
    return int(m.group(1))


@pytest.fixture(scope="module")
def two_worker_reference(data, tmp_path_factory):
    ref_dir = str(tmp_path_factory.mktemp("ref2"))
    procs = testing.start_workers(
        testing.trainer_cmd("pretrain", data, ref_dir, *MULTI_WORKER, *STEPS)
    )
    outs = testing.communicate_all(procs)
    assert [p.returncode for p in procs] == [0, 0], _every_worker(outs)
    return ref_dir


def _restart_both(cmd):
    procs = testing.start_workers(cmd)
    outs = testing.communicate_all(procs)
    assert [p.returncode for p in procs] == [0] * len(procs), _every_worker(outs)
    return [_resumed_step(err) for _, err in outs]


def _every_worker(outs):
    """Each worker's stderr tail, for a failure message (one worker's error is often
    the other's doing)."""
    return "\n".join(f"--- worker {i}:\n{err[-2500:]}" for i, (_, err) in enumerate(outs))


def test_sigterm_to_one_of_two_workers_stops_both_at_one_step(data, two_worker_reference, tmp_path):
    run_dir = str(tmp_path)
    cmd = testing.trainer_cmd("pretrain", data, run_dir, *MULTI_WORKER, *STEPS)
    procs = testing.start_workers(cmd)
    try:
        _wait_for_first_checkpoint(run_dir, procs)
        procs[1].send_signal(signal.SIGTERM)  # the other worker is not signalled
    finally:
        outs = testing.communicate_all(procs, timeout=120)
    assert [p.returncode for p in procs] == [faults.EXIT_PREEMPTED] * 2, _every_worker(outs)
    steps = [int(PREEMPTED.findall(err)[-1]) for _, err in outs]
    assert steps[0] == steps[1] and EVERY < steps[0] < TOTAL, steps

    assert _restart_both(cmd) == steps  # both resume at the step they saved
    _assert_same_weights(run_dir, two_worker_reference)


@pytest.mark.parametrize("killed", [1, 0], ids=["worker", "chief"])
def test_a_killed_worker_ends_the_other_with_one_line_and_both_resume(
    data, two_worker_reference, tmp_path, killed
):
    # the chief (worker 0) is the one that writes the checkpoints
    run_dir = str(tmp_path)
    cmd = testing.trainer_cmd("pretrain", data, run_dir, *MULTI_WORKER, *STEPS)
    procs = testing.start_workers(cmd)
    survivor = procs[1 - killed]
    try:
        _wait_for_first_checkpoint(run_dir, procs)
        procs[killed].kill()  # kill -9: no handler, no save
        _, err = survivor.communicate(timeout=LOST_WORKER_BOUND)
    finally:
        testing.communicate_all(procs, timeout=10)
    assert survivor.returncode == faults.EXIT_LOST_WORKER, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert f"lost worker {killed}" in last and "Restart every worker" in last, last
    if killed == 1:
        return  # the restart after a lost worker is the same whoever was lost: the chief's

    steps = _restart_both(cmd)
    assert steps[0] == steps[1] and steps[0] % EVERY == 0 and steps[0] >= EVERY, steps
    _assert_same_weights(run_dir, two_worker_reference)


def test_lost_worker_line_names_the_other_task():
    import tensorflow as tf

    error = tf.errors.UnavailableError(
        None,
        None,
        "Collective ops is aborted by: failed to connect to all addresses\n"
        "Additional GRPC error information from remote target /job:worker/replica:0/task:1",
    )
    line = faults.lost_worker_line(error, ("worker", 0), timeout=30)
    assert line.startswith("lost worker 1: a collective failed (collective_timeout=30 s)")
    assert "\n" not in line
    assert faults.lost_worker_line(ValueError("bad shape"), ("worker", 0)) is None
    assert faults.lost_worker_line(tf.errors.InvalidArgumentError(None, None, "x"), None) is None


# A callback that sends its own process SIGTERM once the run reaches SIGTERM_AT_STEP:
# a preemption at a known step, on every process that runs it.
SIGTERM_CALLBACK = """
import os, signal
import keras

class SigtermAt(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == int(os.environ["SIGTERM_AT_STEP"]):
            os.kill(os.getpid(), signal.SIGTERM)
"""
SHORT = [
    "--config.total_steps=40",
    "--config.checkpoint_every=20",
    "--config.warmup_steps=5",
    "--config.evals.test.every=20",
]


@pytest.fixture(scope="module")
def sigterm_at(tmp_path_factory):
    """(PYTHONPATH holding the callback module, its --config.callbacks flag)."""
    folder = tmp_path_factory.mktemp("callbacks")
    (folder / "sigterm_at.py").write_text(SIGTERM_CALLBACK)
    return str(folder), "--config.callbacks=sigterm_at:SigtermAt"


USER_CALLBACK = """
import json, os
import keras

class RecordSteps(keras.callbacks.Callback):
    def on_train_end(self, logs=None):
        with open(os.environ["RECORD_STEPS_TO"], "w") as f:
            json.dump({"step": int(self.model.optimizer.iterations.numpy())}, f)
"""
# What watches a run; none of it changes the weights, so the reference run has them on.
WATCHED = [
    "--config.log_every=10",
    "--config.profile_steps=12,15",
    "--config.callbacks=user_callbacks:RecordSteps",
]


@pytest.fixture(scope="module")
def short_reference(data, tmp_path_factory):
    """An uninterrupted one-process run of SHORT, watched (WATCHED): (its folder, its
    process, the user callback's record)."""
    folder = tmp_path_factory.mktemp("short_ref")
    (folder / "user_callbacks.py").write_text(USER_CALLBACK)
    ref_dir, record = str(folder / "run"), folder / "record.json"
    ref = testing.run(
        testing.trainer_cmd("pretrain", data, ref_dir, "--strategy=default", *SHORT, *WATCHED),
        PYTHONPATH=str(folder),
        RECORD_STEPS_TO=str(record),
    )
    assert ref.returncode == 0, ref.stderr[-3000:]
    return ref_dir, ref, record


def test_a_run_is_watched_every_log_every_steps_profiled_and_joined_by_callbacks(short_reference):
    import tensorflow as tf

    run_dir, run, record = short_reference
    points = {}
    for root, _, files in os.walk(os.path.join(run_dir, "tensorboard")):
        for name in files:
            if name.startswith("events.out.tfevents"):
                for event in tf.compat.v1.train.summary_iterator(os.path.join(root, name)):
                    for value in event.summary.value:
                        kind = os.path.basename(root)
                        points.setdefault((kind, value.tag), []).append(event.step)
    for tag in ("loss", "accuracy", "learning_rate", "gradient_norm", "images_per_second"):
        assert sorted(points.get(("train", f"train/{tag}"), [])) == [10, 20, 30, 40], (
            tag,
            sorted(points),
        )
    evals = [steps for (kind, tag), steps in points.items() if kind == "test"]
    assert evals and all(sorted(steps) == [20, 40] for steps in evals), sorted(points)
    # the gradient norm is the one before clipping: positive, finite, in the log too
    norms = [l["gradient_norm"] for l in testing.train_log(run_dir)]
    assert len(norms) == 2 and all(0 < n < float("inf") for n in norms), norms

    traces = [
        name
        for _, _, files in os.walk(os.path.join(run_dir, "tensorboard", "train", "plugins"))
        for name in files
        if name.endswith(".xplane.pb")
    ]
    assert traces, "no profiler trace"
    assert "profile of steps 12-15 written" in run.stderr
    with open(record) as f:  # the user's callback ran, to the end of training
        assert json.load(f) == {"step": 40}


def _assert_close_to_one_device(run_dir, ref_dir):
    """Within the bound tests/test_train_strategies.py holds several replicas to against
    one device on the same global batches (another summation order)."""
    w, w_ref = testing.load_weights(run_dir), testing.load_weights(ref_dir)
    assert w.keys() == w_ref.keys()
    for k in w:
        np.testing.assert_allclose(w[k], w_ref[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_sigterm_saves_the_step_in_flight_then_an_evaluation_cut_short_and_reruns_equal_one_run(
    data, sigterm_at, short_reference, tmp_path
):
    """One run preempted twice, each time by a SIGTERM its own process receives: at step 13,
    between two checkpoints (every 20), it saves step 13 and says so in one line; rerun, it
    resumes at 13, and a SIGTERM at step 20, just before the step-20 evaluation, ends that
    evaluation at its first batch, records nothing of it and saves step 20; rerun, it resumes
    at 20, evaluates at 20 and 40 and ends with the uninterrupted run's weights, bit for bit.
    (A SIGTERM from outside, at a moment the test does not choose, is sent to one of two
    workers below.)"""
    pythonpath, flag = sigterm_at
    run_dir = str(tmp_path)
    cmd = testing.trainer_cmd("pretrain", data, run_dir, "--strategy=default", *SHORT)
    first = testing.run([*cmd, flag], PYTHONPATH=pythonpath, SIGTERM_AT_STEP="13")
    assert first.returncode == faults.EXIT_PREEMPTED, first.stderr[-3000:]
    assert [int(s) for s in PREEMPTED.findall(first.stderr)] == [13], first.stderr[-3000:]
    assert not os.path.exists(os.path.join(run_dir, "metrics.json"))

    second = testing.run([*cmd, flag], PYTHONPATH=pythonpath, SIGTERM_AT_STEP="20")
    assert second.returncode == faults.EXIT_PREEMPTED, second.stderr[-3000:]
    assert _resumed_step(second.stderr) == 13  # nothing lost but the step in flight
    assert [int(s) for s in PREEMPTED.findall(second.stderr)] == [20], second.stderr[-3000:]
    assert "test evaluation ended early (preemption)" in second.stderr
    assert not os.path.exists(os.path.join(run_dir, "eval_log.jsonl"))  # nothing recorded

    resumed = testing.run(cmd)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _resumed_step(resumed.stderr) == 20
    with open(os.path.join(run_dir, "eval_log.jsonl")) as f:
        assert [json.loads(line)["step"] for line in f] == [20, 40]
    # The checkpoint interval's rest first: one log record at each configured step.
    assert [l["step"] for l in testing.train_log(run_dir)] == [20, 40]
    _assert_same_weights(run_dir, short_reference[0])


def test_one_process_resumed_as_two_workers_then_as_one_again(
    data, sigterm_at, short_reference, tmp_path
):
    """Elastic both ways in one run: one process preempted at step 10, resumed as two
    workers preempted at step 30 (each by the callback: the step TensorFlow's handler
    agrees on), resumed as one process to the end; the weights of one device's run."""
    pythonpath, flag = sigterm_at
    run_dir = str(tmp_path)
    one = testing.trainer_cmd("pretrain", data, run_dir, "--strategy=default", *SHORT)
    stopped = testing.run([*one, flag], PYTHONPATH=pythonpath, SIGTERM_AT_STEP="10")
    assert stopped.returncode == faults.EXIT_PREEMPTED, stopped.stderr[-3000:]
    assert [int(s) for s in PREEMPTED.findall(stopped.stderr)] == [10], stopped.stderr[-3000:]

    two = testing.trainer_cmd("pretrain", data, run_dir, *MULTI_WORKER, *SHORT, flag)
    procs = testing.start_workers(two, env_extra=dict(PYTHONPATH=pythonpath, SIGTERM_AT_STEP="30"))
    outs = testing.communicate_all(procs)
    assert [p.returncode for p in procs] == [faults.EXIT_PREEMPTED] * 2, _every_worker(outs)
    assert [_resumed_step(err) for _, err in outs] == [10, 10], _every_worker(outs)
    steps = [int(PREEMPTED.findall(err)[-1]) for _, err in outs]
    assert steps[0] == steps[1] and 30 <= steps[0] < 40, steps

    resumed = testing.run(one)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _resumed_step(resumed.stderr) == steps[0]
    _assert_close_to_one_device(run_dir, short_reference[0])


def test_a_stopped_worker_ends_the_other_with_one_line(data, tmp_path):
    run_dir = str(tmp_path)
    cmd = testing.trainer_cmd("pretrain", data, run_dir, *MULTI_WORKER, *STEPS)
    procs = testing.start_workers(cmd)
    try:
        _wait_for_first_checkpoint(run_dir, procs)
        procs[1].send_signal(signal.SIGSTOP)  # hung: alive, but no heartbeat
        _, err = procs[0].communicate(timeout=LOST_WORKER_BOUND)
    finally:
        procs[1].send_signal(signal.SIGCONT)
        testing.communicate_all(procs, timeout=30)
    assert procs[0].returncode == faults.EXIT_LOST_WORKER, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert "lost worker 1" in last and "collective_timeout" not in last, last
