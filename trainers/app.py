"""Command line shared by trainers/pretrain.py and trainers/finetune.py."""

import functools
import importlib
import logging
import os
import sys

from absl import app, flags
from ml_collections import config_flags

import keras_vit_configs
from keras_vit_cli import console

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file(
    "config",
    None,
    "A recipe: an installed one's name (fashion_mnist, families:dinov2) or a config "
    "file's path (configs/fashion_mnist.py); override keys with --config.KEY=VALUE.",
    lock_config=False,
)
flags.DEFINE_string(
    "data_dir",
    None,
    "TFRecords written by tools/make_tfrecords.py; ImageNet-layout shards with "
    "--config.input.dataset=imagenet_records; TFDS's data_dir with "
    "--config.input.dataset=tfds:NAME (or --config.input.tfds_data_dir).",
)
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


log = logging.getLogger("trainers")
_fail = console.fail  # exits with the code after one line on stderr: 'error: <message>'


def _config_flags(argv):
    """(the --config file argument or None, [the KEYs of --config.KEY=VALUE flags])."""
    config_file, keys = None, []
    for i, arg in enumerate(argv):
        if arg.startswith("--config="):
            config_file = arg[len("--config=") :]
        elif arg == "--config" and i + 1 < len(argv):
            config_file = argv[i + 1]
        elif arg.startswith("--config."):
            keys.append(arg[len("--config.") :].split("=")[0])
    return config_file, keys


def _find_config(argv):
    """`argv` with its --config value resolved to the config file it names
    (keras_vit_configs.find: a path, or an installed recipe's name); one that names
    neither exits with code 2 and one line listing the names."""
    argv = list(argv)
    for i, arg in enumerate(argv):
        value = None
        if arg.startswith("--config="):
            value = arg[len("--config=") :]
        elif arg == "--config" and i + 1 < len(argv):
            i, value = i + 1, argv[i + 1]
        if value is not None:
            try:
                found = keras_vit_configs.find(value)
            except keras_vit_configs.ConfigNotFound as e:
                _fail(e, 2)
            argv[i] = found if arg == "--config" else f"--config={found}"
    return argv


def _parse_flags(argv, mode="pretrain"):
    """absl's flag parser, after `--help` (the program's usage, exit 0) and the --config
    value resolved (`_find_config`); a --config.KEY the config has no place for (an
    unknown key, a key of a dict model given to a builder name) exits with code 2 and one
    line naming it, where ml_collections raises from inside the parser (with the config
    file loaded, and before it keeps it)."""
    console.exit_with_help(
        argv,
        importlib.import_module(f"keras_vit_trainers.{mode}").__doc__,
        [__name__],
    )
    argv = _find_config(argv)
    sys.argv[:] = argv  # what _config reads back for its error line
    try:
        return app.parse_flags_with_usage(argv)
    except (AttributeError, KeyError, TypeError):
        from keras_vit_trainers import train_config

        config_file, keys = _config_flags(argv)
        if config_file is not None:
            config = FLAGS["config"].parser.parse(config_file)
            for key in keys:
                message = train_config.override_error(config, key)
                if message:
                    _fail(message, 2)
        raise


def _config():
    """FLAGS.config; a config file that fails to load (a syntax error, an exception in
    get_config) exits with code 2 and its error's last line."""
    try:
        return FLAGS.config
    except OSError as e:  # ml_collections reports the load failure when the value is read
        config_file, _ = _config_flags(os.sys.argv)
        last = [line.strip() for line in str(e).splitlines() if line.strip()][-1]
        _fail(f"--config={config_file}: {last}", 2)


def _start_only(model_dir):
    """Whether `model_dir` holds only what a start writes (the run's config, class
    names and data record, the checkpoints' plan; empty folders): a failed start
    removes it again (one a run had made before is never touched)."""
    import tensorflow as tf

    from keras_vit import run_directory
    from keras_vit_trainers import checkpointing

    start_files = (
        run_directory.CONFIG,
        run_directory.CLASS_NAMES,
        run_directory.DATA,
        checkpointing.PLAN_FILE,
    )
    for _, _, files in tf.io.gfile.walk(model_dir):
        if any(name not in start_files for name in files):
            return False
    return True


