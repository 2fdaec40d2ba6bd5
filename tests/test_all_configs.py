"""Every code path of the configs in configs/ trains a step under the default strategy (XLA
on one CPU replica: every path of the trainers and the model) and every path of the
trainers under mirrored over 2 CPU replicas (no XLA there; a model's own choices, its
blocks, pooling and ResNet stem, are built and compiled under mirrored but trained under
the default strategy), with `jit_compile="auto"` resolved for each: tiny model, 8x8 images,
batch 4, no evaluations (tests/all_configs_driver.py; one process per strategy, both
started at once). A config whose path (`all_configs_driver.path_key`) another config
trained is resolved, checked, planned and its tiny model built, not trained again.
And the stochastic-depth flag the README gives works on every config.
"""

import contextlib
import copy
import os
import sys

import all_configs_driver
import keras
import pytest
import trainer_testing as testing

from keras_vit import compilation

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)

DRIVER = os.path.join(testing.ROOT, "tests", "all_configs_driver.py")
STRATEGIES = {"default": [], "mirrored": ["--cpu_replicas=2", "--trainer_paths"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{strategy: its driver's process, running}."""
    data = str(tmp_path_factory.mktemp("data"))
    testing.make_tiny_data(data)
    with contextlib.ExitStack() as stack:
        yield {
            name: stack.enter_context(
                testing.started(
                    [
                        testing.PY,
                        DRIVER,
                        f"--strategy={name}",
                        *flags,
                        f"--data_dir={data}",
                        f"--model_dir={tmp_path_factory.mktemp(name)}",
                    ],
                    cwd=testing.ROOT,
                    env=testing.env(),
                )
            )
            for name, flags in STRATEGIES.items()
        }


def _results(process):
    """({spec: (mode, step, jit_compile)}, {spec validated: the spec trained on its path})
    from the driver's lines: an `ok` line's own figures; a `same` line's mode and
    jit_compile, and the step of the config that trained its path."""
    out, err = process.communicate(timeout=900)
    assert process.returncode == 0, out + err[-5000:]
    results, same = {}, {}
    for line in out.splitlines():
        word, spec, *rest = line.split()
        if word == "ok":
            mode, step, jit = rest
            results[spec] = (mode, int(step.split("=")[1]), jit.split("=")[1] == "True")
        elif word == "same":
            trained, mode, jit = rest
            results[spec] = (mode, results[trained][1], jit.split("=")[1] == "True")
            same[spec] = trained
    return results, same


def _paths(model=True):
    """{spec: its path_key (`model`: with the model's choices)} of every config."""
    return {
        spec: all_configs_driver.path_key(*all_configs_driver.resolve(spec), model=model)
        for spec in all_configs_driver.specs()
    }


def _expected(spec, strategy):
    """(mode, jit_compile) for `spec`: its mode, and "auto" under the rule for this CPU, the
    strategy's replicas and the config's dtype (mixed precision: bfloat16 on a CPU)."""
    mode, config = all_configs_driver.resolve(spec)
    jit, _ = compilation.training_jit_compile(
        config.jit_compile,
        strategy=strategy,
        device_type="CPU",
        replicas=2 if strategy == "mirrored" else 1,
        compute_dtype="bfloat16" if config.mixed_precision else "float32",
        cpu_flags=compilation.cpu_flags(),
        deterministic=config.deterministic_ops,
    )
    return mode, jit


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_config_trains_a_step(runs, strategy):
    results, same = _results(runs[strategy])
    specs = all_configs_driver.specs()
    assert {"fashion_mnist", "fashion_mnist_masked_patch", "vit_b16_masked_patch"} <= set(specs)
    assert {"vtab1k:dtd", "cifar10", "augreg_i21k"} <= set(specs)
    assert sorted(results) == specs
    # One config trained per code path; each other config shares the path of the one it
    # names, and that one trained.
    paths = _paths(model="--trainer_paths" not in STRATEGIES[strategy])
    trained = [spec for spec in specs if spec not in same]
    assert len(trained) == len(set(paths.values())), trained
    assert len({paths[spec] for spec in trained}) == len(trained)
    for spec, first in same.items():
        assert first in trained and paths[spec] == paths[first], spec
    for spec, (mode, step, jit) in results.items():
        assert step == 1, spec
        assert (mode, jit) == _expected(spec, strategy), spec
    if strategy == "mirrored":  # XLA cannot train two CPU replicas
        assert not any(jit for _, _, jit in results.values())
    else:  # float32 on one CPU replica: XLA, the demo's measured choice
        assert results["fashion_mnist"][2] is True


def test_the_path_key_tells_values_from_code_paths():
    """Another hyper-parameter value is the same path; another loss, augmentation, model
    kind or optimizer is another; every config key is known as one or the other."""
    mode, base = all_configs_driver.resolve("cifar10")
    key = all_configs_driver.path_key(mode, base)

    def changed(**values):
        config = copy.deepcopy(base)
        for dotted, value in values.items():
            *parents, leaf = dotted.split(".")
            node = config
            for part in parents:
                node = node[part]
            node[leaf] = value
        return all_configs_driver.path_key(mode, config)

    assert changed(learning_rate=0.5, total_steps=7, batch_size=8, linear_end=0.0) == key
    assert changed(**{"input.shuffle_buffer": 3, "model_overrides.dropout_rate": 0.0}) == key
    assert changed(**{"model.num_layers": 3, "momentum": 0.5, "seed": 1, "image_size": 16}) == key
    for path in (
        {"loss": "sigmoid"},
        {"input.mixup": 0.2},
        {"input.aug_setting": "light1"},
        {"input.crop": "random_crop"},
        {"optimizer": "adamw"},
        {"decay_type": "linear"},
        {"ema_momentum": 0.0},
        {"mixed_precision": True},
        {"layer_decay": 0.75},
        {"freeze": "backbone"},
        {"model_overrides.classifier": "gap"},
        {"model_overrides.representation_size": 8},
        {"model_overrides.stochastic_depth_rate": 0.1},
        {"model.resnet": {"num_layers": (), "width_factor": 0.5}},
        {"objective": "masked_patch"},
    ):
        assert changed(**path) != key, path
    assert all_configs_driver.path_key("pretrain", base) != key
    # Two configs of configs/ that differ in values only, and two that differ in a path.
    assert _paths()["pets"] == key
    assert _paths()["fashion_mnist_hybrid:stem"] != _paths()["fashion_mnist"]
    for spec in all_configs_driver.specs():
        assert all_configs_driver.unclassified_keys(all_configs_driver.resolve(spec)[1]) == []
    base.new_key = 1
    assert all_configs_driver.unclassified_keys(base) == ["new_key"]
    with pytest.raises(ValueError, match="new_key"):
        all_configs_driver.path_key(mode, base)


@pytest.mark.parametrize("spec", all_configs_driver.specs())
def test_the_stochastic_depth_flag_reaches_the_model_on_every_config(spec, monkeypatch):
    """--config.model_overrides.stochastic_depth_rate=0.1, parsed as the trainers parse
    flags, gets to the model's constructor (a builder name's or a dict model's)."""
    from absl import flags
    from ml_collections import config_flags

    import keras_vit
    from keras_vit_trainers import train_config, train_lib

    name, _, task = spec.partition(":")
    flag_values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "", flag_values, lock_config=False)
    config_file = os.path.join(testing.ROOT, "configs", f"{name}.py") + (f":{task}" if task else "")
    argv = [
        "trainer",
        f"--config={config_file}",
        "--config.model_overrides.stochastic_depth_rate=0.1",
    ]
    monkeypatch.setattr(sys, "argv", argv)  # where config_flags reads the overrides
    flag_values(argv)
    mode, _ = all_configs_driver.resolve(spec)
    config = train_config.resolve(
        flag_values.config, mode, config_flags.get_override_values(flag_values["config"])
    )
    built = []
    monkeypatch.setattr(
        keras_vit, "build_model", lambda model, **kwargs: built.append((model, kwargs))
    )
    train_lib.model_factory(config)()
    ((model, kwargs),) = built
    arguments = {**(model if isinstance(model, dict) else {}), **kwargs}
    assert arguments["stochastic_depth_rate"] == 0.1
    # The keys left unset are not passed: the model's own values stand.
    assert None not in arguments.values()
