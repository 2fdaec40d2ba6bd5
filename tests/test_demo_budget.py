"""`make demo` trains what fits its 15 minutes on the machine at hand
(tools/demo_budget.py): the steps follow the CPU kind's measured speed, never a
budget below the time spent outside training."""

import pytest

import keras_vit_configs
from keras_vit_cli import machine
from keras_vit_tools import demo, demo_budget


def _seconds_of_training(count, kind_rate, batch):
    return count * batch / kind_rate


@pytest.mark.parametrize("kind", sorted(demo_budget.IMAGES_PER_SECOND))
def test_the_steps_fill_the_budget_at_the_kinds_speed(kind):
    rate = demo_budget.IMAGES_PER_SECOND[kind]
    count, why = demo_budget.steps({"cpu_kind": kind}, 128)
    train_s = demo_budget.BUDGET_S - demo_budget.OVERHEAD_S
    assert count % demo_budget.STEP_QUANTUM == 0
    # Within one quantum of steps below the training time, never above it.
    assert _seconds_of_training(count, rate, 128) <= train_s
    assert _seconds_of_training(count + demo_budget.STEP_QUANTUM, rate, 128) > train_s
    assert f"{count} steps" in why and kind in why


def test_a_faster_kind_trains_more_steps_and_a_larger_batch_fewer():
    slow = min(demo_budget.IMAGES_PER_SECOND, key=demo_budget.IMAGES_PER_SECOND.get)
    fast = max(demo_budget.IMAGES_PER_SECOND, key=demo_budget.IMAGES_PER_SECOND.get)
    assert (
        demo_budget.steps({"cpu_kind": fast}, 128)[0]
        > demo_budget.steps({"cpu_kind": slow}, 128)[0]
    )
    assert (
        demo_budget.steps({"cpu_kind": fast}, 256)[0]
        < demo_budget.steps({"cpu_kind": fast}, 128)[0]
    )


def test_an_unmeasured_kind_gets_the_slowest_figure_of_its_class():
    avx512 = {"cpu_kind": "AMD Zen 9", "instruction_sets": ["avx2", "avx512f"]}
    rate, source = demo_budget.images_per_second(avx512)
    assert rate == min(demo_budget.IMAGES_PER_SECOND[k] for k in demo_budget.AVX512_KINDS)
    assert "AMD Zen 9 not measured" in source
    rate, _ = demo_budget.images_per_second({"cpu_kind": "Other", "instruction_sets": ["avx2"]})
    assert rate == min(demo_budget.IMAGES_PER_SECOND.values())


def test_a_budget_below_the_overhead_is_refused():
    with pytest.raises(ValueError, match=f"--budget_s=200: below the {demo_budget.OVERHEAD_S} s"):
        demo_budget.steps({"cpu_kind": "AMD Zen 4"}, 128, budget_s=200)


def test_the_demo_trains_the_budgets_steps_of_its_config_batch():
    flags = demo.budget_run([], None)
    batch = keras_vit_configs.load(demo.DEMO_CONFIG).batch_size
    count, _ = demo_budget.steps(machine.machine_info(), batch)
    assert flags == demo_budget.flags(count)
    assert f"--config.total_steps={count}" in flags
    assert f"--config.warmup_steps={count // 15}" in flags
    assert f"--config.checkpoint_every={count // 3}" in flags
    half, _ = demo_budget.steps(machine.machine_info(), 2 * batch)
    assert demo.budget_run([f"--config.batch_size={2 * batch}"], None)[0] == (
        f"--config.total_steps={half}"
    )
