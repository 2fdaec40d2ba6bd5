"""A resumed run's records begin where its checkpoint does: everything a run directory
recorded after the step training resumes at is of a timeline that will not happen (an
interrupted run logs past its last checkpoint; `--config.resume_step` rolls back a
finished run), and is cut, so that each step has one value:

- RUN/train_log.jsonl and RUN/eval_log.jsonl lose their records after the step;
- each TensorBoard folder (RUN/tensorboard/<name>) has its event files rewritten with
  the events up to the step (event files are TFRecord files of `Event` protocol
  buffers; TensorBoard reads every file of a folder, so a point left in any of them
  would stay on the plot);
- RUN/metrics.json, the figures of a run finished at a later step, is removed: the
  resumed run writes its own when it ends.
"""

import json
import logging
import os

import tensorflow as tf

from keras_vit import run_directory

log = logging.getLogger("trainers")

EVENTS = "events.out.tfevents"  # how the name of every TensorBoard event file begins


def cut_after(run, step):
    """Removes what `run` (a RunDirectory) recorded after `step` (module docstring)."""
    for path in (run.train_log, run.eval_log):
        _cut_jsonl(path, step)
    folder = run.file(run_directory.TENSORBOARD)
    if run_directory.isdir(folder):
        for name in tf.io.gfile.listdir(folder):
            _cut_events(os.path.join(folder, name.rstrip("/")), step)
    if run_directory.exists(run.metrics):
        finished_at = run.read_json(run.metrics).get("step", 0)
        if finished_at > step:
            tf.io.gfile.remove(run.metrics)


def _cut_jsonl(path, step):
    if not run_directory.exists(path):
        return
    with run_directory.open_file(path) as f:
        lines = [line for line in f if line.strip()]
    kept = [line for line in lines if json.loads(line).get("step", 0) <= step]
    if len(kept) != len(lines):
        with run_directory.open_file(path, "w") as f:
            f.writelines(kept)


def _cut_events(folder, step):
    """Rewrites the event files of `folder` without the events after `step`: one file
    (the first file's name, which sorts before any that a writer opens later)."""
    if not run_directory.isdir(folder):
        return
    names = sorted(n for n in tf.io.gfile.listdir(folder) if n.startswith(EVENTS))
    if not names:
        return
    kept, cut = [], 0
    for name in names:
        for record in tf.data.TFRecordDataset(os.path.join(folder, name)).as_numpy_iterator():
            event = tf.compat.v1.Event.FromString(record)
            if event.step > step:
                cut += 1
            else:
                kept.append(record)
    if not cut:
        return
    temporary = os.path.join(folder, f".cut-{step}")  # no "tfevents": TensorBoard skips it
    with tf.io.TFRecordWriter(temporary) as writer:
        for record in kept:
            writer.write(record)
    for name in names:
        tf.io.gfile.remove(os.path.join(folder, name))
    tf.io.gfile.rename(temporary, os.path.join(folder, names[0]))
    log.info("%s: %d TensorBoard points after step %d removed", folder, cut, step)
