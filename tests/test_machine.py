"""cli/machine.py names the CPU kind a figure was measured on: the kinds the
project has run on share the model name 'AMD EPYC' and differ up to 4x."""

import pytest

from keras_vit_cli import machine


@pytest.mark.parametrize(
    "vendor, family, model, kind",
    [
        ("AuthenticAMD", "23", "1", "AMD Zen"),
        ("AuthenticAMD", "23", "49", "AMD Zen 2"),
        ("AuthenticAMD", "25", "1", "AMD Zen 3"),
        ("AuthenticAMD", "25", "17", "AMD Zen 4"),
        ("AuthenticAMD", "26", "2", "AMD Zen 5"),
        ("GenuineIntel", "6", "143", "Intel Sapphire Rapids"),
        ("GenuineIntel", "6", "85", "GenuineIntel family 6 model 85"),
        ("AuthenticAMD", None, None, None),
    ],
)
def test_cpu_kind(vendor, family, model, kind):
    assert machine.cpu_kind(vendor, family, model) == kind


def test_describe_names_the_kind_and_the_family():
    info = {
        "cpu_model": "AMD EPYC",
        "cpu_kind": "AMD Zen 4",
        "cpu_family": "25",
        "cpu_model_number": "17",
        "usable_cpus": 2,
        "instruction_sets": ["avx2", "avx512f", "avx512_bf16"],
    }
    line = machine.describe(info)
    assert line.startswith("AMD EPYC (AMD Zen 4, family 25 model 17), 2 CPUs, AVX2 AVX-512")
