"""A training run directory (`--model_dir=RUN` of trainers/pretrain.py and
trainers/finetune.py): the one place that knows its layout.

    RUN/config.json          the run's full config (ml_collections, as JSON)
    RUN/checkpoints/         the resumable state (tf.train checkpoints ckpt-STEP, the
                             chief's, one copy per job): model + optimizer + EMA +
                             random generators, every `checkpoint_every` steps; the
                             newest few, and history/ (one every N steps, kept)
    RUN/tensorboard/<kind>/  TensorBoard event files: train, eval, fewshot
    RUN/train_log.jsonl      one JSON line per checkpoint interval (step, loss, ...)
    RUN/eval_log.jsonl       periodic evaluator results, one JSON line each
    RUN/learning_curve.png   train loss and eval accuracy against step
    RUN/metrics.json         the final figures of the run
    RUN/model.weights.h5     final model weights (EMA weights when EMA is on),
                             no optimizer state
    RUN/model_config.json    the model's get_config(): `read_model` rebuilds it
    RUN/class_names.json     {"class_names": [...]}: the data's class names, where it
                             names them (the exports label their outputs with them)
    RUN/data.json            {"data_dir", "dataset", "tfds_data_dir"}: where the run's
                             data is (the export reports compare on its validation
                             or test split: deploy/datasets.py)

Everyone who reads or writes a run goes through this module: the trainers,
`deploy/` and the tools, and `keras_vit.load_weights(model, RUN)` (through
`keras_vit.checkpoint.source`). It is paths and file I/O: it imports no model
(`read_model` gets the model class from Keras' registry of serialisable
classes, by the name keras_vit registers it under). Every problem with a run
directory is a `RunDirectoryError`.

Paths may be local or any filesystem `tf.io.gfile` knows (`gs://...`): a path
with a scheme is handled by TensorFlow, imported only then, so `keras_vit`
stays importable without TensorFlow.
"""

import contextlib
import json
import os

CONFIG = "config.json"
CHECKPOINTS = "checkpoints"
TENSORBOARD = "tensorboard"
TRAIN_LOG = "train_log.jsonl"
EVAL_LOG = "eval_log.jsonl"
LEARNING_CURVE = "learning_curve.png"
METRICS = "metrics.json"
WEIGHTS = "model.weights.h5"
MODEL_CONFIG = "model_config.json"
CLASS_NAMES = "class_names.json"
DATA = "data.json"
# The model a run exports, by its name in Keras' registry of serialisable classes
# (`keras_vit.VisionTransformer`'s `register_keras_serializable`).
MODEL_CLASS = "keras_vit>VisionTransformer"


class RunDirectoryError(ValueError):
    """A run directory that cannot be read as asked (the path and the file named)."""


def _remote(path):
    return "://" in str(path)


def _gfile():
    import tensorflow as tf  # only for paths with a scheme (gs://, ...)

    return tf.io.gfile


def exists(path):
    return _gfile().exists(path) if _remote(path) else os.path.exists(path)


def isdir(path):
    return _gfile().isdir(path) if _remote(path) else os.path.isdir(path)


