"""Every key a trainer config has, with its default: the one place where the
trainers' defaults live (so any key can be set with --config.KEY=VALUE).

`base_config()` is the root of every config in this folder. Sections:
  TRAINER_DEFAULTS   what pretrain.py and finetune.py each use for the keys a config
                     leaves unset (None): pretrain AdamW (0.9, 0.999), weight decay 0.1,
                     linear decay; finetune SGD momentum 0.9, no weight decay, cosine
                     decay. Both clip the global gradient norm at 1.0.
  evals              the evaluators (trainers/evaluators.py), by name.
  masked_patch       the masked patch prediction objective's settings.
A config may also hold a `pretrain` or `finetune` section: what that trainer changes
on top of the config (trainers/train_config.py resolves them; a value given on the
command line always wins).
"""

import ml_collections
from ml_collections import config_dict
from ml_collections.config_dict import placeholder

from keras_vit import fewshot

TRAINER_DEFAULTS = {
    "pretrain": dict(optimizer="adamw", weight_decay=0.1, decay_type="linear"),
    "finetune": dict(optimizer="sgd", weight_decay=0.0, decay_type="cosine"),
}

VERIFY_MAX_BYTES = 4 << 30  # shards up to this size are checked record by record
# Training-set sizes the ImageNet recipes count epochs in (set from your manifest).
IMAGENET1K_TRAIN_IMAGES = 1_268_355  # train[:99%] of 1,281,167
IMAGENET21K_TRAIN_IMAGES = 12_743_321  # ~13M, as in the paper


def classification_eval(split="test", every=0, batch_size=0, optional=False, flip=False):
    """A `classification` evaluator: the compiled metrics on `split`, every `every`
    steps (0: once, at the end of training; -1: never), in batches of `batch_size`
    (0: the training batch size); `optional`: data without the split skip it quietly;
    `flip`: the mean of the logits of each image and its mirror image (test-time
    augmentation, twice the cost)."""
    return ml_collections.ConfigDict(
        dict(
            type="classification",
            split=split,
            every=every,
            batch_size=batch_size,
            optional=optional,
            flip=flip,
        )
    )


def fewshot_eval(every=-1):
    """A `fewshot` evaluator: ridge-regression linear probes on frozen features
    (keras_vit.fewshot) every `every` steps (-1: never; 0: at the end only)."""
    return ml_collections.ConfigDict(
        dict(
            type="fewshot",
            every=every,
            shots=fewshot.DEFAULT_SHOTS,
            num_seeds=3,
            l2=fewshot.DEFAULT_L2,
            representation="pre_logits",  # or "token", "gap"
            train_split="train",
            test_split="test",
            max_train_examples=10_000,  # 0: the whole split
            max_test_examples=10_000,
            batch_size=256,
        )
    )


MASKED_PATCH = dict(target="rgb", bits=3, corruption_rate=0.5, mask_prob=0.8, random_prob=0.1)


