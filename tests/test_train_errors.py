"""Bad inputs fail clearly: a NaN loss stops the run and keeps the last good checkpoint;
a config or --config flag mistake is one line naming the flag, before any model is built
(trainers/config_checks.py, and the schedule, optimizer and evaluators checked by being
made). Each mistake is checked here in-process; tests/test_mistakes.py runs the trainers'
(a missing or empty data_dir, no TPU, a schedule, XLA on replicas, a builder's key) as
processes, with the rest of every program's, for the one `error:` line and nothing left."""

import os

import keras
import pytest
import trainer_testing as testing

from keras_vit_configs import cifar10, fashion_mnist
from keras_vit_trainers import checkpointing

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    testing.make_tiny_data(str(d))
    return str(d)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(data, tmp_path):
    run_dir = str(tmp_path / "run")
    # lr 0 for step 1 (warmup), then 5e37 with no clipping: weights overflow at step 2,
    # the loss of step 3 is NaN.
    r = testing.run(
        testing.trainer_cmd(
            "pretrain",
            data,
            run_dir,
            "--strategy=default",
            "--config.total_steps=6",
            "--config.checkpoint_every=1",
            "--config.warmup_steps=2",
            "--config.optimizer=sgd",
            "--config.momentum=0.0",
            "--config.learning_rate=1e38",
            "--config.decay_type=constant",
            "--config.grad_clip_norm=0",
        )
    )
    assert r.returncode == 3, r.stderr[-3000:]
    assert "loss became NaN/inf at step" in r.stderr
    assert "last good checkpoint" in r.stderr
    saved = checkpointing.saved_steps(os.path.join(run_dir, "checkpoints"))[0]
    log = testing.train_log(run_dir)
    finite = [l for l in log if l["loss"] == l["loss"]]
    assert log[-1]["loss"] != log[-1]["loss"]  # the NaN interval is logged ...
    assert 1 <= saved == len(finite) < 6  # ... but only finite ones were checkpointed
    assert os.path.exists(os.path.join(run_dir, "checkpoints", f"ckpt-{saved}.index"))
    assert not os.path.exists(os.path.join(run_dir, "metrics.json"))


def test_resuming_another_models_checkpoints_is_one_line(data, tmp_path):
    """The same --model_dir rerun with another model (a demo run folder of the former
    default model): exit 2 and one error line naming the checkpoint, nothing trained."""
    run_dir = str(tmp_path / "run")
    flags = ("--strategy=default", "--config.total_steps=2", "--config.checkpoint_every=1")
    first = testing.run(testing.trainer_cmd("pretrain", data, run_dir, *flags))
    assert first.returncode == 0, first.stderr[-3000:]
    wider = testing.run(
        testing.trainer_cmd("pretrain", data, run_dir, *flags, "--config.model.mlp_dim=48")
    )
    assert wider.returncode == 2, wider.stderr[-3000:]
    (line,) = [l for l in wider.stderr.splitlines() if l.startswith("error:")]
    assert "ckpt-2 does not hold this run's model and optimizer" in line, wider.stderr[-3000:]
    assert line.endswith("train into a new --model_dir.")
    assert checkpointing.saved_steps(os.path.join(run_dir, "checkpoints"))[0] == 2


# --- config and flag mistakes: one line naming the flag, no model ----------------------------

