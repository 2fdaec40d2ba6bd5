"""Published checkpoints of the authors: short registry names per variant, any
AugReg file by name, and any URL of an official `.npz`.

Files live at https://storage.googleapis.com/vit_models/... (see the official
repository's README). `fetch` downloads one with `keras.utils.get_file` into
`~/.keras/keras_vit/<folder>/` (or `$KERAS_VIT_CACHE_DIR/keras_vit/<folder>/`), once; where a SHA-256 is
known the download is verified against it. Offline, a file not in the cache fails
within `DOWNLOAD_TIMEOUT_S` with a `DownloadError` naming the URL and the cache path.

Short names (`names_for(variant)`):
- 'imagenet21k': the paper's ImageNet-21k pre-training (224 px, pre_logits
  layer, 21,843-class zero head).
- 'imagenet21k+imagenet2012': fine-tuned on ImageNet-1k at 384 px;
  'imagenet21k+imagenet2012-224': the 224 px fine-tunes where published.
- 'augreg': the recommended AugReg ImageNet-21k pre-training ("How to train your
  ViT", the best upstream checkpoint per model; no pre_logits);
  'augreg+imagenet2012': its ImageNet-1k fine-tune at 384 px.

Hybrids (ResNet + ViT): 'imagenet21k' for R50_ViT_B16, R26_ViT_B32, R50_ViT_L32;
'imagenet21k+imagenet2012' (384 px) for R50_ViT_B16; 'augreg' and
'augreg+imagenet2012' for R26_ViT_S32, R50_ViT_L32 and R_Ti16.

Beyond the short names (`resolve`):
- 'augreg:<file name>': any file of gs://vit_models/augreg/ (a row of its
  `index.csv`, `keras_vit.checkpoint.augreg`), checked against the model's
  architecture before anything is downloaded;
- 'https://...npz' or 'gs://bucket/...npz': any official checkpoint; gs:// is
  read through https://storage.googleapis.com/bucket/... (public buckets only,
  no TensorFlow or credentials needed).

What the model built from a checkpoint looks like (resolution, classes,
classifier, pre_logits) is read from the file's arrays by the loader; an Entry's
values only stand in where the file does not say.
"""

import dataclasses
import os
import urllib.error
import urllib.parse
import urllib.request

import keras

from keras_vit.checkpoint import augreg

GCS_HTTPS = "https://storage.googleapis.com"  # public GCS buckets over https
BASE_URL = f"{GCS_HTTPS}/vit_models"
I21K_CLASSES = augreg.CLASSES["i21k"]
I1K_CLASSES = augreg.CLASSES["i1k"]
URL_SCHEMES = ("https://", "gs://")
# Seconds an unreachable server may take to answer before a download gives up.
DOWNLOAD_TIMEOUT_S = 20.0