def _remover(model_dir):
    """A cleanup for a failed start: removes `model_dir` if this run made it (it did not
    exist before) and it holds only what a start writes."""
    from keras_vit import run_directory

    if not model_dir or run_directory.exists(model_dir):
        return lambda: None

    def remove():
        import tensorflow as tf

        if run_directory.exists(model_dir) and _start_only(model_dir):
            tf.io.gfile.rmtree(model_dir)

    return remove


INIT_FILES = (".npz", ".h5", ".keras", ".safetensors")


def _check_init(init):
    """A local --init path (a file name or a folder) that is not there exits with code 2
    before anything is made (a registry name or a URL is checked when it is loaded)."""
    if not init or "://" in init or os.path.exists(init):
        return
    if os.sep in init or init.endswith(INIT_FILES):
        _fail(
            f"--init={init}: no such file or directory (give an official .npz, a keras_vit "
            "registry name, a .weights.h5/.keras file or a pretrain.py RUN directory)",
            2,
        )


def _warn_replicas(replicas):
    cores = os.cpu_count() or 1
    if replicas > cores:
        log.warning(
            "--cpu_replicas=%d exceeds this machine's %d CPU cores: the replicas share them "
            "(slower than --cpu_replicas=%d)",
            replicas,
            cores,
            cores,
        )


def main(mode):
    def _main(argv):
        if len(argv) > 1:
            raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
        if _config() is None:
            raise app.UsageError("--config is required (e.g. --config=fashion_mnist)")
        if mode == "finetune" and not FLAGS.init:
            raise app.UsageError(
                "--init is required: an official .npz, a keras_vit registry "
                "name, a .weights.h5/.keras file or a pretrain.py RUN directory"
            )
        console.setup()  # again: absl raised its own verbosity to INFO parsing the flags
        # The strategy first: logical CPUs and collectives must be set up before TF starts.
        from keras_vit.checkpoint import CheckpointError
        from keras_vit.run_directory import RunDirectoryError
        from keras_vit_trainers import (
            config_checks,
            faults,
            input_pipeline,
            train_config,
            train_lib,
        )
        from keras_vit_trainers import strategy as strategy_lib

        try:
            config = train_config.resolve(
                FLAGS.config, mode, config_flags.get_override_values(FLAGS["config"])
            )
            config_checks.check_values(config)  # before anything is made or written
            if not FLAGS.init:  # the sizes are the config's (an --init file may set them)
                config_checks.check_shapes(config)
        except (ValueError, TypeError, KeyError) as e:
            _fail(e, 2)
        _check_init(FLAGS.init)
        _warn_replicas(FLAGS.cpu_replicas)
        cleanup = _remover(FLAGS.model_dir)
        strategy = None
        try:
            strategy = strategy_lib.make_strategy(
                FLAGS.strategy, FLAGS.tpu, FLAGS.cpu_replicas, config.get("collective_timeout")
            )
            train_lib.run(
                config,
                data_dir=FLAGS.data_dir,
                model_dir=FLAGS.model_dir,
                strategy=strategy,
                mode=mode,
                init=FLAGS.init,
            )
        except (CheckpointError, RunDirectoryError) as e:  # --init does not fit the config
            cleanup()
            _fail(
                f"--init={FLAGS.init}: {console.error_line(e)}{train_lib.init_hint(FLAGS.init)}", 2
            )
        except (
            strategy_lib.NoTPUError,
            input_pipeline.DataError,
            train_lib.PlanError,
            config_checks.ConfigError,  # a config or --config flag mistake, before any model
        ) as e:
            cleanup()
            _fail(console.error_line(e), 2)
        except train_lib.TrainingDivergedError as e:
            _fail(e, 3)
        except faults.Preempted as e:
            log.warning("%s", e)
            sys.exit(faults.EXIT_PREEMPTED)
        except Exception as e:  # a download, a missing file: one line; a bug: its traceback
            lost = faults.lost_worker_line(
                e, strategy_lib.this_task(), config.get("collective_timeout")
            )
            if lost and strategy_lib.kind(strategy) == "multi_worker":
                _fail(lost, faults.EXIT_LOST_WORKER, immediately=True)
            console.exit_on_user_error(e, cleanup)
            raise

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
    app.run(_main, flags_parser=functools.partial(_parse_flags, mode=mode))
