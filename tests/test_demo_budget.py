"""`make demo` trains what fits its 15 minutes on the machine at hand, measured there
(tools/demo_budget.py): a machine that claims one speed (its CPU kind) and trains at
another gets the steps of the speed it trains at; the step count chosen is the run's,
and a resumed run keeps it; an explicit step count is exact.

The machine is faked: a clock that only the fake update moves, so nothing is timed."""

import json
import os

import pytest
from trainer_testing import TINY_MODEL

import keras_vit_configs
from keras_vit_cli import machine
from keras_vit_tools import demo, demo_budget

BATCH = 128
# What an AMD EPYC Zen 4 (family 25 model 17) with AVX-512 claims: the kind that trained
# the demo at 1,111 images/s; behind a hypervisor that masked AVX-512 it trained at 664.
ZEN4_CPUINFO = {
    "vendor_id": "AuthenticAMD",
    "cpu family": "25",
    "model": "17",
    "model name": "AMD EPYC",
    "flags": "avx2 fma avx512f avx512_bf16",
}


class FakeMachine:
    """A clock and an update: each update of `batch` images advances the clock by
    batch / `images_per_second`; building the step (imports, compilation) by `start_s`."""

    def __init__(self, images_per_second, start_s):
        self.rate, self.start_s, self.now = images_per_second, start_s, 0.0

    def clock(self):
        return self.now

    def build(self):
        self.now += self.start_s

        def step(n):
            self.now += n * BATCH / self.rate

        return step

    def measure(self, config_flags=()):
        return demo_budget.measure(self.build, BATCH, clock=self.clock)


def _demo_seconds(count, rate, speed, spent_s):
    """The whole demo's seconds on a machine training at `rate`: what was spent before
    training, the training steps, and what comes after at `speed`'s measured figures."""
    return spent_s + count * BATCH / rate + demo_budget.outside_training_s(speed)


def test_the_calibration_measures_the_update_and_the_start_not_the_kind():
    fake = FakeMachine(images_per_second=664.0, start_s=21.0)
    speed = fake.measure()
    assert speed.images_per_second == pytest.approx(664.0)
    assert speed.start_s == pytest.approx(21.0 + demo_budget.STEPS_PER_CALL * BATCH / 664.0)
    # It timed at least CALIBRATION_S seconds of updates after the compiling call.
    assert fake.now - speed.start_s >= demo_budget.CALIBRATION_S


@pytest.mark.parametrize("rate", [250.0, 664.0, 1111.0, 2500.0])
@pytest.mark.parametrize("spent_s", [0.0, 125.0, 300.0])
def test_the_steps_fill_what_is_left_of_the_budget_at_the_measured_speed(rate, spent_s):
    speed = FakeMachine(rate, start_s=20.0).measure()
    count, why = demo_budget.plan(speed, BATCH, spent_s=spent_s)
    assert count % demo_budget.STEP_QUANTUM == 0
    # Within the budget at the speed it trains at, with the margin kept; one quantum more
    # would eat into the margin.
    total = _demo_seconds(count, rate, speed, spent_s)
    assert total <= demo_budget.BUDGET_S - demo_budget.MARGIN * (
        demo_budget.BUDGET_S - spent_s - demo_budget.outside_training_s(speed)
    )
    more = _demo_seconds(count + demo_budget.STEP_QUANTUM, rate, speed, spent_s)
    assert more > total
    assert f"{count} steps of {BATCH}" in why and f"{rate:.0f} images/s" in why


