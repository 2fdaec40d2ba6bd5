"""What the input pipeline reads and how: one frozen value built once from the config.

`InputSpec.from_config` is the one place that turns `config` (image_size, input.*,
train_split, train_examples, seed), the data's classes and the objective into the
pipeline's settings; `input_pipeline.train_dataset` / `eval_dataset`, the evaluators'
`Context` and the few-shot evaluator take the spec whole. What differs per run or per
replica (batch sizes, the resume step, the tf.distribute input context) stays an
argument of those functions. `dataclasses.replace(spec, ...)` derives a variant (e.g.
another split).
"""

import dataclasses
import logging

from keras_vit_configs.common import VERIFY_MAX_BYTES
from keras_vit_data import image_header
from keras_vit_trainers import input_pipeline
from keras_vit_trainers.augment import settings as augment_settings


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """The data facts of a pipeline (see the module docstring).

    image_size: (H, W) (an int is made square); crop: one of augment.settings.CROPS;
    area_range: inception_crop's; flip: random left-right flip; shuffle_buffer: records
    permuted per window (<= 1: off), at most as many as fit in shuffle_bytes (0: no
    limit; `input_pipeline.shuffle_window`); shard_by: one of input_pipeline.SHARD_BY; strict: a
    corrupt shard or an undecodable record is fatal; verify_max_bytes: splits up to this
    size are CRC-scanned at start-up; max_pixels: an image declaring more pixels is a
    record that does not decode; augmentation: RandAugment / Mixup / CutMix as
    `augment.settings.resolve` returns it (given raw, e.g. `config.input`, it is
    resolved here), or None: off; batch_fn: maps each batch
    (images, labels) -> (inputs, targets) (the objective's), or None; num_classes,
    multi_label: the labels (int32 () or multi-hot float32 (num_classes,)); split: the
    training split; max_examples: only its first N records (0: all); seed: the stream's;
    preprocessing: the model's input normalisation ({"mean", "std"} on the [0, 1] scale,
    from a timm or transformers checkpoint), None for the official (x - 127.5) / 127.5;
    synthetic: the stream's first batch, repeated (a speed measurement of the step
    without the input pipeline; `config.input.synthetic`); data_service: the
    dispatcher ("grpc://HOST:PORT") whose workers decode, augment and batch the training
    stream (`config.input.data_service`; None: this process does); cache_decoded: the
    training records decoded once into memory and read by position, the same stream
    (`config.input.cache_decoded`, `input_pipeline.decoded_table`; off with a
    data_service, whose workers decode).
    """

    image_size: tuple = (224, 224)
    crop: str = "inception_crop"
    area_range: tuple = (0.05, 1.0)
    flip: bool = True
    shuffle_buffer: int = 50_000
    shard_by: str = "auto"
    shuffle_bytes: int = 1 << 30
    strict: bool = False
    verify_max_bytes: int = VERIFY_MAX_BYTES
    max_pixels: int = image_header.DEFAULT_MAX_PIXELS
    augmentation: dict = None
    batch_fn: object = None
    num_classes: int = None
    multi_label: bool = False
    split: str = "train"
    max_examples: int = 0
    seed: int = 0
    preprocessing: dict = None  # the model's input normalisation (None: the official)
    synthetic: bool = False  # the first batch, repeated (speed measurements)
    data_service: str = None  # "grpc://HOST:PORT": batches from tf.data service workers
    cache_decoded: bool = False  # the training records decoded once, held in memory

    def __post_init__(self):
        object.__setattr__(self, "image_size", input_pipeline.image_hw(self.image_size))
        object.__setattr__(self, "area_range", tuple(self.area_range))
        if self.augmentation is not None:
            object.__setattr__(self, "augmentation", augment_settings.resolve(self.augmentation))
        if self.cache_decoded and self.data_service:
            # The service's workers read and decode the records: a cache here would
            # decode them for nothing. (configs/fashion_mnist.py has it on.)
            logging.getLogger("trainers").info(
                "input.cache_decoded is off: input.data_service's workers decode the records"
            )
            object.__setattr__(self, "cache_decoded", False)

    @classmethod
    def from_config(cls, config, num_classes, multi_label, objective, preprocessing=None):
        """The spec of a run: `config` as trainers/train_config.resolve returns it,
        the data's `num_classes` and `multi_label`, the objective (its batch_fn), and
        the model's `preprocessing` (its checkpoint's input normalisation, which the
        pipeline then applies, as the model's exports do)."""
        inp = config.input
        max_pixels = inp.get("max_pixels")
        return cls(
            image_size=config.image_size,
            crop=inp.crop,
            area_range=tuple(inp.area_range),
            flip=bool(inp.flip),
            shuffle_buffer=int(inp.shuffle_buffer),
            shard_by=inp.shard_by,
            shuffle_bytes=int(inp.shuffle_bytes or 0),
            strict=bool(inp.strict),
            verify_max_bytes=int(inp.verify_max_bytes),
            max_pixels=image_header.DEFAULT_MAX_PIXELS if max_pixels is None else int(max_pixels),
            augmentation=inp,  # RandAugment / Mixup / CutMix (augment/settings.py)
            batch_fn=objective.map_batch(config, num_classes),
            num_classes=num_classes,
            multi_label=bool(multi_label),
            split=config.train_split,
            max_examples=int(config.train_examples or 0),
            seed=int(config.seed),
            preprocessing=preprocessing,
            synthetic=bool(inp.get("synthetic", False)),
            data_service=inp.get("data_service") or None,
            cache_decoded=bool(inp.get("cache_decoded", False)),
        )

    @property
    def split_checks(self):
        """How splits are checked: `input_pipeline.get_split`'s keyword arguments."""
        return {"strict": self.strict, "verify_max_bytes": self.verify_max_bytes}
