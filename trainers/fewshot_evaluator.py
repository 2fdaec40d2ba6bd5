"""Few-shot linear evaluation of a model on a tools/make_tfrecords.py directory:
`FewShotEvaluator`, behind the `fewshot` evaluator of trainers/evaluators.py (the
trainers' `config.evals`, and tools/fewshot.py).

The frozen features are extracted and `keras_vit.fewshot.evaluate` fits the
big_vision ridge classifiers on k-shot subsets. Only the k-shot images are read through the model
on the train side: the train split's labels are read once (the label feature of
each record only, no image decoding), the k-shot sets of every seed are drawn
from them (`keras_vit.fewshot.fewshot_indices`, the same sets as drawing from the
features of the whole split) and features are computed for their union
(`keras_vit.fewshot.needed_indices`: at most max(shots) x classes x seeds images,
e.g. 25 x 10 x 3 = 750 instead of 60,000). The test split is read in full (up to
`max_test_examples`). Feature extraction shows a progress bar (cli/console.py).

Example i of a split is the i-th example with features: `input_pipeline.eval_dataset`
over its first `max_*_examples` records, less those of weight 0. Should a k-shot image
fail to decode (eval_dataset then gives it weight 0, it has no features and the later
indices shift), the evaluator warns and falls back to extracting the whole train split
(from then on). An undecodable image outside the k-shot sets is not noticed: the draws
then index the records with a readable label, a shift of the later indices from what
full extraction would number them (still k balanced, seeded examples per class).

Options (defaults: configs/common.py `fewshot_eval`): shots, num_seeds, l2,
representation ('pre_logits' | 'token' | 'gap'), train_split, test_split,
max_train_examples, max_test_examples (0: the whole split), batch_size.
"""

import dataclasses
import logging

import keras
import numpy as np
import tensorflow as tf

from keras_vit import fewshot
from keras_vit_cli import console
from keras_vit_configs import common
from keras_vit_data import readers, records
from keras_vit_trainers import input_pipeline
from keras_vit_trainers.tracing import as_written

log = logging.getLogger("trainers")

DEFAULTS = {k: v for k, v in common.fewshot_eval().items() if k not in ("type", "every")}


def _labels_batched(info, batch_size, bar, parse_labels=records.parse_labels):
    """read_labels' fast path: records parsed a batch at a time. Raises
    tf.errors.OpError, or ValueError for a record without a label."""
    ds = records.read_records(info).batch(batch_size).map(as_written(parse_labels))
    labels = []
    for sparse in ds.prefetch(tf.data.AUTOTUNE):
        rows, values = sparse.indices.numpy()[:, 0], sparse.values.numpy()
        num_rows = int(sparse.dense_shape[0])
        present, first = np.unique(rows, return_index=True)  # row-major: first entry per row
        if len(present) != num_rows:
            raise ValueError("a record without a label")
        labels.append(values[first].astype(np.int32).astype(np.int64))  # int32: as parse
        bar.update(num_rows)
    labels = np.concatenate(labels) if labels else np.zeros([0], np.int64)
    return np.arange(len(labels), dtype=np.int64), labels


