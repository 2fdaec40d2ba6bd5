"""VTAB-1k: each of the 19 TFDS tasks below fine-tuned on 1,000 training examples
(train800 + val200) for 2,500 steps with the fine-tuning recipe (SGD 0.9, batch 512,
384 px, warmup + cosine, clip 1.0; docs/design.md, "Recipes").

  python tools/make_tfrecords.py --source=tfds:TASK --max_examples=1000 --output_dir=DATA
  python trainers/finetune.py --config=configs/vtab1k.py:caltech101 --init=imagenet21k ...

`get_config(task)` picks the task; num_classes comes from the manifest.
"""

from keras_vit_configs import common

# name -> TFDS dataset[:config] (VTAB-1k, Zhai et al. 2019), grouped as in the paper.
VTAB_TASKS = {
    # natural
    "caltech101": "caltech101:3.*.*",
    "cifar100": "cifar100:3.*.*",
    "dtd": "dtd:3.*.*",
    "flowers102": "oxford_flowers102:2.*.*",
    "pets": "oxford_iiit_pet:3.*.*",
    "sun397": "sun397/tfds:4.*.*",
    "svhn": "svhn_cropped:3.*.*",
    # specialized
    "patch_camelyon": "patch_camelyon:2.*.*",
    "eurosat": "eurosat/rgb:2.*.*",
    "resisc45": "resisc45:3.*.*",
    "diabetic_retinopathy": "diabetic_retinopathy_detection/btgraham-300:3.*.*",
    # structured
    "clevr_count": "clevr:3.*.*",  # label: object count
    "clevr_distance": "clevr:3.*.*",  # label: closest object distance bin
    "dmlab": "dmlab:2.0.1",
    "kitti_distance": "kitti:3.*.*",  # label: closest vehicle distance bin
    "dsprites_location": "dsprites:2.*.*",  # label: x position bin
    "dsprites_orientation": "dsprites:2.*.*",  # label: orientation bin
    "smallnorb_azimuth": "smallnorb:2.*.*",
    "smallnorb_elevation": "smallnorb:2.*.*",
}
TRAIN_EXAMPLES = 1000


def get_config(task="caltech101"):
    if task not in VTAB_TASKS:
        raise ValueError(f"unknown VTAB task {task!r}: expected one of {', '.join(VTAB_TASKS)}")
    c = common.finetune_config()
    c.vtab_task = task
    c.tfds_name = VTAB_TASKS[task]
    c.total_steps = 2500
    c.learning_rate = 0.01
    c.warmup_steps = 200
    c.checkpoint_every = 500
    c.input.shuffle_buffer = TRAIN_EXAMPLES
    return c
