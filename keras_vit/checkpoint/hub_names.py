"""Short `weights=` names of the families' published checkpoints on the Hugging Face Hub.

`keras_vit.DINOv2_B14(weights="lvd142m")` reads as `ViT_B16(weights="imagenet21k")`
does: the name is the builder's, the file is timm's image-tower repository on the Hub
(`hf-hub:timm/<model>.<tag>`, fetched by `keras_vit.checkpoint.hub` into
huggingface_hub's cache, read as any timm directory). timm's repositories hold the
image tower alone, in one format, for every family; the names follow this library's
registry (`keras_vit.checkpoint.registry`): the pre-training data, '+' before the data
of a fine-tune, '-<pixels>' where the resolution is not 224.

    DeiT3_{S,B,L}16      'imagenet2012', 'imagenet2012-384' (DeiT III on ImageNet-1k),
                         'imagenet21k+imagenet2012', 'imagenet21k+imagenet2012-384'
    DINOv2_{S,B,L}14     'lvd142m' (518 px, as published)
    DINOv2_{S,B,L}14_reg 'lvd142m' (with 4 registers)
    SigLIP_B16           'webli', 'webli-256', 'webli-384', 'webli-512' (SigLIP);
                         'siglip2', 'siglip2-256', 'siglip2-384', 'siglip2-512'
    SigLIP_L16           'webli-256', 'webli-384'; 'siglip2-256', 'siglip2-384',
                         'siglip2-512'
    SigLIP_So400m14      'webli', 'webli-378', 'webli-384'; 'siglip2', 'siglip2-378'
    CLIP_B16, CLIP_B32   'openai', 'laion2b', 'laion400m'
    CLIP_L14             'openai', 'openai-336', 'laion2b', 'laion400m'
    DINOv3_{S,B,L}16     'lvd1689m' (DINOv3's web images; timm's layout: the mean of
                         the patches); DINOv3_L16 also 'sat493m' (satellite images)
    EVA02_{Ti,S}14       'mim_in22k' (the MIM pre-training, 224 px, headless),
                         'mim_in22k+imagenet2012-336'
    EVA02_{B,L}14        'mim_in22k', 'mim_in22k+imagenet2012-448',
                         'mim_in22k+imagenet21k+imagenet2012-448'
    RoPE_ViT_{S,B,L}16, RoPE_Mixed_ViT_{S,B,L}16
                         'imagenet2012' (Heo et al.'s DeiT III recipe on ImageNet-1k)

What a name adds to its file (`HubName.arguments`): OpenAI's CLIP towers were trained
with QuickGELU, which timm's repository config (shared by its GELU and QuickGELU
architectures) does not say; 'openai' builds them with `quick_gelu=True`, as OpenAI's
own model computes. The caller's arguments win over both.

The same names, read back from a local path (`model_names`): a file or folder named
after its timm model ('vit_small_patch16_dinov3_qkvb.safetensors',
'eva02_tiny_patch14_224.mim_in22k/model.safetensors', huggingface_hub's cache folder
'models--timm--<model>.<tag>/snapshots/<hash>/model.safetensors', `cache_folder`)
names the model its state dict is, where the file itself cannot tell
(`keras_vit.checkpoint.timm_eva`).
"""

import dataclasses
import os
import re

from keras_vit.checkpoint.errors import CheckpointError


@dataclasses.dataclass(frozen=True)
class HubName:
    """A published checkpoint on the Hub: its `weights=` Hub name and what the model
    built from it takes that the file does not record."""

    weights: str  # 'hf-hub:timm/<model>.<tag>'
    arguments: tuple = ()  # (name, value): VisionTransformer arguments the file omits


_QUICK_GELU = (("quick_gelu", True),)
_SIZES = {"S": "small", "B": "base", "L": "large"}


def _timm(model, tag, arguments=()):
    return HubName(f"hf-hub:timm/{model}.{tag}", arguments)


def _deit3(size):
    model = f"deit3_{_SIZES[size]}_patch16"
    return {
        "imagenet2012": _timm(f"{model}_224", "fb_in1k"),
        "imagenet2012-384": _timm(f"{model}_384", "fb_in1k"),
        "imagenet21k+imagenet2012": _timm(f"{model}_224", "fb_in22k_ft_in1k"),
        "imagenet21k+imagenet2012-384": _timm(f"{model}_384", "fb_in22k_ft_in1k"),
    }


def _siglip(model, v1, v2):
    """SigLIP's ('webli') names at the resolutions `v1`, SigLIP 2's ('siglip2') at `v2`."""
    names = {}
    for tag, name, resolutions in (("webli", "webli", v1), ("v2_webli", "siglip2", v2)):
        for pixels in resolutions:
            suffix = "" if pixels == 224 else f"-{pixels}"
            names[name + suffix] = _timm(f"{model}_{pixels}", tag)
    return names


def _clip(model, openai_336=False):
    names = {
        "openai": _timm(f"{model}_224", "openai", _QUICK_GELU),
        "laion2b": _timm(f"{model}_224", "laion2b"),
        "laion400m": _timm(f"{model}_224", "laion400m_e32"),
    }
    if openai_336:
        names["openai-336"] = _timm(f"{model}_336", "openai", _QUICK_GELU)
    return names


