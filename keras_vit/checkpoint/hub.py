"""Hugging Face Hub names as `weights=` values, downloaded through `huggingface_hub`.

    hf://<org>/<name>         a transformers ViT repository ('hf://google/vit-base-patch16-224')
    hf-hub:<org>/<name>       timm's spelling ('hf-hub:timm/vit_base_patch16_224.augreg_in1k')

Either prefix fetches the repository's `HUB_FILES` alone (config.json,
model.safetensors, preprocessor_config.json: never a pickle, never code) with
`huggingface_hub.snapshot_download` into huggingface_hub's own cache (HF_HUB_CACHE,
HF_HUB_OFFLINE and HF_TOKEN apply as for every Hub library), and the snapshot
folder is opened as a local timm / transformers directory
(`keras_vit.checkpoint.interop`). `huggingface_hub` is the optional extra
`keras_vit[hub]`.

The repository id is checked before anything is imported or downloaded: exactly
`<org>/<name>`, each part the Hub's characters (letters, digits, '-', '_', '.'),
at most 96 of them, and a safe path component (`cache.check_component`).
"""

import os
import re

from keras_vit.checkpoint import cache, hub_names, state_dict
from keras_vit.checkpoint.download import DownloadError

PREFIXES = ("hf://", "hf-hub:")
HUB_WEIGHTS = state_dict.HUB_WEIGHTS[0]  # model.safetensors: the only weights read from the Hub
HUB_FILES = (state_dict.HUB_CONFIG, HUB_WEIGHTS, state_dict.HUB_PREPROCESSOR)
EXTRA = "keras_vit[hub]"
# The command, as README.md and docs/checkpoints.md give it: a clone, or the wheel.
INSTALL = f"pip install -e '.[hub]' in a clone (pip install '{EXTRA}' from the wheel)"
_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def claims(weights):
    """Whether a `weights` string is a Hub name (by its prefix)."""
    return weights.startswith(PREFIXES)


def repo_id(weights):
    """The '<org>/<name>' of a Hub name; a ValueError naming `weights` where it
    is not one (a missing or extra part, a character the Hub does not allow,
    '..', a path component unsafe in a cache)."""
    prefix = next(p for p in PREFIXES if weights.startswith(p))
    parts = weights[len(prefix) :].split("/")
    if len(parts) != 2:
        raise ValueError(
            f"weights={weights!r}: a Hub name is {prefix}<org>/<name> (two parts), not "
            f"{len(parts)} part(s)."
        )
    for part in parts:
        cache.check_component(part, weights)
        if not _PART.match(part) or ".." in part or "--" in part:
            raise ValueError(
                f"weights={weights!r}: {part!r} is not a Hub repository name part "
                "(letters, digits, '-', '_', '.'; at most 96; no '..' or '--')."
            )
    return "/".join(parts)


def fetch(weights):
    """Downloads (or finds in huggingface_hub's cache) a Hub name's `HUB_FILES`.

    Returns:
        the local snapshot folder: config.json and model.safetensors, and
        preprocessor_config.json where the repository has one.
    Raises:
        ValueError: a malformed name (`repo_id`), before any import or download.
        ImportError: huggingface_hub is not installed (the `keras_vit[hub]` extra).
        DownloadError: offline and not cached, an unknown or gated repository,
            or one without model.safetensors; the message names the repository,
            the cache and how to place the files by hand.
    """
    repo = repo_id(weights)
    by_hand = (
        f"or download {' and '.join(HUB_FILES[:2])} (and {HUB_FILES[2]} if it has one) "
        f"from https://huggingface.co/{repo} into a folder and pass weights='<that folder>'"
    )
    try:
        import huggingface_hub
        from huggingface_hub import constants
    except ImportError as e:
        raise ImportError(
            f"weights={weights!r} needs huggingface_hub to download {repo}: {INSTALL}, {by_hand}."
        ) from e
    where = os.path.join(constants.HF_HUB_CACHE, hub_names.cache_folder(repo))
    try:
        folder = huggingface_hub.snapshot_download(
            repo, repo_type="model", allow_patterns=list(HUB_FILES)
        )
    except (OSError, ValueError) as e:  # offline, not cached, unknown, gated (OSErrors)
        raise DownloadError(
            f"weights={weights!r}: cannot download {repo} into huggingface_hub's cache "
            f"{where} ({type(e).__name__}: {_one_line(e)}); connect and retry, {by_hand}."
        ) from e
    if not os.path.isfile(os.path.join(folder, HUB_WEIGHTS)):
        raise DownloadError(
            f"weights={weights!r}: {repo} has no {HUB_WEIGHTS} (pickle files are not read "
            f"from the Hub; download and pass a local .bin path if you trust it), cache {where}."
        )
    return folder


def _one_line(error):
    text = " ".join(str(error).split())
    return text if len(text) <= 200 else text[:197] + "..."