# A trainer whose `train_lib.build` says so and exits with 99: a mistake found before the
# model is built never gets there (tests/test_mistakes.py, tests/test_shape_mistakes.py).
NOT_BUILT = (
    "import runpy, sys\n"
    "from keras_vit_trainers import train_lib\n"
    "def build(*args, **kwargs):\n"
    "    print('MODEL BUILT', file=sys.stderr)\n"
    "    sys.exit(99)\n"
    "train_lib.build = build\n"
    "if sys.argv[1] == '-m':  # python -m keras_vit_trainers.<trainer> (cli/commands.py)\n"
    "    sys.argv = sys.argv[2:]\n"
    "    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
    "else:  # python trainers/<trainer>.py\n"
    "    sys.argv = sys.argv[1:]\n"
    "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def _check(overrides, config=None):
    """What a trainer checks before its model, on fashion_mnist (pretrain) with
    `overrides` and no evals but theirs, under the default strategy:
    config_checks.check_values and check, then the optimizer and the evaluators made as
    train_lib.run makes them (no data: an evaluation's type is checked before its data
    is read). Returns the jit_compile."""
    import tensorflow as tf

    from keras_vit_trainers import config_checks, train_config, train_lib

    resolved = train_config.resolve(
        config or fashion_mnist.get_config(), "pretrain", {"evals": {}, **overrides}
    )
    strategy = tf.distribute.get_strategy()
    objective = config_checks.check_values(resolved)
    jit_compile = config_checks.check(resolved, strategy, objective)
    train_lib.make_optimizer(resolved, strategy, resolved.total_steps)
    train_lib.make_evaluators(resolved, None)
    return jit_compile


def test_the_shipped_config_passes_the_checks():
    assert _check({}) in (True, False)
    assert _check({}, cifar10.get_config()) in (True, False)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"total_steps": 20, "warmup_steps": 50}, "--config.total_steps=20 must exceed"),
        ({"decay_type": "step"}, "--config.decay_type='step': expected linear, cosine"),
        ({"optimizer": "lamb"}, "--config.optimizer='lamb': expected adamw or sgd"),
        ({"loss": "hinge"}, "--config.loss='hinge': expected softmax or sigmoid"),
        ({"objective": "jigsaw"}, "--config.objective='jigsaw': expected one of"),
        ({"input.crop": "light2"}, "give --config.input.aug_setting=light2"),
        ({"input.crop": "crop"}, "--config.input.crop='crop': expected inception_crop"),
        (  # the crop's former name: folded into input.crop, then checked as it
            {"input.augment": "light2"},
            "--config.input.crop='light2': expected inception_crop, random_crop or none; "
            "'light2' is an AugReg setting: give --config.input.aug_setting=light2",
        ),
        (
            {"input.augment": "none", "input.crop": "random_crop"},
            "--config.input.augment='none' and --config.input.crop='random_crop' disagree",
        ),
        ({"input.aug_setting": "medium9"}, "--config.input.aug_setting='medium9': expected one"),
        ({"input.randaug": "(2,x)"}, "--config.input.randaug='(2,x)': expected None"),
        ({"input.mixup": -1.0}, "--config.input.mixup=-1.0: expected a Beta concentration"),
        ({"input.shard_by": "rows"}, "--config.input.shard_by='rows': expected one of"),
        (
            {"input.data_service": "localhost:5050"},
            "--config.input.data_service='localhost:5050': expected grpc://HOST:PORT",
        ),
        (
            {"objective": "masked_patch", "input.aug_setting": "light2"},
            "--config.input.mixup / cutmix / aug_setting: Mixup and CutMix (randaug(2,10) "
            "mixup(0.2)) mix class labels, which the masked_patch objective's targets are not",
        ),
        (
            {"objective": "masked_patch", "masked_patch.target": "hsv"},
            "--config.masked_patch: target must be one of ['intensity', 'rgb'], got 'hsv'",
        ),
        ({"masked_patch.bits": 9, "objective": "masked_patch"}, "bits must be in 1..8"),
        ({"model": "ViT_X16"}, "--config.model='ViT_X16': no such keras_vit builder"),
        (
            {"model.hiden_size": 16},
            "--config.model / --config.model_overrides: VisionTransformer got an unexpected "
            "keyword argument 'hiden_size'",
        ),
        ({"evals": {"x": {"type": "roc"}}}, "--config.evals.x.type='roc': expected one of"),
        ({"jit_compile": "yes"}, "--config.jit_compile='yes': expected 'auto', True or False"),
        ({"freeze": "all"}, "--config.freeze='all': expected one of none, backbone"),
        ({"layer_decay": 0.0}, "--config.layer_decay=0.0: expected a value in (0, 1]"),
        (
            {"weight_decay_exclude": ("bias", "")},
            "--config.weight_decay_exclude=('bias', ''): expected a tuple of variable names",
        ),
        (
            {"jit_compile": True, "deterministic_ops": True},
            "--config.jit_compile=True: Keras compiles no XLA while op determinism is on",
        ),
        ({"profile_steps": (20, 10)}, "--config.profile_steps=(20, 10): expected two steps"),
        ({"log_every": -1}, "--config.log_every=-1: expected a step count >= 0"),
        ({"collective_timeout": 0.0}, "--config.collective_timeout=0.0: expected seconds > 0"),
        ({"time_limit": -1.0}, "--config.time_limit=-1.0: expected seconds since 1970"),
        (
            {"time_limit_reserve_steps": -3},
            "--config.time_limit_reserve_steps=-3: expected a step count >= 0",
        ),
        (
            {"callbacks": ("no_such_module_here:Cb",)},
            "--config.callbacks[0]='no_such_module_here:Cb': cannot import no_such_module_here",
        ),
        ({"callbacks": ("json",)}, "--config.callbacks[0]='json': expected 'module:name'"),
    ],
)
def test_each_config_mistake_is_one_line_naming_the_flag(overrides, message):
    from keras_vit_trainers import config_checks

    with pytest.raises(config_checks.ConfigError) as error:
        _check(overrides)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_a_time_limit_is_refused_on_several_workers(monkeypatch):
    """Each worker would read its own clock and stop at another step."""
    from keras_vit_trainers import config_checks, strategy

    assert _check({"time_limit": 2e9}) in (True, False)  # one process: taken
    monkeypatch.setattr(strategy, "kind", lambda s: "multi_worker")
    with pytest.raises(config_checks.ConfigError) as error:
        _check({"time_limit": 2e9})
    assert str(error.value).startswith(
        "--config.time_limit=2e+09: one process only, not --strategy=multi_worker"
    )