def test_a_machine_claiming_zen4_that_trains_at_664_images_s_ends_within_the_budget(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(machine, "_cpuinfo", lambda: dict(ZEN4_CPUINFO))
    assert machine.machine_info()["cpu_kind"] == "AMD Zen 4"
    slow = FakeMachine(images_per_second=664.0, start_s=20.0)
    run_dir = str(tmp_path / "run")
    started = demo.time.time() - 125.0  # make setup and the records
    flags = demo.budget_run([], None, run_dir, started, measure=slow.measure)
    count = int(flags[0].split("=")[1])
    speed = slow.measure()
    assert flags == demo_budget.flags(count) + demo_budget.time_limit_flags(speed, BATCH, started)
    assert _demo_seconds(count, 664.0, speed, 125.0) <= demo_budget.BUDGET_S
    # The step count the table of kinds gave this machine (1,111 images/s on Zen 4)
    # would have overrun: the measurement is what decided.
    table_count = (demo_budget.BUDGET_S - 360) * 1111 // BATCH
    assert _demo_seconds(table_count, 664.0, speed, 125.0) > demo_budget.BUDGET_S
    # A faster machine with the same claim trains more steps.
    fast = FakeMachine(images_per_second=1111.0, start_s=20.0)
    flags = demo.budget_run([], None, str(tmp_path / "fast"), started, measure=fast.measure)
    assert int(flags[0].split("=")[1]) > count


def test_the_chosen_steps_are_recorded_and_a_resumed_run_keeps_them(tmp_path):
    run_dir = str(tmp_path / "run")
    first = demo.budget_run([], None, run_dir, demo.time.time(), FakeMachine(664.0, 20).measure)
    with open(os.path.join(run_dir, demo_budget.RECORD)) as f:
        record = json.load(f)
    assert f"--config.total_steps={record['steps']}" == first[0]
    assert record["batch_size"] == keras_vit_configs.load(demo.DEMO_CONFIG).batch_size
    assert record["images_per_second"] == pytest.approx(664.0)

    def must_not_measure(config_flags):
        raise AssertionError("a resumed run measured again")

    # Rerun later on a machine now twice as fast: the same schedule, and the time limit
    # of this demo's start.
    later = demo.time.time() - 600.0
    again = demo.budget_run([], None, run_dir, later, must_not_measure)
    schedule = len(demo_budget.flags(record["steps"]))
    assert again[:schedule] == first[:schedule]
    speed = demo_budget.Speed(record["images_per_second"], record["start_s"])
    assert again[schedule:] == demo_budget.time_limit_flags(speed, record["batch_size"], later)


def _flag(flags, name):
    (value,) = [f.split("=", 1)[1] for f in flags if f.startswith(f"--config.{name}=")]
    return float(value)


@pytest.mark.parametrize("trains_at", [2139.0, 1010.0, 500.0])
def test_a_machine_that_slows_down_after_the_calibration_still_ends_within_the_budget(
    tmp_path, trains_at
):
    """Calibrated at 2,139 images/s, then another job starts: the demo trains at
    `trains_at` (a bare clone's demo on the Zen 5 did so at 1,010), and what comes after
    training slows down as much. Its time limit brings the learning rate's decay forward
    to end where the rest still fits the budget, and training ends there, annealed; the
    machine that keeps its pace trains every planned step."""
    from keras_vit_trainers import controller, time_limit

    calibrated = FakeMachine(2139.0, start_s=13.0)
    started = demo.time.time() - 82.0  # make setup, the records, the calibration
    flags = demo.budget_run([], None, str(tmp_path), started, measure=calibrated.measure)
    speed = calibrated.measure()
    count, deadline = int(_flag(flags, "total_steps")), _flag(flags, "time_limit")
    reserve = int(_flag(flags, "time_limit_reserve_steps"))
    assert "--config.time_limit_anneal=True" in flags
    clock = FakeMachine(trains_at, 0.0)
    clock.now = demo.time.time() + speed.start_s  # the trainer's start
    step = clock.build()
    saved, shortened = [], []
    limit = time_limit.TimeLimit(
        deadline,
        saved.append,
        count,
        reserve,
        clock=clock.clock,
        shorten=lambda at, end: shortened.append((at, end)),
    )
    loop = controller.Controller(
        step, lambda: ({}, {}), count, 100, [limit], lambda: limit.reached, clock.clock
    )
    last = loop.train(0)
    slowdown = 2139.0 / trains_at
    end = clock.now + demo_budget.after_training_s(speed) * slowdown
    assert end <= started + demo_budget.BUDGET_S, (last, count)
    if trains_at == 2139.0:
        assert (last, saved, shortened) == (count, [], [])
    else:
        ((at, shortened_end),) = shortened
        assert at < last == shortened_end < count and saved == [last]


def test_a_larger_batch_trains_fewer_steps_and_the_flag_reaches_the_calibration(tmp_path):
    seen = []

    def measure(config_flags):
        seen.append(list(config_flags))
        return demo_budget.Speed(664.0, 20.0)

    now = demo.time.time()
    small = demo.budget_run([], None, str(tmp_path / "a"), now, measure)
    large = demo.budget_run(["--config.batch_size=256"], None, str(tmp_path / "b"), now, measure)
    assert int(large[0].split("=")[1]) < int(small[0].split("=")[1])
    assert seen == [[], ["--config.batch_size=256"]]


def test_a_budget_that_leaves_no_training_time_is_refused():
    with pytest.raises(ValueError, match=r"--budget_s=900: 850 s already spent .* no time"):
        demo_budget.plan(demo_budget.Speed(664.0, 20.0), BATCH, spent_s=850.0)


@pytest.mark.parametrize(
    "text, match",
    [("{", "not a demo budget record"), ('{"steps": 0}', "steps=0, expected a positive")],
)
def test_a_broken_record_is_one_line_naming_the_file(tmp_path, text, match):
    (tmp_path / demo_budget.RECORD).write_text(text)
    with pytest.raises(ValueError, match=match) as e:
        demo_budget.load(str(tmp_path))
    assert str(tmp_path / demo_budget.RECORD) in str(e.value)


def _trainer_command(monkeypatch, tmp_path, *argv):
    """The trainer command line tools/demo.py runs for `argv` (the trainer not run)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir(exist_ok=True)
    (data_dir / "manifest.json").write_text("{}")  # the records are there
    commands = []

    def step(cmd, **kwargs):
        commands.append(cmd)
        raise SystemExit(0)

    monkeypatch.setattr(demo, "_step", step)
    monkeypatch.setattr(demo, "calibrate", FakeMachine(664.0, 20.0).measure)
    with pytest.raises(SystemExit):
        demo.main([f"--data_dir={data_dir}", f"--model_dir={tmp_path / 'run'}", *argv])
    return commands[0]


def test_an_explicit_step_count_is_exact_and_measures_nothing(tmp_path, monkeypatch):
    cmd = _trainer_command(monkeypatch, tmp_path, "--config.total_steps=77")
    assert [a for a in cmd if a.startswith("--config.total_steps")] == ["--config.total_steps=77"]
    assert not (tmp_path / "run" / demo_budget.RECORD).exists()


def test_the_demo_trains_the_measured_steps_counted_from_makes_start(tmp_path, monkeypatch):
    started = demo.time.time() - 200.0
    cmd = _trainer_command(monkeypatch, tmp_path, f"--started={started}")
    record = demo_budget.load(str(tmp_path / "run"))
    assert record["spent_s"] >= 200.0
    assert f"--config.total_steps={record['steps']}" in cmd
    # 200 s spent before the demo's own start buys fewer steps than none.
    fresh = demo.budget_run(
        [], None, str(tmp_path / "fresh"), demo.time.time(), FakeMachine(664.0, 20.0).measure
    )
    assert int(fresh[0].split("=")[1]) > record["steps"]


def test_the_calibration_runs_the_trainers_own_update():
    config = keras_vit_configs.load(demo.DEMO_CONFIG)
    config.model = {**config.model, **TINY_MODEL, "resnet": None}
    config.jit_compile = False
    config.batch_size = 8
    build = demo_budget.trainer_step(config, 8)
    built = []
    speed = demo_budget.measure(lambda: built.append(build()) or built[0], 8, seconds=0)
    # The compiling call and MIN_TIMED_CALLS timed ones, each of STEPS_PER_CALL updates.
    calls = 1 + demo_budget.MIN_TIMED_CALLS
    assert built[0].train_step.step() == calls * demo_budget.STEPS_PER_CALL
    assert speed.images_per_second > 0 and speed.start_s > 0


# Imports each program the demo's closing lines name, one after another in one process
# (absl's flags of the one before removed), and prints the flags it does not define.
_FLAGS_OF = r"""
import importlib, json, sys
from absl import app, flags
app.run = lambda main, **kwargs: None  # the trainers define --init in app.main
problems = []
for module, names in json.loads(sys.argv[1]):
    before = set(flags.FLAGS)
    importlib.import_module(module)
    if module.startswith("keras_vit_trainers."):
        importlib.import_module("keras_vit_trainers.app").main(module.rsplit(".", 1)[1])
    defined = set(flags.FLAGS)
    problems += [f"{module}: --{n}" for n in names if n not in defined]
    for name in defined - before:
        delattr(flags.FLAGS, name)
print(json.dumps(problems))
"""


def _programs(lines):
    """[(module, [flag names])] of the programs in `lines` (console scripts and
    `python -m` modules); `docker` lines are not ours."""
    import configparser
    import shlex

    scripts = configparser.ConfigParser()
    scripts.read(os.path.join(demo.commands.ROOT, "setup.cfg"))
    entry = dict(
        line.split(" = ")
        for line in scripts["options.entry_points"]["console_scripts"].strip().splitlines()
    )
    programs = []
    for line in lines:
        words = shlex.split(line)
        if words[0] == "docker":
            continue
        if words[0] == "python":
            module, words = words[2], words[2:]
        else:
            function = entry[words[0]].split(":")[1]  # a console script of ours
            package = "trainers" if function in ("pretrain", "finetune") else "tools"
            module = f"keras_vit_{package}.{function}"
        names = [w[2:].split("=")[0] for w in words[1:] if w.startswith("--")]
        programs.append((module, names))
    return programs


def test_the_closing_lines_name_commands_whose_flags_exist(tmp_path):
    import subprocess
    import sys

    run_dir = str(tmp_path / "run")
    steps = demo.next_commands(run_dir, str(tmp_path / "data"))
    assert [what.split()[0] for what, _ in steps] == [
        "serve",
        "an",
        "ONNX",
        "OpenVINO",
        "fine-tune",
    ]
    lines = [line.strip() for _, command in steps for line in command.splitlines()]
    assert any(f"--init={run_dir}" in line for line in lines)
    # TF Serving's container mounts the SavedModel's folder by its absolute path, also
    # where the run directory was given relative to here.
    docker = demo.next_commands(os.path.join("runs", "x"), "data")[0][1].splitlines()[0]
    assert f'source="{os.path.abspath(os.path.join("runs", "x", "export", "saved_model"))}"' in (
        docker
    )
    programs = _programs(lines)
    assert {m for m, _ in programs} == {
        "keras_vit_tools.serve_request",
        "keras_vit_tools.export_tflite",
        "keras_vit_tools.export_onnx",
        "keras_vit_tools.export_openvino",
        "keras_vit_tools.make_tfrecords",
        "keras_vit_trainers.finetune",
    }
    out = subprocess.run(
        [sys.executable, "-c", _FLAGS_OF, json.dumps(programs)],
        capture_output=True,
        text=True,
        env=demo.console.quiet_environment(dict(os.environ)),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


class LoadedMachine(FakeMachine):
    """A machine whose updates run `slowdown` times slower during calls `spell` of the
    calibration (another job starting beside it), at `images_per_second` otherwise."""

    def __init__(self, images_per_second, start_s, spell, slowdown=1.5):
        super().__init__(images_per_second, start_s)
        self.spell, self.slowdown, self.calls = spell, slowdown, 0

    def build(self):
        steady = super().build()

        def step(n):
            slow = self.calls in self.spell
            self.calls += 1
            before = self.now
            steady(n)
            if slow:
                self.now += (self.now - before) * (self.slowdown - 1)

        return step


def test_a_short_spell_of_load_does_not_set_the_speed_but_a_lasting_one_does():
    steady = FakeMachine(1600.0, start_s=14.0).measure().images_per_second
    timed_calls = int(demo_budget.CALIBRATION_S * 1600.0 / (demo_budget.STEPS_PER_CALL * BATCH))
    spell = range(1, 1 + timed_calls // 4)  # a quarter of the timed calls
    briefly = LoadedMachine(1600.0, 14.0, spell).measure().images_per_second
    assert briefly == pytest.approx(steady)
    lasting = LoadedMachine(1600.0, 14.0, range(1, 10**6)).measure().images_per_second
    assert lasting == pytest.approx(1600.0 / 1.5)