def _build():
    names = {}
    for size in ("S", "B", "L"):
        names[f"DeiT3_{size}16"] = _deit3(size)
        dinov2 = f"vit_{_SIZES[size]}_patch14"
        names[f"DINOv2_{size}14"] = {"lvd142m": _timm(f"{dinov2}_dinov2", "lvd142m")}
        names[f"DINOv2_{size}14_reg"] = {"lvd142m": _timm(f"{dinov2}_reg4_dinov2", "lvd142m")}
    every = (224, 256, 384, 512)
    names["SigLIP_B16"] = _siglip("vit_base_patch16_siglip", every, every)
    names["SigLIP_L16"] = _siglip("vit_large_patch16_siglip", (256, 384), (256, 384, 512))
    names["SigLIP_So400m14"] = _siglip("vit_so400m_patch14_siglip", (224, 378, 384), (224, 378))
    names["CLIP_B16"] = _clip("vit_base_patch16_clip")
    names["CLIP_B32"] = _clip("vit_base_patch32_clip")
    names["CLIP_L14"] = _clip("vit_large_patch14_clip", openai_336=True)
    for size in ("S", "B", "L"):
        model = f"vit_{_SIZES[size]}_patch16"
        names[f"DINOv3_{size}16"] = {"lvd1689m": _timm(f"{model}_dinov3", "lvd1689m")}
        names[f"RoPE_ViT_{size}16"] = {"imagenet2012": _timm(f"{model}_rope_224", "naver_in1k")}
        names[f"RoPE_Mixed_ViT_{size}16"] = {
            "imagenet2012": _timm(f"{model}_rope_mixed_224", "naver_in1k")
        }
    names["DINOv3_L16"]["sat493m"] = _timm("vit_large_patch16_dinov3", "sat493m")
    for size, pixels in (("Ti", 336), ("S", 336), ("B", 448), ("L", 448)):
        model = f"eva02_{ {'Ti': 'tiny', **_SIZES}[size] }_patch14"
        names[f"EVA02_{size}14"] = {
            "mim_in22k": _timm(f"{model}_224", "mim_in22k"),
            f"mim_in22k+imagenet2012-{pixels}": _timm(f"{model}_{pixels}", "mim_in22k_ft_in1k"),
        }
        if size in ("B", "L"):
            names[f"EVA02_{size}14"][f"mim_in22k+imagenet21k+imagenet2012-{pixels}"] = _timm(
                f"{model}_{pixels}", "mim_in22k_ft_in22k_in1k"
            )
    return {
        (variant, name): entry for variant, table in names.items() for name, entry in table.items()
    }


HUB_NAMES = _build()


def names_for(variant):
    """The short Hub names published for `variant` (a builder's name)."""
    return sorted(name for (v, name) in HUB_NAMES if v == variant)


def lookup(variant, name):
    """The HubName of (variant, name), or None."""
    return HUB_NAMES.get((variant, name))


# huggingface_hub's cache folder of a model repository: models--<org>--<name>.
_CACHE_PREFIX, _CACHE_SEPARATOR = "models--", "--"
# A timm model's name: lowercase words joined by '_', one of them the patch size.
_TIMM_MODEL = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)*_patch\d+(?:_[a-z0-9]+)*$")


def cache_folder(repo):
    """huggingface_hub's cache folder (under HF_HUB_CACHE) of the model repository
    `repo` ('<org>/<name>')."""
    return _CACHE_PREFIX + repo.replace("/", _CACHE_SEPARATOR)


def model_names(path):
    """The timm model names that the components of a local `path` spell, in path
    order: a component '<model>[.<tag>][.<suffix>]' ('vit_small_patch16_dinov3_qkvb',
    '.lvd1689m', '.safetensors') or a Hub cache folder ('models--<org>--<model>.<tag>',
    `cache_folder`) names <model> when it has the form of a timm model's name
    (lowercase words joined by '_', one of them 'patch<N>'); other components name
    nothing."""
    names = []
    for component in os.path.normpath(os.path.abspath(os.fspath(path))).split(os.sep):
        if component.startswith(_CACHE_PREFIX):
            component = component.rpartition(_CACHE_SEPARATOR)[2]
        name = component.partition(".")[0]
        if _TIMM_MODEL.match(name):
            names.append(name)
    return names


# A value that can only be meant as a short name: no path separator, no '.', no scheme.
_SHORT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+_-]*$")


def resolve(variant, weights):
    """The HubName that `weights` names for the builder `variant`, or None where
    `weights` is something else (a path, a URL, a Hub name, a Source).

    Raises:
        CheckpointError: `weights` reads as a short name ('laion2b', ...) that is
            neither a published name of `variant` nor an existing file; the
            message lists the variant's names.
    """
    if not isinstance(weights, str):
        return None
    found = HUB_NAMES.get((variant, weights))
    if found is None and _SHORT_NAME.match(weights) and not os.path.exists(weights):
        raise CheckpointError(
            f"weights={weights!r} is neither an existing file nor a published checkpoint "
            f"name of {variant} (published: {', '.join(names_for(variant))}); any timm or "
            "transformers file, folder or Hub name ('hf-hub:<org>/<name>') loads too."
        )
    return found
