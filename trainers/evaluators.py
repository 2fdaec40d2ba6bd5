"""Evaluators declared in the config, big_vision style: `config.evals` maps names to
a `type` and its settings, e.g. (configs/common.py has the defaults)

    config.evals.validation = dict(type="classification", split="validation", every=500)
    config.evals.test = dict(type="classification", split="test", every=0)
    config.evals.fewshot = dict(type="fewshot", every=1000, shots=(1, 5, 10, 25))

`every`: run every N optimizer steps (the training loop stops at each multiple) and
once after training; 0: after training only; -1: never. After training the model has its
final weights (the EMA's when EMA is on); periodic runs see the current weights.

Each type is a small class here, registered by name; `build(config, context)`
makes the configured ones, the training loop (trainers/train_lib.py) runs them, and
tools/fewshot.py uses the `fewshot` one alike. An evaluator's `run(model)` returns
{metric: float} for logs and metrics.json, and keeps its full results in
`self.last`. Results are written to RUN/eval_log.jsonl ({"step", "name", metrics}),
TensorBoard (RUN/tensorboard/<name>) and metrics.json (`<name>_<metric>`, and
`evals.<name>` with every run's results by step).
"""

import dataclasses
import json
import logging

import keras
import tensorflow as tf

from keras_vit import run_directory
from keras_vit_data import readers
from keras_vit_trainers import controller, fewshot_evaluator, input_pipeline, tracing
from keras_vit_trainers.summaries import write_scalar

log = logging.getLogger("trainers")

TYPES = {}


def register(name):
    def wrap(cls):
        TYPES[name] = cls
        cls.type = name
        return cls

    return wrap


@dataclasses.dataclass
class Context:
    """What evaluators share: the data, the input spec (trainers/input_spec.py: the
    model's input size, the classes, how splits are checked and images read), the
    objective and the strategy (for batch sizes) and the training batch."""

    data: object  # the dataset: a keras_vit_data.readers.Reader (or a data directory)
    spec: object  # input_spec.InputSpec
    objective: object
    strategy: object
    batch_size: int
    config: object = None  # the run's config (the objective's loss settings)


class Evaluator:
    """One named evaluation: `run(model) -> {metric: float}` (see module docstring)."""

    type = None

    def __init__(self, name, every, context, **settings):
        self.name, self.every, self.context = name, int(every), context
        self.history = {}  # step -> full results
        self.scalars = {}  # step -> {metric: float}
        self.last = None

    def run(self, model):
        raise NotImplementedError

    def record(self, step, results, scalars):
        self.last = results
        if step is not None:
            self.history[int(step)] = results
            self.scalars[int(step)] = scalars
        return scalars


