"""AugReg checkpoint file names ("How to train your ViT?", Steiner et al., 2021).

The authors published every pre-training of that paper and its fine-tunes in
gs://vit_models/augreg/ (served at https://storage.googleapis.com/vit_models/augreg/)
and list them in that folder's `index.csv` (columns `filename` and
`adapt_filename`; 51,509 rows per the official AugReg colab). A file's name says
what it holds:

    B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0
    ^model ^data ^epochs ^lr    ^augmentation ^weight decay, dropout, stochastic depth

and a fine-tune appends what it was fine-tuned on:

    ...--imagenet2012-steps_20k-lr_0.01-res_384
         ^data        ^steps    ^lr     ^resolution

The model part is the official `AUGREG_CONFIGS` key (vit_jax/configs/models.py:
'ViT-' dropped, '+' written '_'): 'Ti_16', 'S_32', 'B_8', 'L_16', 'R_Ti_16',
'R26_S_32', 'R50_L_32', ... Pre-trainings are at 224 px. This module only reads
names (no file or network access); `keras_vit.checkpoint.registry` turns one into
a download and the loader reads the rest (classes, classifier, pre_logits, grid)
from the file's own arrays.
"""

import dataclasses
import re

from keras_vit.variants import HYBRID_VARIANTS, VARIANTS

PREFIX = "augreg:"  # weights="augreg:<file name>"
FOLDER = "augreg"  # the bucket folder (gs://vit_models/augreg/)
PRETRAINING_RESOLUTION = 224
# Head width per data set of the names: the upstream ones ('i21k_30': ImageNet-21k
# for 30 epochs, as `vit_jax.checkpoint.get_augreg_df` lists) and the fine-tunes'.
# A data set not listed leaves the width to the file (its head/kernel).
CLASSES = {
    "i21k": 21843,
    "i21k_30": 21843,
    "i1k": 1000,
    "imagenet2012": 1000,
    "cifar100": 100,
    "oxford_iiit_pet": 37,
    "resisc45": 45,
}

_NUMBER = r"\d+(?:\.\d+)?"
_MODEL = re.compile(r"(?:(R\d*)_)?(Ti|S|B|L|H)_(\d+)")
# (field, pattern, example) of the pre-training part, in order; then the fine-tune's.
_UPSTREAM_FIELDS = (
    ("model", r"(?:R\d*_)?(?:Ti|S|B|L|H)_\d+", "B_16"),
    ("data", r"[a-z0-9]+(?:_[a-z0-9]+)*", "i21k"),
    ("epochs", r"(\d+)ep", "300ep"),
    ("lr", rf"lr_({_NUMBER})", "lr_0.001"),
    ("aug", r"aug_([a-z]+\d*)", "aug_medium1"),
    ("wd", rf"wd_({_NUMBER})", "wd_0.1"),
    ("do", rf"do_({_NUMBER})", "do_0.0"),
    ("sd", rf"sd_({_NUMBER})", "sd_0.0"),
)
_ADAPT_FIELDS = (
    ("data", r"[a-z0-9]+(?:_[a-z0-9]+)*", "imagenet2012"),
    ("steps", rf"steps_({_NUMBER}k)", "steps_20k"),
    ("lr", rf"lr_({_NUMBER})", "lr_0.01"),
    ("res", r"res_(\d+)", "res_384"),
)


@dataclasses.dataclass(frozen=True)
class AugRegName:
    """What an AugReg file name says.

    Attributes:
        name: the file name without '.npz'.
        model: its model part ('B_16', 'R26_S_32', 'R_Ti_16').
        variant: the keras_vit variant of that architecture ('ViT_B16',
            'R26_ViT_S32', 'R_Ti16'; `keras_vit.build_model(variant)`).
        upstream: pre-training data ('i21k', 'i1k', 'i21k_30'); epochs, lr,
            aug, wd, dropout, stochastic_depth: its other settings.
        dataset: the fine-tuning data ('imagenet2012', 'cifar100', ...), None for
            a pre-training; steps ('20k'), adapt_lr: its settings.
        resolution: the image side in pixels (`res_N`; 224 for pre-trainings).
    """

    name: str
    model: str
    variant: str
    upstream: str
    epochs: int
    lr: float
    aug: str
    wd: float
    dropout: float
    stochastic_depth: float
    dataset: str = None
    steps: str = None
    adapt_lr: float = None
    resolution: int = PRETRAINING_RESOLUTION

    @property
    def fine_tuned(self):
        return self.dataset is not None

    @property
    def num_classes(self):
        """The head width the name implies (None for a data set not in CLASSES)."""
        return CLASSES.get(self.dataset if self.fine_tuned else self.upstream)

    @property
    def file_name(self):
        return self.name + ".npz"


