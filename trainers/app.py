"""Command line shared by trainers/pretrain.py and trainers/finetune.py."""

import sys

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from trainers import console

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file(
    "config",
    None,
    "An ml_collections config file (configs/*.py); override keys with --config.KEY=VALUE.",
    lock_config=False,
)
flags.DEFINE_string("data_dir", None, "TFRecords written by tools/make_tfrecords.py.")
flags.DEFINE_string("model_dir", None, "Run directory; rerunning on it resumes.")
flags.DEFINE_enum(
    "strategy",
    "auto",
    ["auto", "default", "mirrored", "multi_worker", "tpu"],
    "tf.distribute strategy (trainers/strategy.py).",
)
flags.DEFINE_string("tpu", None, "TPU name or address for TPUClusterResolver; 'local' on a TPU VM.")
flags.DEFINE_integer(
    "cpu_replicas",
    1,
    "Split the CPU into N logical devices (mirrored / auto without accelerators).",
)

# Defaults each trainer brings (docs/design.md, "Recipes") for keys a config leaves None.
DEFAULTS = {
    "pretrain": dict(optimizer="adamw", weight_decay=0.1, decay_type="linear"),
    "finetune": dict(optimizer="sgd", weight_decay=0.0, decay_type="cosine"),
}


def resolve_config(config, mode):
    """The config this trainer runs: config, then its `<mode>` section, then defaults."""
    import ml_collections

    values = config.to_dict()
    section = values.pop(mode, None) or {}
    for other in DEFAULTS:
        values.pop(other, None)
    values.update(section)
    for k, v in DEFAULTS[mode].items():
        if values.get(k) is None:
            values[k] = v
    return ml_collections.ConfigDict(values)


def main(mode):
    def _main(argv):
        if len(argv) > 1:
            raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
        if FLAGS.config is None:
            raise app.UsageError("--config is required (e.g. --config=configs/fashion_mnist.py)")
        if mode == "finetune" and not FLAGS.init:
            raise app.UsageError(
                "--init is required: an official .npz, a keras_vit registry "
                "name, a .weights.h5/.keras file or a pretrain.py RUN directory"
            )
        console.setup()  # again: absl raised its own verbosity to INFO parsing the flags
        # The strategy first: logical CPUs and collectives must be set up before TF starts.
        from trainers import input_pipeline, train_lib
        from trainers import strategy as strategy_lib

        try:
            strategy = strategy_lib.make_strategy(FLAGS.strategy, FLAGS.tpu, FLAGS.cpu_replicas)
            config = resolve_config(FLAGS.config, mode)
            train_lib.run(
                config,
                data_dir=FLAGS.data_dir,
                model_dir=FLAGS.model_dir,
                strategy=strategy,
                mode=mode,
                init=FLAGS.init,
            )
        except (
            strategy_lib.NoTPUError,
            input_pipeline.DataError,
            train_lib.TrainingDivergedError,
        ) as e:
            absl_logging.error("%s", e)
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2 if not isinstance(e, train_lib.TrainingDivergedError) else 3)

    if mode == "finetune":
        flags.DEFINE_string(
            "init",
            None,
            "Weights to start from: an official .npz, a keras_vit "
            "registry name ('imagenet21k', ...), a .weights.h5/.keras file, or "
            "a trainers/pretrain.py RUN directory (model_config.json + "
            "model.weights.h5).",
        )
    else:
        flags.DEFINE_string("init", None, "Optional weights to start pre-training from.")
    app.run(_main)
