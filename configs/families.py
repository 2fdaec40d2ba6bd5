"""Fine-tune a family's backbone on CIFAR-10 at 224 px (docs/training.md, "Fine-tuning the
families"): `configs/families.py:FAMILY`, FAMILY one of `FAMILIES`.

  python trainers/finetune.py --config=configs/families.py:dinov2 --init=lvd142m \
      --config.input.tfds_data_dir=TFDS --model_dir=FT
  python trainers/finetune.py --config=configs/families.py:siglip --init=webli ...
  python trainers/finetune.py --config=configs/families.py:dinov3 --init=lvd1689m ...

`--init` takes the builder's published names (docs/models.md, "Published names"), or any
timm / transformers file, folder or Hub name of the family; the model takes the file's
options (LayerScale, registers, pooling, GELU form, input mean and std). The sizes are
the builder's (FAMILIES: the B models); a file of another size (a DINOv2-S, a DeiT III-L)
is refused with its sizes and the flags that fit it, the keys `SIZE_KEYS` of
`model_overrides`:
  --config.model_overrides.hidden_size=384 --config.model_overrides.mlp_dim=1536 \
      --config.model_overrides.num_heads=6

The splits are the data's own: `train`, then `validation` (where the data has one: a
make_tfrecords folder's val/ or --holdout split; CIFAR-10 in TFDS has none, and the run
then selects no model on it) and `test`, so both TFDS's cifar10 and a make_tfrecords
directory (`--data_dir=DATA --config.input.dataset=`, docs/finetune_your_images.md) read
as they are. configs/cifar10.py's held-out 2% of CIFAR-10's training images:
  --config.train_split='train[:98%]' --config.evals.validation.split='train[98%:]'

The recipe is configs/cifar10.py's (the paper's fine-tuning: SGD 0.9, batch 512, warmup +
cosine, clipping at 1, EMA) at 224 px, the resolution of every family's checkpoints but
DINOv2's 518 (its position embeddings are resized to 16 x 16 as the file's own library
resizes them, `keras_vit.checkpoint.load`), with layer-wise learning-rate decay 0.75: the value BEiT and MAE
fine-tune ViT-B with, applied here to backbones whose pre-training (self-supervised or
image-text) left their later blocks furthest from a classifier's. The learning rate is the
lowest of the paper's grid; neither number comes from the families' own papers, which
report linear probes (DINOv2, SigLIP, CLIP) or ImageNet fine-tunes with AdamW (DeiT III).
"""

from ml_collections.config_dict import placeholder

from keras_vit.checkpoint.sizes import SIZE_KEYS  # the sizes model_overrides can set
from keras_vit_configs import cifar10

# family -> the builder whose options the model takes (the file's win over them).
FAMILIES = {
    "deit3": "DeiT3_B16",
    "dinov2": "DINOv2_B14_reg",
    "siglip": "SigLIP_B16",
    "clip": "CLIP_B16",
    "dinov3": "DINOv3_B16",
    "eva02": "EVA02_B14",
    "rope_vit": "RoPE_Mixed_ViT_B16",
}
LAYER_DECAY = 0.75  # BEiT's and MAE's for ViT-B (module docstring)


def get_config(family="dinov2"):
    if family not in FAMILIES:
        raise ValueError(
            f"configs/families.py:{family}: expected one of {', '.join(FAMILIES)} "
            "(configs/families.py:dinov2, ...)"
        )
    c = cifar10.get_config(model=FAMILIES[family], learning_rate=0.001)
    c.image_size = 224
    c.layer_decay = LAYER_DECAY
    for key in SIZE_KEYS:
        c.model_overrides[key] = placeholder(int)
    # The data's own splits (module docstring): TFDS's cifar10 and make_tfrecords alike.
    c.train_split = "train"
    c.evals.validation.split = "validation"
    return c
