"""ViT-B/16 pre-training on ImageNet-21k (paper §4.1, App. B; docs/design.md, "Recipes").

Adam (0.9, 0.999), batch 4096, lr 1e-3, weight decay 0.03 (coupled to lr), 10k warmup
steps then linear decay, dropout 0.1, clip 1.0, pre_logits = hidden size, 90 epochs,
sigmoid cross-entropy (multi-label), 224 px, inception crop + flip.
  python tools/make_tfrecords.py --source=tfds:imagenet21k ... (or folder:PATH)
  python trainers/pretrain.py --config=configs/vit_b16_i21k.py --tpu=NAME ...
"""

from keras_vit_configs import common


def get_config(model="ViT_B16", hidden_size=768):
    c = common.base_config(model)
    c.model_overrides.representation_size = hidden_size
    c.model_overrides.dropout_rate = 0.1
    c.image_size = 224
    c.optimizer = "adamw"
    c.weight_decay = 0.03  # Table 3, ImageNet-21k (0.1 is the JFT-300M value)
    c.decay_type = "linear"
    c.loss = "sigmoid"
    c.batch_size = 4096
    c.learning_rate = 1e-3
    c.warmup_steps = 10_000
    c.total_steps = 90 * common.IMAGENET21K_TRAIN_IMAGES // c.batch_size
    c.checkpoint_every = 1000
    c.mixed_precision = True
    c.steps_per_execution = 100
    c.evals = dict(validation=common.classification_eval("validation"), fewshot=c.evals.fewshot)
    c.input.shard_by = "files"
    c.input.shuffle_buffer = 250_000
    return c