def base_config(model="ViT_B16"):
    c = ml_collections.ConfigDict()
    c.seed = 0
    # A keras_vit builder name, or a dict of VisionTransformer kwargs; either can replace
    # the other on the command line (--config.model=ViT_Ti16).
    c.model = config_dict.FieldReference(model, field_type=object)
    # VisionTransformer keyword arguments over config.model's, on every config (a builder
    # name or a dict): --config.model_overrides.stochastic_depth_rate=0.1. None: not set,
    # the model's own value stands (trainers/train_config.py drops it).
    c.model_overrides = ml_collections.ConfigDict(
        dict(
            dropout_rate=placeholder(float),
            attention_dropout_rate=placeholder(float),
            stochastic_depth_rate=placeholder(float),  # of the last block, rising from 0
            representation_size=placeholder(int),  # 0: no pre_logits layer
            classifier=placeholder(str),  # token | gap
        )
    )
    c.image_size = 224
    c.num_classes = 0  # 0: from the data's manifest.json
    c.objective = "classification"  # trainers/objectives.py registry
    c.loss = "softmax"  # or "sigmoid" (multi-label)
    c.label_smoothing = 0.0
    c.total_steps = 10_000
    c.batch_size = 512  # global batch of one update, split across replicas
    c.grad_accum_steps = 1  # > 1: each update averages N micro-batches of batch_size / N
    c.learning_rate = 1e-3
    c.warmup_steps = 500
    c.decay_type = placeholder(str)  # linear | cosine | constant
    c.linear_end = 1e-5
    c.optimizer = placeholder(str)  # adamw | sgd
    c.beta1 = 0.9
    c.beta2 = 0.999
    c.momentum = 0.9
    c.weight_decay = placeholder(float)  # coupled to the learning rate (param -= lr * wd * param)
    c.grad_clip_norm = 1.0  # global norm of the all-reduced gradient
    c.ema_momentum = 0.0  # > 0: Polyak/EMA weights used for eval and export
    # Fine-tuning controls (docs/training.md): what trains (none: everything; backbone:
    # the head only), layer-wise learning-rate decay (1.0: off; trainers/layer_decay.py)
    # and variables left undecayed (Keras variable names, e.g. ("bias", "gamma",
    # "beta", "pos_embedding", "cls"); empty: every variable decays, as the official code).
    c.freeze = "none"
    c.layer_decay = 1.0
    c.weight_decay_exclude = ()
    c.mixed_precision = False  # mixed bfloat16 on every device (no loss scaling needed)
    c.steps_per_execution = 1
    # XLA: "auto" (trainers/config_checks.py resolves it from the strategy, the devices and
    # the dtype, and logs its choice), True or False.
    c.jit_compile = config_dict.FieldReference("auto", field_type=object)
    c.deterministic_ops = False
    c.checkpoint_every = 1000
    # Checkpoints (trainers/checkpointing.py): the newest checkpoint_keep in
    # RUN/checkpoints, and one of every checkpoint_keep_every steps kept for good in
    # RUN/checkpoints/history (0: none); saved in the background (checkpoint_async);
    # resume_step: resume from that step's checkpoint instead of the newest.
    c.checkpoint_keep = 3
    c.checkpoint_keep_every = 0
    c.checkpoint_async = True
    c.resume_step = config_dict.FieldReference(None, field_type=int)
    # TensorBoard points between checkpoints: the means of the last log_every steps
    # (0: one point per checkpoint interval only; trainers/train_log.py RunLogger).
    c.log_every = 100
    # A lost worker ends a multi-worker run through TensorFlow's coordination service
    # (exit code 4; trainers/faults.py). collective_timeout: seconds each collective
    # waits besides, a debugging aid (TensorFlow starts a thread per collective); None: off.
    c.collective_timeout = config_dict.FieldReference(None, field_type=float)
    # (first, last): a TensorFlow profiler trace of those steps in RUN/tensorboard/train
    # (the chief's; () for none).
    c.profile_steps = ()
    # A wall-clock limit (seconds since 1970; None: none): training stops at the last
    # boundary that leaves time_limit_reserve_steps more steps' time (at the pace of the
    # moment: the evaluations and exports to come) before it, saves that step and ends
    # as a finished run does; rerun to train the rest (trainers/time_limit.py). One
    # process only. `make demo` sets them.
    c.time_limit = config_dict.FieldReference(None, field_type=float)
    c.time_limit_reserve_steps = 0
    # With the limit: where the planned steps would end past it, first bring the
    # learning rate's decay forward to end at the step that fits, once, so that the run
    # ends annealed at that step (recorded in RUN/checkpoints/plan.json: a resume keeps
    # it) instead of stopping in mid-decay.
    c.time_limit_anneal = False
    # Your own Keras callbacks: "module:name" strings, each a callback class or factory
    # called with no arguments (docs/training.md, "Watching a run").
    c.callbacks = ()
    c.train_split = "train"
    c.train_examples = 0  # > 0: only the first N examples of train_split
    # Evaluators by name (trainers/evaluators.py); metrics.json has <name>_<metric>. Model
    # selection looks at `validation` (at every checkpoint, where the data has the split:
    # make_tfrecords --holdout makes one); `test` runs once, after training.
    c.evals = ml_collections.ConfigDict(
        dict(
            validation=classification_eval(
                "validation", every=c.get_ref("checkpoint_every"), optional=True
            ),
            test=classification_eval(),
            fewshot=fewshot_eval(),
        )
    )
    c.input = ml_collections.ConfigDict(
        dict(
            # What is read (data/readers.py): None reads --data_dir as written by
            # tools/make_tfrecords.py; "tfds:NAME" a prepared TFDS dataset by name
            # (splits in TFDS's slicing syntax, e.g. train_split="train[:99%]"), from
            # tfds_data_dir (else --data_dir, else TFDS's default); "imagenet_records"
            # ImageNet-layout shards in --data_dir as they are, labels minus label_offset.
            dataset=placeholder(str),
            tfds_data_dir=placeholder(str),
            label_offset=placeholder(int),
            crop="inception_crop",  # inception_crop | random_crop | none (trainers/augment/crops.py)
            # The former name of `crop`, accepted for one release: trainers/train_config.py
            # moves it to `crop` with a deprecation warning. None: not given.
            augment=placeholder(str),
            area_range=(0.05, 1.0),
            flip=True,
            shuffle_buffer=50_000,
            # AugReg name (trainers/augment/settings.py): none|light1|light2|medium1|medium2|
            # strong1|strong2 (randaug + mixup)
            aug_setting=placeholder(str),
            randaug=placeholder(object),  # None/"" off, (num_layers, magnitude) or "randaug(2,15)"
            mixup=placeholder(float),  # Beta alpha; None/0: off (overrides aug_setting's)
            cutmix=placeholder(float),  # Beta alpha; None/0: off
            # Across input pipelines (hosts): files (each reads its own shards), examples
            # (each reads all and keeps 1/P: exact global batches), auto (files where the
            # split has a file per pipeline, else examples).
            shard_by="auto",
            # The shuffle window's memory: at most this many bytes of records (the window
            # then holds fewer than shuffle_buffer records of large images).
            shuffle_bytes=1 << 30,
            strict=False,  # corrupt data fatal instead of skipped + counted
            verify_max_bytes=VERIFY_MAX_BYTES,
            # an image declaring more pixels is a record that does not decode;
            # None: data/image_header.DEFAULT_MAX_PIXELS (trainers/input_spec.py)
            max_pixels=placeholder(int),
            # Speed measurement only: every step gets the stream's first batch again,
            # so a run times the model's step without the input pipeline.
            synthetic=False,
            # "grpc://HOST:PORT": a tf.data service dispatcher (tools/data_service.py)
            # whose workers decode, augment and batch the training stream (not
            # deterministic then: docs/training.md); None: this process does.
            data_service=placeholder(str),
            # The training split decoded once into memory (uint8, at most
            # trainers/input_pipeline.CACHE_MAX_BYTES: Fashion-MNIST's 60,000 images take
            # 141 MB), then read by position: the same batches, without parsing and
            # decoding every record every epoch. Images of one size only; off with
            # input.data_service (its workers decode).
            cache_decoded=False,
        )
    )
    c.masked_patch = ml_collections.ConfigDict(MASKED_PATCH)  # objective="masked_patch"
    c.pretrain = ml_collections.ConfigDict()  # what pretrain.py changes on top
    c.finetune = ml_collections.ConfigDict()  # what finetune.py changes on top
    return c


def read_tfds(c, name, train="train", validation=None, test="test"):
    """Sets `c` to read the TFDS dataset `name` by name (config.input.dataset), training
    on the split or slice `train` and evaluating `validation` (when given) and `test`."""
    c.input.dataset = f"tfds:{name}"
    c.train_split = train
    if validation:
        c.evals.validation.split = validation
    c.evals.test.split = test
    return c


def finetune_config(model="ViT_B16"):
    """The paper's fine-tuning recipe (docs/design.md, "Recipes")."""
    c = base_config(model)
    c.optimizer = "sgd"
    c.weight_decay = 0.0
    c.decay_type = "cosine"
    c.batch_size = 512
    c.warmup_steps = 500
    c.learning_rate = 0.01  # grid {0.001, 0.003, 0.01, 0.03}
    c.image_size = 384
    c.ema_momentum = 0.9999
    c.model_overrides.representation_size = 0  # no pre_logits: the pre-training head goes
    return c
