"""Hub names as `weights=` (keras_vit.checkpoint.hub) without a network or the
package: a fake `huggingface_hub` module (its `snapshot_download` copies a
committed fixture folder the way the real one fills its cache; its
`constants.HF_HUB_CACHE`) stands in for the optional extra; offline, without the
package, and malformed names each give one error naming the problem."""

import os
import re
import shutil
import sys
import types

import keras
import numpy as np
import pytest
from interop_testing import FIXTURE_SIZES, FIXTURES

import keras_vit
from keras_vit.checkpoint import hub
from keras_vit.checkpoint.download import DownloadError

# float32 sums of a few dozen O(1) products in two implementations (as tests/test_interop.py).
TOLERANCE = 1e-5


class LocalEntryNotFoundError(FileNotFoundError):
    """As huggingface_hub's: offline, the files not in its cache (an OSError)."""


@pytest.fixture
def huggingface_hub(tmp_path, monkeypatch):
    """A stand-in `huggingface_hub` module in sys.modules; tests set its
    `snapshot_download`."""
    module = types.ModuleType("huggingface_hub")
    module.constants = types.SimpleNamespace(HF_HUB_CACHE=str(tmp_path / "hf_cache"))
    module.snapshot_download = None  # set by each test
    monkeypatch.setitem(sys.modules, "huggingface_hub", module)
    return module


def _fake_snapshot(fixture, tmp_path, calls, extra_files=()):
    """A snapshot_download that copies FIXTURES/fixture (plus `extra_files`) into a
    fresh folder, keeping only the files its allow_patterns name."""

    def snapshot_download(repo_id, repo_type=None, allow_patterns=None, **kwargs):
        calls.append(dict(repo_id=repo_id, repo_type=repo_type, allow_patterns=allow_patterns))
        folder = tmp_path / "snapshot" / repo_id.replace("/", "--")
        folder.mkdir(parents=True, exist_ok=True)
        source = os.path.join(FIXTURES, fixture)
        for name in [*os.listdir(source), *extra_files]:
            if name in allow_patterns:
                shutil.copy(os.path.join(source, name), folder / name)
        return str(folder)

    return snapshot_download


@pytest.mark.parametrize(
    "weights, fixture",
    [
        ("hf://someone/vit-tiny-classifier", "transformers_classifier"),
        ("hf-hub:timm/vit_tiny.fixture", "timm_token"),
    ],
)
def test_hub_name_loads_the_downloaded_folder(
    weights, fixture, huggingface_hub, tmp_path, monkeypatch
):
    """A Hub name downloads only config.json, model.safetensors and
    preprocessor_config.json, and the model equals the one loaded from the folder."""
    calls = []
    monkeypatch.setattr(
        huggingface_hub, "snapshot_download", _fake_snapshot(fixture, tmp_path, calls)
    )
    model = keras_vit.from_weights(weights, **FIXTURE_SIZES)
    assert calls == [
        dict(
            repo_id=weights.split(":", 1)[1].lstrip("/"),
            repo_type="model",
            allow_patterns=list(hub.HUB_FILES),
        )
    ]
    local = keras_vit.from_weights(os.path.join(FIXTURES, fixture), **FIXTURE_SIZES)
    images = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(model(images)), keras.ops.convert_to_numpy(local(images))
    )


@pytest.mark.parametrize(
    "error",
    [LocalEntryNotFoundError("Cannot find the requested files in the disk cache"), OSError("down")],
)
def test_offline_is_one_error_naming_repository_and_cache(error, huggingface_hub, monkeypatch):
    def snapshot_download(*args, **kwargs):
        raise error

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(DownloadError) as info:
        keras_vit.from_weights("hf://google/vit-base-patch16-224", **FIXTURE_SIZES)
    message = str(info.value)
    assert "\n" not in message
    assert "google/vit-base-patch16-224" in message
    assert (
        os.path.join(huggingface_hub.constants.HF_HUB_CACHE, "models--google--vit-base-patch16-224")
        in message
    )
    assert "https://huggingface.co/google/vit-base-patch16-224" in message
    assert "weights='<that folder>'" in message


def test_without_huggingface_hub_says_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # `import` raises ImportError
    with pytest.raises(
        ImportError,
        match=r"timm/vit_x.*pip install -e '\.\[hub\]' in a clone \(pip install "
        r"'keras_vit\[hub\]' from the wheel\).*into a folder",
    ):
        keras_vit.from_weights("hf-hub:timm/vit_x", **FIXTURE_SIZES)


def test_repository_without_safetensors_is_refused(huggingface_hub, tmp_path, monkeypatch):
    """Only model.safetensors is read from the Hub: a repository with a pickle alone
    is refused (the fake snapshot, like the real one, skips files not allowed)."""
    calls = []
    fake = _fake_snapshot("transformers_classifier", tmp_path, calls)

    def without_weights(repo_id, **kwargs):
        folder = fake(repo_id, **kwargs)
        os.remove(os.path.join(folder, hub.HUB_WEIGHTS))
        return folder

    monkeypatch.setattr(huggingface_hub, "snapshot_download", without_weights)
    with pytest.raises(DownloadError, match=r"org/pickled has no model\.safetensors"):
        keras_vit.from_weights("hf://org/pickled", **FIXTURE_SIZES)


@pytest.mark.parametrize(
    "weights, problem",
    [
        ("hf://google", "two parts"),
        ("hf://a/b/c", "two parts"),
        ("hf://../etc", "'..'"),
        ("hf-hub:timm/..", "'..'"),
        ("hf://org/na..me", "not a Hub repository name part"),
        ("hf://org/na me", "not a Hub repository name part"),
        ("hf://org/", "empty"),
        ("hf://org/" + "x" * 97, "not a Hub repository name part"),
    ],
)
def test_bad_repository_id_is_refused_before_any_download(
    weights, problem, huggingface_hub, monkeypatch
):
    def snapshot_download(*args, **kwargs):
        raise AssertionError("downloaded")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(ValueError, match=re.escape(problem)) as info:
        keras_vit.from_weights(weights, **FIXTURE_SIZES)
    assert weights in str(info.value)