def makedirs(path):
    if _remote(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


@contextlib.contextmanager
def open_file(path, mode="r"):
    """`open` for local paths, `tf.io.gfile.GFile` for paths with a scheme."""
    if _remote(path):
        with _gfile().GFile(path, mode) as f:
            yield f
    else:
        with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f


def is_run(path):
    """Whether `path` is a run directory with an exported model (model_config.json)."""
    return bool(path) and isdir(path) and exists(os.path.join(path, MODEL_CONFIG))


class RunDirectory:
    """The files of one run directory `path` (see the module docstring)."""

    def __init__(self, path):
        if not path:
            raise RunDirectoryError("a run directory path is required (--model_dir=RUN)")
        self.path = str(path)

    def __repr__(self):
        return f"RunDirectory({self.path!r})"

    def file(self, name):
        return os.path.join(self.path, name)

    @property
    def config(self):
        return self.file(CONFIG)

    @property
    def train_log(self):
        return self.file(TRAIN_LOG)

    @property
    def eval_log(self):
        return self.file(EVAL_LOG)

    @property
    def learning_curve(self):
        return self.file(LEARNING_CURVE)

    @property
    def metrics(self):
        return self.file(METRICS)

    @property
    def weights(self):
        return self.file(WEIGHTS)

    @property
    def model_config(self):
        return self.file(MODEL_CONFIG)

    @property
    def data(self):
        return self.file(DATA)

    @property
    def class_names(self):
        return self.file(CLASS_NAMES)

    def checkpoints(self):
        """The resumable state's folder (trainers/checkpointing.py writes it)."""
        return self.file(CHECKPOINTS)

    def tensorboard(self, kind):
        """The TensorBoard folder of `kind` ('train', 'eval', 'fewshot')."""
        return os.path.join(self.path, TENSORBOARD, kind)

    def makedirs(self):
        makedirs(self.path)

    # -- JSON files ---------------------------------------------------------------

    def write_json(self, path, obj):
        with open_file(path, "w") as f:
            json.dump(obj, f, indent=1, default=str)

    def write_data(self, data_dir, dataset=None, tfds_data_dir=None):
        """Writes RUN/data.json: where the run's data is (--data_dir,
        config.input.dataset and .tfds_data_dir), local paths made absolute so that a
        tool run from another folder finds them."""

        def where(path):
            return path if not path or _remote(path) else os.path.abspath(path)

        record = {"data_dir": where(data_dir), "dataset": dataset or None}
        record["tfds_data_dir"] = where(tfds_data_dir)
        self.write_json(self.data, record)

    def append_jsonl(self, path, record):
        with open_file(path, "a") as f:
            f.write(json.dumps(record) + "\n")

    def read_json(self, path):
        if not exists(path):
            raise RunDirectoryError(f"{path}: no such file")
        try:
            with open_file(path) as f:
                return json.load(f)
        except json.JSONDecodeError as e:
            raise RunDirectoryError(f"{path}: not valid JSON ({e})") from e

    @staticmethod
    def read_jsonl(path):
        """The records of a .jsonl file, [] when it does not exist."""
        if not path or not exists(path):
            return []
        with open_file(path) as f:
            return [json.loads(line) for line in f if line.strip()]

    # -- The exported model -------------------------------------------------------

    def has_model(self):
        return exists(self.model_config)

    def check_model(self):
        """Raises RunDirectoryError naming what is missing unless the run has
        exported its model (model_config.json + model.weights.h5)."""
        if not isdir(self.path):
            raise RunDirectoryError(f"{self.path}: no such directory")
        missing = [p for p in (self.model_config, self.weights) if not exists(p)]
        if missing:
            raise RunDirectoryError(
                f"{self.path} is not a finished training run: missing "
                f"{', '.join(missing)} (written at the end of training)"
            )

    def read_model_config(self):
        """The exported model's config (model_config.json: the keyword arguments of
        `keras_vit.VisionTransformer`), the one reader of that file.
        RunDirectoryError naming what is missing or malformed."""
        self.check_model()
        config = self.read_json(self.model_config)
        if not isinstance(config, dict):
            raise RunDirectoryError(f"{self.model_config}: not a model config (a JSON object)")
        return config

    def write_model(self, model):
        """RUN/model.weights.h5 (weights only, no optimizer state) and
        RUN/model_config.json. A task model with a `backbone` (masked patch
        prediction) writes its backbone."""
        import numpy as np

        model = getattr(model, "backbone", model)
        config = model.get_config()
        clean = model.__class__.from_config(config)  # no optimizer, no task head
        clean.set_weights([np.asarray(w) for w in model.get_weights()])
        self.makedirs()
        clean.save_weights(self.weights)
        self.write_json(self.model_config, config)

    def read_model(self, model_class=None):
        """The exported model, rebuilt from model_config.json with its weights.
        `model_class`: the class to rebuild (default: the one Keras has registered
        as `MODEL_CLASS`, `keras_vit.VisionTransformer`)."""
        config = self.read_model_config()
        if model_class is None:
            import keras

            model_class = keras.saving.get_registered_object(MODEL_CLASS)
            if model_class is None:  # keras_vit (its __init__) registers it on import
                raise RunDirectoryError(f"{MODEL_CLASS} is not registered: import keras_vit")
        try:
            model = model_class.from_config(config)
        except (TypeError, ValueError, KeyError) as e:
            raise RunDirectoryError(
                f"{self.model_config} does not describe a {model_class.__name__}: {e}"
            ) from e
        try:
            model.load_weights(self.weights)
        except Exception as e:  # Keras raises ValueError/KeyError/OSError here
            raise RunDirectoryError(f"{self.weights} (with {self.model_config}): {e}") from e
        return model
