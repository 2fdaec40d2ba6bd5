"""docs/data.md's TFDS commands as written: a dataset of one's own prepared with the
documented Python route (no Apache Beam, no network: a small builder this test writes),
then trained on by name (`--config.input.dataset=tfds:my_dataset`)."""

import json
import os
import shlex
import subprocess
import sys

import doc_blocks
import trainer_testing as testing

PAGE = os.path.join(testing.ROOT, "docs", "data.md")
NAME = "my_dataset"  # the page's name for the dataset, its package and builder
NUM_CLASSES = 4
SIZES = {"train": 64, "test": 32}

# The builder: images 28x28x1 in which class k lights up band k (learnable), train and test.
BUILDER = f"""
import numpy as np
import tensorflow_datasets as tfds


class MyDataset(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict(
                {{
                    "image": tfds.features.Image(shape=(28, 28, 1)),
                    "label": tfds.features.ClassLabel(num_classes={NUM_CLASSES}),
                }}
            ),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):
        return {{split: self._generate_examples(split, n) for split, n in {SIZES!r}.items()}}

    def _generate_examples(self, split, n):
        rng = np.random.default_rng(len(split))
        for i in range(n):
            label = i % {NUM_CLASSES}
            image = rng.integers(0, 60, (28, 28, 1), dtype=np.uint8)
            image[label * 7 : (label + 1) * 7] += 150
            yield i, {{"image": image, "label": label}}
"""


def documented_commands():
    """The commands of the page's block that prepares and trains on `my_dataset`."""
    for _, code in doc_blocks.blocks(PAGE):
        if f"import {NAME}" in code:
            lines = code.replace("\\\n", " ").splitlines()
            return [line for line in lines if line.strip() and not line.startswith("#")]
    raise AssertionError(f"{PAGE} has no block preparing {NAME}")


def test_a_dataset_prepared_as_documented_trains_by_name(tmp_path):
    prepare, train = documented_commands()
    assert "download_and_prepare()" in prepare and "apache_beam" not in prepare
    assert train.startswith("keras-vit-pretrain ") and f"tfds:{NAME}" in train
    (tmp_path / NAME).mkdir()
    (tmp_path / NAME / "__init__.py").write_text(BUILDER)
    env = testing.env()
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)  # the page's own PYTHONPATH=. alone
    result = subprocess.run(
        ["bash", "-c", prepare], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    info_files = list((tmp_path / "tfds" / NAME).glob("*/dataset_info.json"))
    assert len(info_files) == 1, sorted(map(str, (tmp_path / "tfds").rglob("*")))
    info = json.loads(info_files[0].read_text())
    counts = {s["name"]: sum(int(n) for n in s["shardLengths"]) for s in info["splits"]}
    assert counts == SIZES
    # The documented training command, at the tests' tiny size and for two steps.
    flags = [*testing.TINY, "--config.total_steps=2", "--config.checkpoint_every=2"]
    command = shlex.split(train) + flags
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / shlex.split(train)[-1].split("=", 1)[1]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["step"] == 2
    assert json.loads((run / "class_names.json").read_text())["class_names"] == [
        str(k) for k in range(NUM_CLASSES)
    ]