def test_a_config_file_giving_both_crop_names_differently_is_refused():
    from keras_vit_trainers import config_checks

    config = fashion_mnist.get_config()  # input.crop = "none"
    config.input.augment = "random_crop"
    with pytest.raises(config_checks.ConfigError) as error:
        _check({}, config)
    assert str(error.value) == (
        "--config.input.augment='random_crop' and --config.input.crop='none' disagree: "
        "input.augment is the deprecated name of input.crop; give --config.input.crop alone"
    )


@pytest.mark.parametrize(
    "config, key, message",
    [
        (
            "cifar10",
            "model.stochastic_depth_rate",
            "--config.model.stochastic_depth_rate: config.model is the builder name "
            "'ViT_B16', which has no keys; give --config.model_overrides.stochastic_depth_rate",
        ),
        (
            "fashion_mnist",
            "model.representation_size",
            "--config.model.representation_size: config.model has no key "
            "'representation_size' (give --config.model_overrides.representation_size)",
        ),
        ("fashion_mnist", "nokey", "--config.nokey: config has no key 'nokey'"),
        ("cifar10", "input.nokey", "--config.input.nokey: config.input has no key 'nokey' (its"),
        ("cifar10", "seed.x", "--config.seed.x: config.seed is 0, which has no keys"),
        ("cifar10", "model_overrides.stochastic_depth_rate", None),
        ("fashion_mnist", "model.hidden_size", None),
        ("fashion_mnist", "input.augment", None),  # the crop's former name, for one release
        ("fashion_mnist", "input.crop", None),
    ],
)
def test_override_error_names_the_flag_and_the_fix(config, key, message):
    from keras_vit_trainers import train_config

    module = {"cifar10": cifar10, "fashion_mnist": fashion_mnist}[config]
    got = train_config.override_error(module.get_config(), key)
    if message is None:
        assert got is None
    else:
        assert got.startswith(message)
