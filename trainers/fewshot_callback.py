"""Few-shot linear evaluation of a model on a tools/make_tfrecords.py directory:
`FewShotEvaluator` (used by tools/fewshot.py) and `FewShotCallback`, the periodic
evaluator of the trainers (`--config.fewshot_every=N`).

Every `every_steps` optimizer steps (and at the end of training) the frozen
features of the train and test splits are extracted and
`keras_vit.fewshot.evaluate` fits the big_vision ridge classifiers on k-shot
subsets. Results go to the next epoch-end logs (`fewshot_{k}shot`, the mean over
seeds, in [0, 1]), to the "trainers" logger, to TensorBoard under `summary_dir` (fewshot/{k}shot) and to
`self.history` ({step: results}).

Config keys read by `from_config` (all optional but `fewshot_every`):
  fewshot_every: N steps; 0/None disables the evaluator.
  fewshot: dict(shots=(1, 5, 10, 25), num_seeds=3, l2=2**10,
                representation='pre_logits', train_split='train', test_split='test',
                max_train_examples=10_000, max_test_examples=10_000, batch_size=256)
"""
import logging

import keras
import tensorflow as tf

from keras_vit import fewshot
from trainers import input_pipeline
from trainers.summaries import write_scalar

log = logging.getLogger("trainers")

DEFAULTS = dict(shots=fewshot.DEFAULT_SHOTS, num_seeds=3, l2=fewshot.DEFAULT_L2,
                representation="pre_logits", train_split="train", test_split="test",
                max_train_examples=10_000, max_test_examples=10_000, batch_size=256)


def _first(info, max_examples):
  """The split `info` cut to its first `max_examples` records."""
  if not max_examples or max_examples >= info.num_examples:
    return info
  counts, left = [], int(max_examples)
  for count in info.counts:
    counts.append(min(count, left))
    left -= counts[-1]
  info.counts, info.num_examples = counts, int(max_examples)
  return info


class FewShotEvaluator:
  """Few-shot accuracies of a model's frozen features on a data directory.

  Args:
    data_dir: a tools/make_tfrecords.py directory.
    image_size: the model's input size (int or (H, W)).
    num_classes: default: the manifest's.
    **options: see DEFAULTS (shots, num_seeds, l2, representation, splits, caps
      on the number of examples read: the first N of each split).
  """

  def __init__(self, data_dir, image_size, num_classes=None, **options):
    unknown = set(options) - set(DEFAULTS)
    if unknown:
      raise ValueError(f"few-shot: unknown option(s) {sorted(unknown)}; "
                       f"known: {sorted(DEFAULTS)}")
    self.options = {**DEFAULTS, **options}
    self.data_dir = data_dir
    self.image_size = image_size
    self.num_classes = num_classes or input_pipeline.get_num_classes(data_dir)
    self._splits = {}  # (split, max_examples) -> input_pipeline.Split, scanned once

  def _batches(self, split, max_examples):
    key = (split, max_examples)
    if key not in self._splits:
      self._splits[key] = _first(input_pipeline.get_split(self.data_dir, split), max_examples)
    return input_pipeline.eval_dataset(
        self.data_dir, batch_size=self.options["batch_size"], image_size=self.image_size,
        split=split, info=self._splits[key])

  def features(self, model, split, max_examples=None):
    """(features (N, F), labels (N,)) of the first `max_examples` of `split`."""
    return fewshot.extract_features(model, self._batches(split, max_examples),
                                    self.options["representation"])

  def evaluate(self, model):
    """{k: {'mean', 'std', 'per_seed'}} for `model`'s current weights
    (keras_vit.fewshot.evaluate)."""
    opts = self.options
    train = self.features(model, opts["train_split"], opts["max_train_examples"])
    test = self.features(model, opts["test_split"], opts["max_test_examples"])
    return fewshot.evaluate(*train, *test, shots=opts["shots"], num_seeds=opts["num_seeds"],
                            l2=opts["l2"], num_classes=self.num_classes)


class FewShotCallback(keras.callbacks.Callback):
  """Runs few-shot linear evaluation every `every_steps` training steps.

  Args:
    data_dir: a tools/make_tfrecords.py directory.
    image_size: the model's input size (int or (H, W)).
    every_steps: evaluate when the optimizer step count crosses a multiple of it.
    num_classes: default: the manifest's.
    vit: the VisionTransformer to read features from; default: the trained model.
    summary_dir: TensorBoard directory, or None.
    **options: see DEFAULTS.
  """

  def __init__(self, data_dir, image_size, every_steps, num_classes=None, vit=None,
               summary_dir=None, **options):
    super().__init__()
    if int(every_steps) < 1:
      raise ValueError(f"fewshot_every must be >= 1, got {every_steps}")
    self.evaluator = FewShotEvaluator(data_dir, image_size, num_classes, **options)
    self.every_steps = int(every_steps)
    self.vit = vit
    self.history = {}
    self._writer = tf.summary.create_file_writer(summary_dir) if summary_dir else None
    self._start_step = 0
    self._last_step = None
    self._unreported = {}

  def _step(self):
    return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

  def _run(self, step):
    results = self.evaluator.evaluate(self.vit or self.model)
    self.history[step] = results
    self._last_step = step
    log.info("step %d few-shot: %s", step, "; ".join(
        f"{k}-shot {100 * r['mean']:.2f}%" for k, r in sorted(results.items())))
    self._unreported = {f"fewshot_{k}shot": r["mean"] for k, r in results.items()}
    if self._writer is not None:
      with self._writer.as_default(step=step):
        for k, r in results.items():
          write_scalar(f"fewshot/{k}shot", r["mean"], step)
          write_scalar(f"fewshot/{k}shot_std", r["std"], step)
      self._writer.flush()

  def on_train_batch_end(self, batch, logs=None):
    step = self._step()
    previous = self._last_step if self._last_step is not None else self._start_step
    if step // self.every_steps > previous // self.every_steps:
      self._run(step)

  def on_epoch_end(self, epoch, logs=None):
    if logs is not None:  # the latest results, once, into the epoch's logs (History)
      logs.update(self._unreported)
    self._unreported = {}

  def on_train_begin(self, logs=None):
    self._start_step = self._step()

  def on_train_end(self, logs=None):
    step = self._step()
    if step != self._last_step and step != self._start_step:
      self._run(step)


def from_config(config, data_dir, summary_dir=None, num_classes=None):
  """A FewShotCallback from a trainer config, or None when `fewshot_every` is 0/absent."""
  every = config.get("fewshot_every")
  if not every:
    return None
  options = config.get("fewshot") or {}
  options = dict(options.to_dict() if hasattr(options, "to_dict") else options)
  return FewShotCallback(data_dir, config.image_size, every, num_classes=num_classes,
                         summary_dir=summary_dir, **options)


__all__ = ["DEFAULTS", "FewShotCallback", "FewShotEvaluator", "from_config"]
