"""Training-time data augmentation, one concept a module:

  settings     AugReg's names and their parsing (`AUGREG`, `resolve`, `describe`,
               `parse_randaug`) and the crop names (`CROPS`): what a config says
  crops        the crop of each image (inception_crop, random_crop, none) and the flip
  randaugment  RandAugment's 16 ops and `randaug`, per image
  mixing       Mixup / CutMix on batches (`mix_batch`, `batch_mixer`)

The input pipeline (trainers/input_pipeline.py) runs them in its stages; they are
stateless, so the training stream stays a pure function of (seed, step).
docs/augmentation.md describes the whole.
"""
