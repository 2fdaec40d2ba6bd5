"""AugReg's augmentation settings: the names a config gives, and their parsing.

"How to train your ViT? Data, augmentation, and regularization in vision
transformers" (Steiner et al. 2021, arXiv:2106.10270) trains with RandAugment
(Cubuk et al. 2019) on each image and Mixup (Zhang et al. 2017) on each batch, at
seven strengths named `none` ... `strong2` (`AUGREG`). `resolve` turns
`config.input`'s keys into what the input pipeline runs: dict(randaug=(n, m) |
None, mixup=alpha, cutmix=alpha); the ops themselves are randaugment.py's and
mixing.py's (this package). `CROPS` are the names `config.input.crop` takes
(crops.py).

Config (`config.input`, read by `resolve`):

  aug_setting  None | 'none' | 'light1' | 'light2' | 'medium1' | 'medium2' |
               'strong1' | 'strong2': sets randaug and mixup as `AUGREG` (the
               MIXUP_DEF / RANDAUG_DEF tables of big_vision's
               big_vision/configs/vit_i21k.py and big_vision/configs/vit_i1k.py,
               github.com/google-research/big_vision; both files have the same
               tables). The keys below, when not None, override it.
  randaug      None (not set) | '' / 'none' / 0 (off) | (num_layers, magnitude)
               | 'randaug(2,15)'.
  mixup        Beta concentration alpha; None (not set) / 0: off.
  cutmix       Beta concentration alpha; None / 0: off.
  crop         not read by `resolve`: one of CROPS, inception_crop (the official
               random area/aspect crop), random_crop (resize, pad by 4, crop: the
               CIFAR-style light augmentation) or none (resize only); crops.py.

  AUGREG   randaug        mixup alpha
  none     off            0
  light1   randaug(2,0)   0      ("Actually not nothing!": m=0 is not identity)
  light2   randaug(2,10)  0.2
  medium1  randaug(2,15)  0.2
  medium2  randaug(2,15)  0.5
  strong1  randaug(2,20)  0.5
  strong2  randaug(2,20)  0.8
"""

import math
import re

# config.input.crop: the crops `crops.crop` knows.
CROPS = ("inception_crop", "random_crop", "none")

# big_vision configs/vit_i21k.py and configs/vit_i1k.py: MIXUP_DEF p, RANDAUG_DEF.
AUGREG = {
    "none": (None, 0.0),
    "light1": ((2, 0), 0.0),
    "light2": ((2, 10), 0.2),
    "medium1": ((2, 15), 0.2),
    "medium2": ((2, 15), 0.5),
    "strong1": ((2, 20), 0.5),
    "strong2": ((2, 20), 0.8),
}


def _is_number(v):
    """A Python or NumPy real scalar (not a bool)."""
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float)):
        return True
    dtype = getattr(v, "dtype", None)
    return getattr(v, "shape", None) == () and getattr(dtype, "kind", "") in ("i", "u", "f")


def parse_randaug(value, key="input.randaug"):
    """None / '' / 'none' / 0 / False: None (off); (n, m), [n, m], 'randaug(n,m)',
    '(n,m)' or 'n,m': (n, m) with n an int >= 0 (0: None) and m a number >= 0."""
    if (
        value is None
        or value is False
        or value == 0
        or (isinstance(value, str) and value.strip().lower() in ("", "none"))
    ):
        return None
    usage = (
        f"{key}={value!r}: expected None or '' (off), a (num_layers, magnitude) pair "
        "such as (2, 15), or a string such as 'randaug(2,15)'"
    )
    if isinstance(value, str):
        m = re.fullmatch(
            r"(?:randaug)?\s*\(?\s*([^,()\s]+)\s*,\s*([^,()\s]+)\s*\)?", value.strip().lower()
        )
        if not m:
            raise ValueError(usage)
        try:
            parts = [float(p) for p in m.groups()]
        except ValueError:
            raise ValueError(usage) from None
    elif isinstance(value, (tuple, list)) and len(value) == 2 and all(map(_is_number, value)):
        parts = [float(p) for p in value]
    else:
        raise ValueError(usage)
    num_layers, magnitude = parts
    if not (num_layers >= 0 and num_layers.is_integer()):
        raise ValueError(f"{key}={value!r}: num_layers must be an integer >= 0, got {num_layers:g}")
    if not (magnitude >= 0 and math.isfinite(magnitude)):
        raise ValueError(f"{key}={value!r}: magnitude must be a number >= 0, got {magnitude:g}")
    if num_layers == 0:
        return None
    return int(num_layers), (int(magnitude) if magnitude.is_integer() else magnitude)


def _alpha(key, value):
    usage = f"input.{key}={value!r}: expected a Beta concentration alpha >= 0 (0 or None: off)"
    if isinstance(value, bool):
        raise ValueError(usage)
    if isinstance(value, str):
        try:
            value = float(value.strip() or 0)
        except ValueError:
            raise ValueError(usage) from None
    if not _is_number(value):
        raise ValueError(usage)
    value = float(value)
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(usage)
    return value


def resolve(input_cfg):
    """`config.input` (dict / ConfigDict / None) -> dict(randaug=(n, m) | None,
    mixup=alpha, cutmix=alpha) (alphas are floats, 0.0 = off).

    `aug_setting` sets randaug and mixup from `AUGREG`; `randaug`, `mixup`,
    `cutmix` override it when not None. Other keys are ignored, and a resolved
    dict resolves to itself. Raises ValueError naming the key and the value.
    """
    cfg = input_cfg if input_cfg is not None else {}
    get = cfg.get
    randaug, mixup = None, 0.0
    setting = get("aug_setting")
    if setting is not None and setting != "":
        name = setting.strip().lower() if isinstance(setting, str) else None
        if name not in AUGREG:
            raise ValueError(
                f"input.aug_setting={setting!r}: expected one of {', '.join(AUGREG)} (or None)"
            )
        randaug, mixup = AUGREG[name]
    if get("randaug") is not None:
        randaug = parse_randaug(get("randaug"))
    if get("mixup") is not None:
        mixup = _alpha("mixup", get("mixup"))
    cutmix = _alpha("cutmix", get("cutmix")) if get("cutmix") is not None else 0.0
    return dict(randaug=randaug, mixup=mixup, cutmix=cutmix)


def describe(aug):
    """A resolved dict as one line, e.g. 'randaug(2,15) mixup(0.5)'; 'off'."""
    parts = []
    if aug["randaug"]:
        parts.append("randaug({},{})".format(*aug["randaug"]))
    for key in ("mixup", "cutmix"):
        if aug[key]:
            parts.append(f"{key}({aug[key]:g})")
    return " ".join(parts) or "off"