class DownloadError(OSError):
    """A checkpoint that is neither in the cache nor downloadable: the message
    names the URL, the cache path and what went wrong."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """A published checkpoint: where it is and (documentation, and a fallback
    for what a file does not say) what the model built from it looks like."""

    url: str
    image_size: int = None
    num_classes: int = None
    representation_size: int = None
    classifier: str = "token"
    sha256: str = None


# The recommended AugReg pre-training per model and its ImageNet-1k fine-tune's
# learning rate (official README table, as in the AugReg colab's best_df).
_AUGREG = (
    ("Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03"),
    ("S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0", "0.03"),
    ("S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0", "0.01"),
    ("B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", "0.03"),
    ("B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "0.01"),
    ("L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0", "0.01"),
    ("R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "0.01"),
    ("R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1", "0.01"),
    ("R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03"),
)
# Variants with the paper's original ImageNet-21k checkpoints (hidden size = pre_logits).
_ORIGINAL_I21K = {
    "ViT_B16": ("ViT-B_16", 768),
    "ViT_B32": ("ViT-B_32", 768),
    "ViT_L16": ("ViT-L_16", 1024),
    "ViT_L32": ("ViT-L_32", 1024),
    "ViT_H14": ("ViT-H_14", 1280),
    "R50_ViT_B16": ("R50+ViT-B_16", 768),
    "R26_ViT_B32": ("R26+ViT-B_32", 768),
    "R50_ViT_L32": ("R50+ViT-L_32", 1024),
}
_ORIGINAL_I1K = {
    "ViT_B16": "ViT-B_16",
    "ViT_B32": "ViT-B_32",
    "ViT_L16": "ViT-L_16",
    "ViT_L32": "ViT-L_32",
    "R50_ViT_B16": "R50+ViT-B_16",
}
_ORIGINAL_I1K_224 = {"ViT_B16": "ViT-B_16-224", "ViT_L16": "ViT-L_16-224"}


def _build_registry():
    registry = {}
    for variant, (file, width) in _ORIGINAL_I21K.items():
        registry[(variant, "imagenet21k")] = Entry(
            f"{BASE_URL}/imagenet21k/{_quote(file)}.npz", 224, I21K_CLASSES, width
        )
    for variant, file in _ORIGINAL_I1K.items():
        registry[(variant, "imagenet21k+imagenet2012")] = Entry(
            f"{BASE_URL}/imagenet21k%2Bimagenet2012/{_quote(file)}.npz", 384, I1K_CLASSES
        )
    for variant, file in _ORIGINAL_I1K_224.items():
        registry[(variant, "imagenet21k+imagenet2012-224")] = Entry(
            f"{BASE_URL}/imagenet21k%2Bimagenet2012/{file}.npz", 224, I1K_CLASSES
        )
    for upstream, lr in _AUGREG:
        name = augreg.parse(upstream)
        fine_tune = augreg.parse(f"{upstream}--imagenet2012-steps_20k-lr_{lr}-res_384")
        registry[(name.variant, "augreg")] = augreg_entry(name)
        registry[(name.variant, "augreg+imagenet2012")] = augreg_entry(fine_tune)
    return registry


def _quote(file):
    """Hybrid file names hold '+' ('R50+ViT-B_16'), escaped in URLs like the folder's."""
    return file.replace("+", "%2B")


def augreg_entry(name):
    """The Entry of an AugReg file (`augreg.AugRegName`)."""
    return Entry(
        f"{BASE_URL}/{augreg.FOLDER}/{name.file_name}",
        name.resolution,
        name.num_classes,
        representation_size=None,
    )


REGISTRY = _build_registry()


def register(variant, name, entry):
    """Adds a checkpoint (e.g. a hybrid's, or a private mirror) to the registry."""
    REGISTRY[(variant, name)] = entry


def names_for(variant):
    """Registry names published for `variant`."""
    return sorted(name for (v, name) in REGISTRY if v == variant)


def lookup(variant, name):
    """The Entry for (variant, name), or None."""
    return REGISTRY.get((variant, name))


def is_remote(weights):
    """Whether `weights` names a download rather than a path or a short name:
    'augreg:<file name>', or an https:// / gs:// URL of an .npz."""
    weights = str(weights)
    return weights.startswith(augreg.PREFIX) or (
        weights.startswith(URL_SCHEMES) and weights.endswith(".npz")
    )


def resolve(weights, variant=None):
    """The Entry that `weights` names for a model of `variant` (its keras_vit
    variant name, None for an architecture that is none).

    Args:
        weights: a short name of `variant` ('imagenet21k', ...),
            'augreg:<AugReg file name>', or an https:// or gs:// URL of an .npz.
        variant: the model's variant; an AugReg name (also as a URL's file name)
            must be of the same one.
    Returns:
        the Entry, or None for a short name that is not registered.
    Raises:
        ValueError: a malformed AugReg name or URL, or an AugReg checkpoint of
            another architecture (named with the builder that fits it).
    """
    weights = str(weights)
    if weights.startswith(augreg.PREFIX):
        name = augreg.parse(weights)
        _check_variant(name, variant, weights)
        return augreg_entry(name)
    if weights.startswith(URL_SCHEMES) or "://" in weights:
        return _url_entry(weights, variant)
    return lookup(variant, weights)