@register("classification")
class Classification(Evaluator):
    """The compiled metrics (the objective's) of the model on `split`:
    {'accuracy' (objective.metric_name), 'loss' (objective.loss_metric_name, the
    per-example loss, padding excluded)}. A split the data does not have is skipped
    by `build`: with a warning, or, `optional` (the default `validation` evaluator:
    most data sets have none), with an info line.

    `flip`: test-time augmentation by the horizontal mirror: the model's output for a
    batch (N, H, W, C) is the mean of its logits for the images and for the images
    mirrored left to right (twice the evaluation's cost). For objectives whose targets
    do not turn with the image (classification), and not on TPU (which evaluates with
    Keras' `model.evaluate`)."""

    def __init__(
        self, name, every, context, split="test", batch_size=0, optional=False, flip=False
    ):
        super().__init__(name, every, context)
        self.split = split
        self.optional = bool(optional)
        self.batch_size = int(batch_size or context.batch_size)
        self.flip = bool(flip)
        if self.flip and context.objective.name != "classification":
            raise ValueError(
                f"flip=True mirrors the images, which the {context.objective.name!r} "
                "objective's targets do not follow; flip needs the classification objective"
            )
        if self.flip and isinstance(context.strategy, tf.distribute.TPUStrategy):
            raise ValueError("flip=True is not supported on TPU (model.evaluate there)")
        self._dataset = None
        self._forward = None  # (model, its inference step)

    def available(self):
        return readers.as_reader(self.context.data).has_split(self.split)

    def dataset(self):
        if self._dataset is None:
            ctx = self.context
            reader = readers.as_reader(ctx.data)
            info = reader.split(self.split, **ctx.spec.split_checks)
            replicas = ctx.strategy.num_replicas_in_sync
            batch = min(self.batch_size, -(-info.num_examples // replicas) * replicas)
            batch = max(batch - batch % replicas, replicas)
            self._dataset = input_pipeline.eval_dataset(
                reader,
                ctx.spec,
                batch_size=batch,
                split=self.split,
                drop_remainder=isinstance(ctx.strategy, tf.distribute.TPUStrategy),
                info=info,
            )
        return self._dataset

    def run(self, model, step=None, should_stop=None):
        """The objective's metrics over the split; {} when `should_stop()` ended it
        early (a preemption: nothing is recorded)."""
        objective = self.context.objective
        if isinstance(self.context.strategy, tf.distribute.TPUStrategy):
            results = model.evaluate(self.dataset(), return_dict=True, verbose=0)
        else:
            results = self._evaluate_here(model, should_stop)
            if results is None:
                return {}
        scalars = {
            objective.metric_name: float(results[objective.metric_name]),
            "loss": float(results[objective.loss_metric_name]),
        }
        results = {k: float(v) for k, v in results.items()}
        # Keras' own "loss" averages over the weight-0 rows that pad the split to whole
        # batches too; the history (metrics.json) keeps the per-example loss instead.
        results["loss"] = scalars["loss"]
        return self.record(step, results, scalars)

    def _evaluate_here(self, model, should_stop):
        """The objective's weighted metrics, batch by batch in this process (each
        worker scores the whole split: no collective, so a worker can end it alone)."""
        metrics = self.context.objective.metrics(self.context.config)
        if self._forward is None or self._forward[0] is not model:  # traced once per model
            self._forward = (model, tracing.function(self._inference(model)))
        forward = self._forward[1]
        for x, y, w in self.dataset():
            if should_stop is not None and should_stop():
                log.info("%s evaluation ended early (preemption)", self.name)
                return None
            y_pred = forward(x)
            for metric in metrics:
                metric.update_state(y, y_pred, sample_weight=w)
        return {m.name: float(m.result()) for m in metrics}

    def _inference(self, model):
        """images (N, H, W, C) -> logits (N, classes): the model's, or with `flip` the
        mean of the model's for the images and their mirror images."""
        if not self.flip:
            return lambda x: model(x, training=False)
        width = 2 if keras.config.image_data_format() == "channels_last" else 3

        def forward(x):
            return (model(x, training=False) + model(tf.reverse(x, [width]), training=False)) / 2

        return forward


@register("fewshot")
class FewShot(Evaluator):
    """Few-shot linear probes on frozen features (trainers/fewshot_evaluator.py):
    {'<k>shot': mean accuracy over seeds}; `last` has per-seed results."""

    def __init__(self, name, every, context, **options):
        super().__init__(name, every, context)
        self.evaluator = fewshot_evaluator.FewShotEvaluator(
            context.data,
            context.spec,
            **options,
        )
        self.vit = None  # the ViT whose features are read; default: the trained model

    def run(self, model, step=None, should_stop=None):
        del should_stop  # a linear probe: short
        results = self.evaluator.evaluate(self.vit or getattr(model, "backbone", model))
        scalars = {f"{k}shot": r["mean"] for k, r in sorted(results.items())}
        log.info(
            "step %s few-shot: %s",
            step,
            "; ".join(f"{k}-shot {100 * r['mean']:.2f}%" for k, r in sorted(results.items())),
        )
        return self.record(step, results, scalars)


def build(evals, context):
    """The evaluators of `config.evals` whose `every` is not -1, in name order."""
    made = []
    for name in sorted(evals or {}):
        settings = dict(evals[name])
        kind = settings.pop("type", None)
        if kind not in TYPES:
            raise ValueError(
                f"config.evals.{name}.type={kind!r}: expected one of {', '.join(sorted(TYPES))}"
            )
        every = int(settings.pop("every", 0))
        if every < 0:
            continue
        try:
            evaluator = TYPES[kind](name, every, context, **settings)
        except (TypeError, ValueError) as e:
            raise ValueError(f"config.evals.{name}: {e}") from e
        if isinstance(evaluator, Classification) and not evaluator.available():
            say = log.info if evaluator.optional else log.warning
            say("config.evals.%s: the data has no split %r; skipped", name, evaluator.split)
            continue
        made.append(evaluator)
    return made


def evaluate(evaluator, model, step, run_dir=None, chief=True, should_stop=None):
    """`evaluator.run(model)`, written to the run's eval log and TensorBoard;
    `should_stop()`: end it early (a preemption), recording nothing."""
    scalars = evaluator.run(model, step, should_stop)
    log.debug("step %d %s: %s", step, evaluator.name, scalars)
    if run_dir is not None and chief and scalars:
        run_dir.append_jsonl(run_dir.eval_log, {"step": step, "name": evaluator.name, **scalars})
        writer = tf.summary.create_file_writer(run_dir.tensorboard(evaluator.name))
        with writer.as_default(step=step):
            for k, v in scalars.items():
                write_scalar(f"{evaluator.name}/{k}", v, step)
        writer.flush()
    return scalars


class EvaluationAction(controller.Action):
    """`evaluator`'s periodic schedule in the run (trainers/controller.py): every
    `evaluator.every` steps (> 0), and at the step a run resumes at when the run's
    eval log has no result of it there (a preemption ended it). `should_stop()`: ends
    an evaluation early (a preemption), recording nothing."""

    def __init__(self, evaluator, model, run_dir, chief, should_stop=None):
        self.evaluator, self.model, self.run_dir = evaluator, model, run_dir
        self.chief, self.should_stop = chief, should_stop

    def next_step(self, step):
        return controller.next_multiple(step, self.evaluator.every)

    def due(self, step):
        return controller.itstime(step, self.evaluator.every)

    def begin(self, step):
        if self.due(step) and not self._logged(step):
            self._evaluate(step)

    def after_steps(self, boundary):
        if self.due(boundary.step):
            self._evaluate(boundary.step)

    def _evaluate(self, step):
        evaluate(self.evaluator, self.model, step, self.run_dir, self.chief, self.should_stop)

    def _logged(self, step):
        """Whether RUN/eval_log.jsonl has this evaluator's result of `step`."""
        path = self.run_dir.eval_log
        if not run_directory.exists(path):
            return False
        with run_directory.open_file(path) as f:
            for line in filter(str.strip, f):
                record = json.loads(line)
                if record.get("name") == self.evaluator.name and record.get("step") == step:
                    return True
        return False
