"""Published checkpoints of the authors, by variant and registry name.

Files live at https://storage.googleapis.com/vit_models/... (see the official
repository's README). `fetch` downloads one with `keras.utils.get_file` into
`~/.keras/keras_vit/<folder>/` (or `$KERAS_VIT_CACHE_DIR/keras_vit/<folder>/`), once; where a SHA-256 is
known the download is verified against it.

Names:
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
"""

import dataclasses
import os

import keras

BASE_URL = "https://storage.googleapis.com/vit_models"
I21K_CLASSES = 21843
I1K_CLASSES = 1000


@dataclasses.dataclass(frozen=True)
class Entry:
    """A published checkpoint and what the model built from it looks like."""

    url: str
    image_size: int
    num_classes: int
    representation_size: int = None
    classifier: str = "token"
    sha256: str = None

    def metadata(self):
        return {
            "image_size": self.image_size,
            "num_classes": self.num_classes,
            "representation_size": self.representation_size,
            "classifier": self.classifier,
        }


# The recommended AugReg pre-training per variant (official README table).
_AUGREG = {
    "ViT_Ti16": ("Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03"),
    "ViT_S16": ("S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0", "0.03"),
    "ViT_S32": ("S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0", "0.01"),
    "ViT_B16": ("B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", "0.03"),
    "ViT_B32": ("B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "0.01"),
    "ViT_L16": ("L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0", "0.01"),
    "R26_ViT_S32": ("R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "0.01"),
    "R50_ViT_L32": ("R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1", "0.01"),
    "R_Ti16": ("R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03"),
}
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
    for variant, (file, lr) in _AUGREG.items():
        registry[(variant, "augreg")] = Entry(f"{BASE_URL}/augreg/{file}.npz", 224, I21K_CLASSES)
        registry[(variant, "augreg+imagenet2012")] = Entry(
            f"{BASE_URL}/augreg/{file}--imagenet2012-steps_20k-lr_{lr}-res_384.npz",
            384,
            I1K_CLASSES,
        )
    return registry


def _quote(file):
    """Hybrid file names hold '+' ('R50+ViT-B_16'), escaped in URLs like the folder's."""
    return file.replace("+", "%2B")


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


def fetch(entry):
    """Downloads (or finds in the cache) a registry entry; returns the local path."""
    folder, filename = entry.url.replace("%2B", "+").split("/")[-2:]
    return keras.utils.get_file(
        filename,
        entry.url,
        cache_dir=os.environ.get("KERAS_VIT_CACHE_DIR"),
        cache_subdir=os.path.join("keras_vit", folder),
        file_hash=entry.sha256,
        hash_algorithm="sha256" if entry.sha256 else "auto",
    )