def _url_entry(url, variant):
    if not url.startswith(URL_SCHEMES):
        raise ValueError(
            f"weights={url!r}: only https:// and gs:// URLs are downloaded "
            "(gs:// through https://storage.googleapis.com)."
        )
    if not url.endswith(".npz"):
        raise ValueError(f"weights={url!r}: a URL must name an official .npz checkpoint.")
    if url.startswith("gs://"):
        bucket, _, path = url[len("gs://") :].partition("/")
        if not bucket or not path:
            raise ValueError(f"weights={url!r}: expected gs://BUCKET/PATH.npz.")
        url = f"{GCS_HTTPS}/{bucket}/{urllib.parse.quote(path, safe='/')}"
    try:
        name = augreg.parse(_cache_names(url)[1])
    except ValueError:  # not an AugReg file name: the file alone says what it holds
        return Entry(url)
    _check_variant(name, variant, url)
    return Entry(url, name.resolution, name.num_classes, representation_size=None)


def _check_variant(name, variant, weights):
    if name.variant != variant:
        raise ValueError(
            f"weights={weights!r} is a {name.variant} checkpoint (AugReg model "
            f"{name.model!r}); this model is "
            f"{variant or 'of another architecture'}: build it with "
            f"keras_vit.build_model({name.variant!r}, weights=...)."
        )


def _cache_names(url):
    """(folder, file name) of a URL, unescaped ('imagenet21k+imagenet2012', ...)."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
    folder, _, filename = path.rstrip("/").rpartition("/")
    return os.path.basename(folder) or "downloads", filename


def cache_dir():
    """The cache root: $KERAS_VIT_CACHE_DIR, else Keras' home ($KERAS_HOME or
    ~/.keras; /tmp/.keras where that is not writable, as keras.utils.get_file)."""
    root = os.environ.get("KERAS_VIT_CACHE_DIR") or os.environ.get("KERAS_HOME")
    root = os.path.expanduser(root or os.path.join("~", ".keras"))
    if os.path.isdir(root) and not os.access(root, os.W_OK):
        root = os.path.join("/tmp", ".keras")
    return root


def cache_path(entry):
    """Where `fetch` keeps `entry`'s file: <cache_dir>/keras_vit/<folder>/<file>."""
    folder, filename = _cache_names(entry.url)
    return os.path.join(cache_dir(), "keras_vit", folder, filename)


def fetch(entry, timeout=DOWNLOAD_TIMEOUT_S):
    """The local path of `entry`'s file: from the cache, else downloaded into it.

    Raises:
        DownloadError: not cached and the server cannot be reached within
            `timeout` seconds, answers that there is no such file, or the
            download fails; the message names the URL and the cache path.
    """
    path = cache_path(entry)
    if not os.path.exists(path):
        _check_reachable(entry.url, path, timeout)
    folder, filename = _cache_names(entry.url)
    try:
        return keras.utils.get_file(
            filename,
            entry.url,
            cache_dir=cache_dir(),
            cache_subdir=os.path.join("keras_vit", folder),
            file_hash=entry.sha256,
            hash_algorithm="sha256" if entry.sha256 else "auto",
        )
    except Exception as e:  # get_file raises a bare Exception for URL errors
        raise DownloadError(_failure(entry.url, path, e)) from e


def _check_reachable(url, path, timeout):
    """A HEAD request bounded by `timeout`: keras.utils.get_file has no timeout of
    its own, so an unreachable host would otherwise hang the download."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            pass
    except urllib.error.HTTPError as e:
        if e.code in (403, 404):
            raise DownloadError(
                _failure(url, path, f"HTTP {e.code} {e.reason}: no such file there")
            ) from e
        # Other answers (405 for HEAD, ...): the server is there; the download says more.
    except (OSError, ValueError) as e:  # URLError, timeouts, refused connections
        raise DownloadError(_failure(url, path, getattr(e, "reason", e))) from e


def _failure(url, path, reason):
    return (
        f"cannot download {url} ({reason}). Offline, put the file at {path} "
        "(the cache) and it is used from there."
    )
