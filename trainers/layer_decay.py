"""Layer-wise learning-rate decay (BEiT, MAE, timm's `layer_decay`): the ids of a ViT's
variables by depth, and the learning-rate multiplier of each.

A model of L encoder blocks has L + 2 layer ids, read from the checkpoint names its
variables carry (`variable.path`):

  0        the embedding: patch embedding (`embedding`), class token (`cls`), position
           embedding (`Transformer/posembed_input`), register tokens
           (`Transformer/registers`, as timm's `reg_token`), CLIP's LayerNorm before the
           first block (`Transformer/encoder_prenorm`) and, in a hybrid, the whole ResNet
           (`root`, `block1`...`block4`): in the paper a hybrid's ResNet *is* its patch
           embedding, and timm groups a hybrid backbone with the patch embedding the same way
  i + 1    `Transformer/encoderblock_i`, its LayerScale (`LayerScale_1`, `LayerScale_3`)
           included
  L + 1    what follows the blocks: `Transformer/encoder_norm`, `fc_norm`, SigLIP's
           attention pooling (`MAPHead_0`, timm's `attn_pool`), `pre_logits`, `head`

timm's own grouping puts `norm_pre` with the final norm (its pattern `^norm` matches
both); it normalises the embedding's output before any block, so here it decays with the
embedding.

A variable of id `i` trains at `decay ** (L + 1 - i)` times the scheduled learning rate:
the head at 1, the last block at `decay`, the embedding at `decay ** (L + 1)`. Its
coupled weight decay (`param -= lr * wd * param`) follows its own learning rate, as in
those codebases, where each layer's group has its own learning rate.
"""

import re

_BLOCK = re.compile(r"(?:^|/)encoderblock_(\d+)/")
_TOP = ("encoder_norm", "fc_norm", "MAPHead_0", "pre_logits", "head")


def num_blocks(paths):
    """The number of encoder blocks among the variable `paths` (0 if none)."""
    blocks = [int(m.group(1)) for m in map(_BLOCK.search, paths) if m]
    return max(blocks) + 1 if blocks else 0


def layer_id(path, blocks):
    """The layer id (module docstring) of the variable at `path` in a model of `blocks`
    encoder blocks."""
    match = _BLOCK.search(path)
    if match:
        return int(match.group(1)) + 1
    parts = path.split("/")
    if any(part in _TOP for part in parts):
        return blocks + 1
    return 0


def check(decay):
    """`decay` as a float; ValueError naming the flag unless it is in (0, 1]."""
    try:
        decay = float(decay)
    except (TypeError, ValueError):
        decay = None
    if decay is None or not 0.0 < decay <= 1.0:
        raise ValueError(f"--config.layer_decay={decay}: expected a value in (0, 1] (1: off)")
    return decay


def scales(paths, decay):
    """Learning-rate multipliers, one per variable path, for a layer decay `decay`
    (1.0: every multiplier is 1)."""
    decay = check(decay)
    blocks = num_blocks(paths)
    return [decay ** (blocks + 1 - layer_id(path, blocks)) for path in paths]