def _labels_per_record(info, batch_size, bar, parse_labels=records.parse_labels):
    """read_labels' slow path: one record at a time, unparsable ones skipped."""

    def label(position, record):
        labels = tf.sparse.to_dense(parse_labels(record[None]))[0]
        return position, tf.cast(labels[0], tf.int32)  # as input_pipeline.parse

    ds = (
        records.read_records(info)
        .enumerate()
        .map(as_written(label), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    )
    positions, labels = [np.zeros([0], np.int64)], [np.zeros([0], np.int64)]
    for p, y in ds.ignore_errors().batch(batch_size).prefetch(tf.data.AUTOTUNE):
        positions.append(p.numpy())
        labels.append(y.numpy().astype(np.int64))
        bar.update(len(positions[-1]))
    return np.concatenate(positions), np.concatenate(labels)


def read_labels(info, batch_size=4096, desc="few-shot labels", reader=None):
    """(positions, labels) of the examples `input_pipeline.eval_dataset(info=info)`
    yields, in its order, read from the label feature alone (no image decoding):
    example i is record positions[i] of the split (0-based over the records read)
    and has label labels[i] (the first of the record's labels, as
    `input_pipeline.parse`). Records whose label does not parse are skipped, as
    their weight 0 in eval_dataset leaves them out of the features. `reader`: the
    dataset's (its label feature; None: a make_tfrecords directory's)."""
    parse_labels = records.parse_labels if reader is None else reader.parse_labels
    with console.Progress(info.num_examples, f"{desc} ({info.name})", unit="record") as bar:
        try:
            return _labels_batched(info, batch_size, bar, parse_labels)
        except (tf.errors.OpError, ValueError) as e:
            log.warning(
                "few-shot: reading the labels of %r one record at a time (%s)",
                info.name,
                str(e).splitlines()[0] if str(e) else type(e).__name__,
            )
    with console.Progress(info.num_examples, f"{desc} ({info.name})", unit="record") as bar:
        return _labels_per_record(info, batch_size, bar, parse_labels)


def subset_dataset(info, positions, batch_size, spec, reader=None):
    """Batches (images, labels, positions) of the records at `positions` (sorted,
    as from `read_labels`) of `info`, preprocessed as `input_pipeline.eval_dataset`
    does with `spec` (image_size, max_pixels), in position order; no padding (the last batch may be smaller). Shards
    without a wanted record are not opened and each shard is read up to its last
    wanted record only. A record that fails to parse or decode is skipped."""
    positions = np.asarray(positions, np.int64)
    starts = np.cumsum([0, *info.counts[:-1]]).astype(np.int64)
    files, skips, takes, offsets = [], [], [], []
    for f, skip, start, count in zip(info.files, info.file_starts(), starts, info.counts):
        mine = positions[(positions >= start) & (positions < start + count)]
        if len(mine):
            files.append(f)
            skips.append(int(skip))
            takes.append(int(mine[-1] - start) + 1)
            offsets.append(int(start))
    wanted = np.zeros(int(sum(info.counts)), bool)
    wanted[positions] = True
    wanted = tf.constant(wanted)
    ds = tf.data.Dataset.from_tensor_slices(
        (
            files,
            tf.constant(skips, tf.int64),
            tf.constant(takes, tf.int64),
            tf.constant(offsets, tf.int64),
        )
    )
    ds = ds.flat_map(
        as_written(
            lambda f, skip, take, offset: records.file_records(f, skip, take).enumerate(
                start=offset
            )
        )
    )
    ds = ds.filter(as_written(lambda p, record: tf.gather(wanted, p)))

    def process(position, record):
        encoded, label = input_pipeline.parse(record, None, False, reader)
        image = input_pipeline.decode(encoded, spec.max_pixels)
        image = input_pipeline.preprocess_eval(image, spec.image_size, spec.preprocessing)
        return image, label, position

    ds = ds.map(as_written(process), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.ignore_errors().batch(batch_size).prefetch(tf.data.AUTOTUNE)


class FewShotEvaluator:
    """Few-shot accuracies of a model's frozen features on a data directory.

    Only the train images of the k-shot sets go through the model (see the module
    docstring); `features` extracts a whole split.

    Args:
      data: a keras_vit_data.readers.Reader, or a tools/make_tfrecords.py directory.
      spec: an input_spec.InputSpec; read from it: image_size (the model's input
        size), num_classes (None: the manifest's), max_pixels, and how the splits are
        checked (strict, verify_max_bytes, `input_pipeline.get_split`: strict makes a
        corrupt shard an error). Images are preprocessed as for evaluation, without
        its batch_fn, and one that does not decode has weight 0 even when strict.
      **options: see DEFAULTS (shots, num_seeds, l2, representation, splits, caps
        on the number of examples read: the first N of each split).
    """

    def __init__(
        self,
        data,
        spec,
        **options,
    ):
        unknown = set(options) - set(DEFAULTS)
        if unknown:
            raise ValueError(
                f"few-shot: unknown option(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}"
            )
        self.options = {**DEFAULTS, **options}
        self.reader = readers.as_reader(data)
        self.spec = spec
        # The features' pipeline: eval_dataset's, on the labels as read (not the
        # objective's targets), an undecodable image weight 0 (the indices rely on it).
        self._features_spec = dataclasses.replace(
            spec, strict=False, batch_fn=None, multi_label=False, augmentation=None
        )
        self.num_classes = spec.num_classes or self.reader.num_classes
        self._splits = {}  # (split, max_examples) -> input_pipeline.Split, scanned once
        self._draws = None  # (train labels, needed indices, their record positions)
        self._subset_failed = False  # a k-shot image did not decode: full extraction
        # split -> examples whose features the last evaluate computed (padding excluded)
        self.examples_extracted = {}

    def _split(self, split, max_examples):
        key = (split, max_examples)
        if key not in self._splits:
            info = self.reader.split(split, **self.spec.split_checks)
            self._splits[key] = records.first_examples(info, max_examples)
        return self._splits[key]

    def _batches(self, split, max_examples):
        return input_pipeline.eval_dataset(
            self.reader,
            self._features_spec,
            batch_size=self.options["batch_size"],
            split=split,
            info=self._split(split, max_examples),
        )

    def _extract(self, model, batches, num_images, split):
        """extract_features over `batches` with a progress bar of `num_images`."""

        def counted(bar):
            for batch in batches:
                yield batch
                weights = batch[2] if len(batch) > 2 else None  # eval_dataset's padding: weight 0
                bar.update(
                    len(batch[1])
                    if weights is None
                    else int(np.count_nonzero(keras.ops.convert_to_numpy(weights)))
                )

        with console.Progress(num_images, f"few-shot features ({split})", unit="image") as bar:
            return fewshot.extract_features(model, counted(bar), self.options["representation"])

    def features(self, model, split, max_examples=None):
        """(features (N, F), labels (N,)) of the first `max_examples` of `split`."""
        info = self._split(split, max_examples)
        return self._extract(model, self._batches(split, max_examples), info.num_examples, split)

    def train_draws(self):
        """(labels, needed): the labels of the train split (the first
        `max_train_examples`), read without decoding images, and the indices of the
        examples in the union of the k-shot sets (`keras_vit.fewshot.needed_indices`).
        Read once and cached."""
        if self._draws is None:
            opts = self.options
            info = self._split(opts["train_split"], opts["max_train_examples"])
            positions, labels = read_labels(info, reader=self.reader)
            if not len(labels):
                raise ValueError(f"few-shot: split {opts['train_split']!r} has no readable labels")
            needed = fewshot.needed_indices(
                labels, opts["shots"], self.num_classes, opts["num_seeds"]
            )
            self._draws = labels, needed, positions[needed]
            log.info(
                "few-shot: the k-shot sets use %d of the %d %s images",
                len(needed),
                len(labels),
                opts["train_split"],
            )
        return self._draws[:2]

    def train_features(self, model):
        """(features, labels, indices): the features of the train examples `indices`
        (train_draws()'s `needed`, in order) and the labels of the whole train split,
        as `keras_vit.fewshot.evaluate(..., train_indices=indices)` takes them. When a
        k-shot image cannot be read (the indices would not match eval_dataset's),
        the whole split is extracted instead and `indices` is None."""
        opts = self.options
        split, cap = opts["train_split"], opts["max_train_examples"]
        if self._subset_failed:
            features, labels = self.features(model, split, cap)
            self.examples_extracted[split] = len(labels)
            return features, labels, None
        labels, needed = self.train_draws()
        positions = self._draws[2]
        seen = []

        def batches():
            for images, batch_labels, batch_positions in subset_dataset(
                self._split(split, cap), positions, opts["batch_size"], self.spec, self.reader
            ):
                seen.append(batch_positions.numpy())
                yield images, batch_labels

        features, got = self._extract(model, batches(), len(needed), split)
        read = np.concatenate(seen)
        if np.array_equal(read, positions) and np.array_equal(got, labels[needed]):
            self.examples_extracted[split] = len(read)
            return features, labels, needed
        log.warning(
            "few-shot: %d of the %d k-shot images of %r could not be read; "
            "extracting the whole split instead",
            len(set(positions) - set(read)),
            len(positions),
            split,
        )
        self._subset_failed = True
        features, labels = self.features(model, split, cap)
        self.examples_extracted[split] = len(read) + len(labels)
        return features, labels, None

    def evaluate(self, model):
        """{k: {'mean', 'std', 'per_seed'}} for `model`'s current weights
        (keras_vit.fewshot.evaluate), from the features of the k-shot train images
        and of the test split."""
        opts = self.options
        channels = getattr(model, "channels", 3)
        if channels != 3:
            raise ValueError(
                f"few-shot evaluation reads {self.reader.description}'s images as RGB, and "
                f"{model.name} takes {channels}-channel images; use a 3-channel model."
            )
        train_features, train_labels, indices = self.train_features(model)
        test = self.features(model, opts["test_split"], opts["max_test_examples"])
        self.examples_extracted[opts["test_split"]] = len(test[1])
        return fewshot.evaluate(
            train_features,
            train_labels,
            *test,
            shots=opts["shots"],
            num_seeds=opts["num_seeds"],
            l2=opts["l2"],
            num_classes=self.num_classes,
            train_indices=indices,
        )
