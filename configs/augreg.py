"""The AugReg from-scratch recipe ("How to train your ViT? Data, Augmentation, and
Regularization in Vision Transformers", Steiner et al., 2021) as the official big_vision
configs have it: `big_vision/configs/vit_i1k.py` and `big_vision/configs/vit_i21k.py`.

Shared by configs/augreg_i1k.py and configs/augreg_i21k.py:
- Adam (0.9, 0.999), batch 4096, lr 1e-3, 10k warmup steps then cosine decay, global-norm
  clip 1.0, 300 epochs, 224 px inception crop + flip, then RandAugment and Mixup at the
  strength of the variant's AugReg setting (the tables below; `input.aug_setting` names
  are trainers/augment/settings.py's);
- weight decay: big_vision's `wd=1e-4` is decoupled (scaled by the schedule's factor, not
  by the learning rate); our AdamW decays `param -= lr * wd * param`, so the same decay is
  wd = 1e-4 / lr = 0.1 here (the AugReg checkpoints' names say `wd_0.1` for the same);
- ImageNet-1k: class token, pre_logits, softmax cross-entropy, 99% of train for training;
  ImageNet-21k: GAP, no pre_logits, sigmoid cross-entropy.

Not reproduced: big_vision's eval preprocessing (resize the short side to 256, central
crop 224; ours resizes to 224), its ImageNet-21k head bias init of -10 (our heads start at
zero), and its bfloat16 Adam first moment. The recommended AugReg checkpoints
(`keras_vit.checkpoint.registry`, 'augreg') each carry their own setting in their file
name (e.g. B/16: aug_medium1, wd_0.1); pass `--config.input.aug_setting=...` to match one.
"""

from keras_vit_configs import common

# Fig. 4 choices, as the big_vision configs map variants to AugReg settings.
I1K_AUG = {
    "ViT_Ti16": "light1",
    "ViT_S32": "light2",
    "ViT_S16": "medium2",
    "ViT_B32": "medium2",
    "ViT_B16": "medium2",
    "ViT_L16": "medium2",
}
I21K_AUG = {
    "ViT_Ti16": "none",
    "ViT_S32": "none",
    "ViT_S16": "light1",
    "ViT_B32": "light2",
    "ViT_B16": "light2",
    "ViT_L16": "medium2",
}


def recipe(variant, dataset):
    """The AugReg config of `variant` (a keras_vit builder name) on 'i1k' or 'i21k'."""
    table = {"i1k": I1K_AUG, "i21k": I21K_AUG}[dataset]
    if variant not in table:
        raise ValueError(
            f"AugReg recipe: no {dataset} setting for {variant!r}; the official "
            f"configs have {sorted(table)}"
        )
    c = common.base_config(variant)
    c.image_size = 224
    c.optimizer = "adamw"
    c.beta1, c.beta2 = 0.9, 0.999
    c.weight_decay = 0.1  # = big_vision's decoupled 1e-4 at lr 1e-3 (docstring)
    c.learning_rate = 1e-3
    c.warmup_steps = 10_000
    c.decay_type = "cosine"
    c.grad_clip_norm = 1.0
    c.batch_size = 4096
    images = common.IMAGENET1K_TRAIN_IMAGES if dataset == "i1k" else common.IMAGENET21K_TRAIN_IMAGES
    c.total_steps = 300 * images // c.batch_size
    c.checkpoint_every = 1000
    c.mixed_precision = True
    c.steps_per_execution = 100
    c.input.crop = "inception_crop"
    c.input.area_range = (0.05, 1.0)
    c.input.flip = True
    c.input.aug_setting = table[variant]
    c.input.shuffle_buffer = 250_000
    c.input.shard_by = "files"
    if dataset == "i1k":
        c.model_overrides.classifier = "token"
        c.model_overrides.representation_size = {
            "ViT_Ti16": 192,
            "ViT_S16": 384,
            "ViT_S32": 384,
            "ViT_B16": 768,
            "ViT_B32": 768,
            "ViT_L16": 1024,
        }[variant]
        c.loss = "softmax"
        c.evals = dict(validation=common.classification_eval("validation"), fewshot=c.evals.fewshot)
    else:
        c.model_overrides.classifier = "gap"
        c.model_overrides.representation_size = 0  # no pre_logits
        c.loss = "sigmoid"
        c.evals = dict(validation=common.classification_eval("validation"), fewshot=c.evals.fewshot)
    return c
