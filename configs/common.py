"""Keys every trainer config has (so any of them can be set with --config.KEY=VALUE).

Unset (None) placeholders mean "the trainer's default" (trainers/app.py DEFAULTS): pretrain.py uses
AdamW (0.9, 0.999), weight decay 0.1, linear decay; finetune.py uses SGD momentum
0.9, no weight decay, cosine decay. Both clip the global gradient norm at 1.0.
"""

import ml_collections
from ml_collections.config_dict import placeholder


def base_config(model="ViT_B16"):
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.model = model  # keras_vit builder name, or a dict of VisionTransformer kwargs
    c.model_overrides = ml_collections.ConfigDict()  # e.g. dropout_rate, representation_size
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
    c.mixed_precision = False  # bfloat16 on TPU/CPU, float16 + loss scaling on GPU
    c.steps_per_execution = 1
    c.jit_compile = False
    c.deterministic_ops = False
    c.checkpoint_every = 1000
    c.train_split = "train"
    c.train_examples = 0  # > 0: only the first N examples of train_split
    c.fewshot_every = 0  # > 0: few-shot linear evaluation every N steps (pretrain)
    c.fewshot = ml_collections.ConfigDict(
        dict(  # trainers/fewshot_callback.py DEFAULTS
            shots=(1, 5, 10, 25),
            num_seeds=3,
            representation="pre_logits",
            max_train_examples=10_000,
            max_test_examples=10_000,
        )
    )
    c.eval_split = "test"
    c.eval_batch_size = 0  # 0: batch_size
    c.eval_every = 0  # > 0: also evaluate every N steps (RUN/eval_log.jsonl, learning curve)
    c.input = ml_collections.ConfigDict(
        dict(
            augment="inception_crop",  # inception_crop | random_crop | none
            area_range=(0.05, 1.0),
            flip=True,
            shuffle_buffer=50_000,
            aug_setting=placeholder(str),  # AugReg name (trainers/augment.py): none|light1|light2|
            # medium1|medium2|strong1|strong2 (randaug + mixup)
            randaug=placeholder(object),  # None/"" off, (num_layers, magnitude) or "randaug(2,15)"
            mixup=placeholder(float),  # Beta alpha; None/0: off (overrides aug_setting's)
            cutmix=placeholder(float),  # Beta alpha; None/0: off
            shard_by="examples",  # examples (exact global batches) | files (huge data)
            strict=False,  # corrupt data fatal instead of skipped + counted
            verify_max_bytes=4 << 30,
        )
    )
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
    c.model_overrides.representation_size = placeholder(int)
    return c