def variant_of(model):
    """The keras_vit variant of an AugReg model part ('B_16' -> 'ViT_B16',
    'R26_S_32' -> 'R26_ViT_S32', 'R_Ti_16' -> 'R_Ti16'), or None."""
    m = _MODEL.fullmatch(model)
    if m is None:
        return None
    resnet, size, patch = m.groups()
    if resnet is None:
        variant = f"ViT_{size}{patch}"
    elif resnet == "R":  # the ResNet stem alone
        variant = f"R_{size}{patch}"
    else:
        variant = f"{resnet}_ViT_{size}{patch}"
    return variant if variant in VARIANTS or variant in HYBRID_VARIANTS else None


def model_of(variant):
    """The AugReg model part of a keras_vit variant (inverse of `variant_of`)."""
    m = re.fullmatch(r"(?:(R\d*)_)?(?:ViT_)?(Ti|S|B|L|H)(\d+)", variant)
    if m is None:
        raise ValueError(f"{variant!r} is not a keras_vit variant name.")
    resnet, size, patch = m.groups()
    return f"{resnet + '_' if resnet else ''}{size}_{patch}"


def known_models():
    """The AugReg model parts of every keras_vit variant."""
    return sorted(model_of(v) for v in (*VARIANTS, *HYBRID_VARIANTS))


def parse(name):
    """Reads an AugReg file name (with or without 'augreg:' and '.npz').

    Returns:
        an AugRegName.
    Raises:
        ValueError naming the part that does not fit and the form expected.
    """
    bare = str(name)
    bare = bare[len(PREFIX) :] if bare.startswith(PREFIX) else bare
    bare = bare[: -len(".npz")] if bare.endswith(".npz") else bare
    parts = bare.split("--")
    if len(parts) > 2 or not bare:
        raise ValueError(_explain(name, "at most one '--' (pre-training--fine-tune)"))
    upstream = _fields(name, parts[0], _UPSTREAM_FIELDS, "pre-training")
    variant = variant_of(upstream["model"])
    if variant is None:
        raise ValueError(
            _explain(
                name,
                f"model {upstream['model']!r} is not an architecture keras_vit builds "
                f"(known: {', '.join(known_models())})",
            )
        )
    values = dict(
        name=bare,
        model=upstream["model"],
        variant=variant,
        upstream=upstream["data"],
        epochs=int(upstream["epochs"]),
        lr=float(upstream["lr"]),
        aug=upstream["aug"],
        wd=float(upstream["wd"]),
        dropout=float(upstream["do"]),
        stochastic_depth=float(upstream["sd"]),
    )
    if len(parts) == 2:
        adapt = _fields(name, parts[1], _ADAPT_FIELDS, "fine-tune")
        values.update(
            dataset=adapt["data"],
            steps=adapt["steps"],
            adapt_lr=float(adapt["lr"]),
            resolution=int(adapt["res"]),
        )
    return AugRegName(**values)


def _fields(name, text, fields, what):
    """{field: value} of one '-'-separated part; ValueError naming the first misfit."""
    pieces = text.split("-")
    if len(pieces) != len(fields):
        expected = "-".join(example for _, _, example in fields)
        raise ValueError(
            _explain(
                name,
                f"the {what} part {text!r} has {len(pieces)} '-'-separated fields, "
                f"expected {len(fields)} as in {expected!r}",
            )
        )
    values = {}
    for piece, (field, pattern, example) in zip(pieces, fields):
        m = re.fullmatch(pattern, piece)
        if m is None:
            raise ValueError(
                _explain(name, f"the {what} field {field} is {piece!r}, expected e.g. {example!r}")
            )
        values[field] = m.group(1) if m.groups() else piece
    return values


def _explain(name, problem):
    return (
        f"{name!r} is not an AugReg checkpoint name: {problem}. The names are those of "
        "gs://vit_models/augreg/index.csv, e.g. "
        "'B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0' or, fine-tuned, "
        "'...--imagenet2012-steps_20k-lr_0.01-res_384'."
    )
