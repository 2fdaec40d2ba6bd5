"""Published checkpoints of the authors: short registry names per variant, any
AugReg file by name, and any URL of an official `.npz`.

Files live at https://storage.googleapis.com/vit_models/... (see the official
repository's README). `fetch` downloads one (`keras_vit.checkpoint.download`:
bounded in time, written atomically) into `~/.keras/keras_vit/<folder>/` (or
`$KERAS_VIT_CACHE_DIR/keras_vit/<folder>/`, `keras_vit.checkpoint.cache`), once; where
a SHA-256 is known the file is verified against it. A file not in the cache that
cannot be downloaded fails with a `DownloadError` naming the URL and the cache path.

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
import urllib.parse

from keras_vit.checkpoint import augreg, cache, download

GCS_HTTPS = "https://storage.googleapis.com"  # public GCS buckets over https
BASE_URL = f"{GCS_HTTPS}/vit_models"
I21K_CLASSES = augreg.CLASSES["i21k"]
I1K_CLASSES = augreg.CLASSES["i1k"]
URL_SCHEMES = ("https://", "gs://")
# Raised by `fetch` (defined with the download); the cache root (defined with the cache).
DownloadError = download.DownloadError
cache_dir = cache.cache_dir


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


def resolve(weights, variant=None):
    """The Entry that a download's name names for a model of `variant` (its
    keras_vit variant name, None for an architecture that is none). Which
    `weights=` values are downloads is `keras_vit.checkpoint.source`'s to say.

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


SHA256_FRAGMENT = "sha256="  # https://.../file.npz#sha256=<64 hex digits>, as pip's URLs


def _split_sha256(url):
    """(url without its fragment, the SHA-256 the fragment names or None)."""
    url, _, fragment = url.partition("#")
    if not fragment:
        return url, None
    digest = fragment[len(SHA256_FRAGMENT) :].lower()
    if (
        not fragment.startswith(SHA256_FRAGMENT)
        or len(digest) != 64
        or not all(c in "0123456789abcdef" for c in digest)
    ):
        raise ValueError(
            f"weights={url}#{fragment!s}: a URL's fragment can only be #sha256=<64 hex digits>"
        )
    return url, digest


def _url_entry(url, variant):
    weights = url
    url, sha256 = _split_sha256(url)
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
    filename = _cache_names(url)[1]  # a URL that would escape the cache is refused here
    try:
        name = augreg.parse(filename)
    except ValueError:  # not an AugReg file name: the file alone says what it holds
        return Entry(url, sha256=sha256)
    _check_variant(name, variant, weights)
    return Entry(url, name.resolution, name.num_classes, representation_size=None, sha256=sha256)


def _check_variant(name, variant, weights):
    if name.variant != variant:
        raise ValueError(
            f"weights={weights!r} is a {name.variant} checkpoint (AugReg model "
            f"{name.model!r}); this model is "
            f"{variant or 'of another architecture'}: build it with "
            f"keras_vit.build_model({name.variant!r}, weights=...)."
        )


def _cache_names(url):
    """(folder, file name) of a URL, unescaped ('imagenet21k+imagenet2012', ...;
    'downloads' for a file at the server's root).

    Raises:
        ValueError: a segment of the URL's path that is empty, '.' or '..', or
            that unescapes to a separator, NUL or absolute path
            (`cache.check_component`), naming the URL.
    """
    segments = urllib.parse.urlsplit(url).path.split("/")[1:]
    names = [cache.check_component(urllib.parse.unquote(s), url) for s in segments]
    if not names:
        raise ValueError(f"{url!r} cannot name a file in the checkpoint cache: no file name.")
    return (names[-2] if len(names) > 1 else "downloads"), names[-1]


def cache_path(entry):
    """Where `fetch` keeps `entry`'s file: <cache_dir>/keras_vit/<folder>/<file>,
    checked to lie under the cache (ValueError naming the URL otherwise)."""
    return cache.cache_file(_cache_names(entry.url), entry.url)


def fetch(entry, timeout=None):
    """The local path of `entry`'s file: from the cache, else downloaded into it
    (`download.fetch`: https only, atomic, checked against `entry.sha256`).

    Args:
        entry: the Entry.
        timeout: seconds without progress before the download gives up (None:
            $KERAS_VIT_DOWNLOAD_TIMEOUT, else `download.DEFAULT_TIMEOUT_S`).
    Raises:
        ValueError: a URL that cannot name a file in the cache (`cache_path`).
        DownloadError: not cached and the server cannot be reached, answers that
            there is no such file, stalls, closes early or sends a file of
            another SHA-256; the message names the URL and the cache path.
    """
    return download.fetch(entry.url, cache_path(entry), entry.sha256, timeout)
