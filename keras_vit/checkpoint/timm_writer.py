"""`save_timm`: a keras_vit model as a timm checkpoint, in the layout of the timm
model that computes it: timm's `VisionTransformer` (`timm_format`; qk_norm, the
patch-embedding norm and final_norm=False included) or, for the rotary families'
options, timm's eva.py `Eva` (`timm_eva`)."""

import os

from keras_vit.checkpoint import layout, state_dict, timm_eva, timm_format
from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.families import PLAIN_TIMM_ONLY_OPTIONS, unwritable_options


def save_timm(model, path):
    """Writes `model` as a timm checkpoint that `timm.create_model` loads.

    Args:
        model: a keras_vit `VisionTransformer` (plain, not hybrid; no pre_logits,
            which timm's ViT has no layer for; LayerNorm epsilon 1e-6). A model
            with the rotary families' options (rope, gated_mlp, ...) is written
            as timm's eva.py `Eva` (`keras_vit.checkpoint.timm_eva.eva_config`).
        path: a directory (timm's Hub layout, as `timm.models.save_for_hf`
            writes it: model.safetensors + config.json, for
            `timm.create_model('local-dir:' + path, pretrained=True)`), or a file
            ending in .safetensors (the state dict alone).
    Returns:
        the path of the safetensors file written.
    Raises:
        CheckpointError: a model timm cannot express (named).
    """
    params = layout.model_params(model)
    rotary = unwritable_options(model)
    if rotary:
        plain_only = unwritable_options(model, PLAIN_TIMM_ONLY_OPTIONS)
        if plain_only:
            raise CheckpointError(
                f"{model.name}: {', '.join(plain_only)} beside {', '.join(rotary)}: timm's "
                "eva.py layout has no such layer; save the model as a .keras file (model.save)."
            )
        config, state = timm_eva.eva_config(model), timm_eva.eva_state(params, model)
    else:
        config, state = timm_format.timm_config(model), timm_format.from_params(params)
    path = os.fspath(path)
    if path.endswith(state_dict.SAFETENSORS):
        state_dict.write_safetensors(path, state)
        return path
    os.makedirs(path, exist_ok=True)
    weights = os.path.join(path, state_dict.HUB_WEIGHTS[0])
    state_dict.write_safetensors(weights, state)
    state_dict.write_config(path, config)
    return weights
