"""The `masked_patch` objective: self-supervised pre-training (paper §4.6, App. B.1.2).

  python trainers/pretrain.py --config=configs/fashion_mnist_masked_patch.py \
      --data_dir=DATA --model_dir=SSL

The labels in DATA are ignored: the targets are the 3-bit mean colours of the
patches (`keras_vit.masked_patch`), computed from each (augmented) batch inside
tf.data. Config keys (`config.masked_patch`, defaults in configs/common.py): target ('rgb' | 'intensity'), bits,
corruption_rate, mask_prob, random_prob.

Reported metrics: `accuracy` (the fraction of corrupted patches whose mean-colour
class is predicted) and `cross_entropy`, both over the corrupted patches only.
RUN/model.weights.h5 + RUN/model_config.json are those of the plain ViT (the
[mask] embedding and the per-token head are left out; train_lib.export exports a
task model's `backbone`), so `trainers/finetune.py --init=RUN` starts from them.
"""

import keras
import ml_collections

from keras_vit import masked_patch
from keras_vit_configs import common
from keras_vit_trainers import objectives

DEFAULTS = common.MASKED_PATCH


def options(config):
    """`config.masked_patch` over DEFAULTS; unknown keys are an error."""
    given = config.get("masked_patch") or {}
    given = given.to_dict() if isinstance(given, ml_collections.ConfigDict) else dict(given)
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ValueError(
            f"config.masked_patch: unknown key(s) {', '.join(unknown)}; expected "
            f"{', '.join(sorted(DEFAULTS))}"
        )
    return {**DEFAULTS, **given}


@objectives.register("masked_patch")
class MaskedPatch(objectives.Objective):
    """Predict the mean colour of the corrupted patches (labels ignored)."""

    def build_model(self, make_model, config, num_classes):
        # The ViT keeps a head for the data's classes, so the exported model is the
        # one fine-tuning builds; the head itself is not trained here.
        backbone = make_model(num_classes=num_classes)
        self.model = masked_patch.MaskedPatchPredictor(
            backbone, seed=int(config.get("seed", 0)), **options(config)
        )
        return self.model

    def map_batch(self, config, num_classes):
        model = getattr(self, "model", None)
        if model is None:
            raise RuntimeError(
                "MaskedPatch.map_batch needs build_model to be called first "
                "(the targets depend on the model's patch size)"
            )
        patch_size, target, bits = model.image_patch_size, model.target, model.bits

        def fn(images, labels):
            del labels  # unlabelled pre-training
            return images, masked_patch.mean_colour_targets(images, patch_size, target, bits)

        return fn

    def loss(self, config):
        return masked_patch.MaskedPatchLoss()

    def train_metrics(self, config):
        return {self.metric_name: masked_patch.masked_patch_accuracy}

    def metrics(self, config):
        return [
            keras.metrics.MeanMetricWrapper(
                masked_patch.masked_patch_accuracy, name=self.metric_name
            ),
            keras.metrics.MeanMetricWrapper(
                masked_patch.masked_patch_cross_entropy, name=self.loss_metric_name
            ),
        ]
