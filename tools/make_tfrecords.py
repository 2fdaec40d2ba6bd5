r"""The command line of `keras_vit_data.writer` (data/): writes sharded TFRecords of `tf.train.Example`s for the trainers.

  python tools/make_tfrecords.py --source=fashion_mnist --output_dir=DATA
  python tools/make_tfrecords.py --source=folder:PATH --output_dir=DATA
  python tools/make_tfrecords.py --source=tfds:cifar10 --output_dir=DATA

Each Example holds the encoded image (PNG or JPEG bytes, as found; raw arrays are
PNG-encoded) and its labels (one, or several for multi-label data); the shards are
DATA/{split}-{i:05d}-of-{n:05d}.tfrecord and DATA/manifest.json lists splits,
counts, class names, shards and label kind: the format of data/records.py.

Every file is checked before it is written: one that is not a JPEG, PNG, GIF or BMP
image, declares more than --max_pixels pixels in its header (read before decoding,
data/image_header.py: the limit the input pipeline and the serving signatures
apply), is truncated or does not decode is skipped, named, and counted by reason in
the summary line and the manifest's skipped_by_reason (--strict: an error). A PNG
with alpha (RGBA, grey + alpha, a transparent palette) is written as it is and
counted: training and the serving signatures alike drop its alpha (docs/data.md).

folder:PATH reads every file of PATH/{split}/{class_name}/ with split train,
validation (or val/, eval/) or test; a folder without split subfolders is one `train`
split. --holdout=0.1 writes a stratified tenth of train as `validation`, for data that
has none (folder: and fashion_mnist sources) (data/holdout.py; the manifest records the seed and the per-class counts).
Output is deterministic: a folder's examples are written in an order shuffled with
--seed (not sorted by class), other sources in their own order; shards are contiguous
slices.

--workers=N checks (and PNG-encodes) images in N parallel threads (default: all
cores; 0: one image at a time, the slow reference); the files are the same.

Across machines: run --num_tasks=N --task_index=i for i = 0 .. N-1 (same flags
otherwise, same --output_dir, e.g. a shared bucket); each task writes its block of
each split's shards and DATA/manifest.task-0000i-of-0000N.json. Then

  python tools/make_tfrecords.py --output_dir=DATA --num_tasks=N --merge

checks that every task's partial manifest is there and agrees, and writes
manifest.json (until then the trainers refuse the folder). A task's shard holds the
images of its slice of the split that pass the checks, so when no image is skipped
the files are those of one run; with skipped images its shards are shorter instead.
"""

import contextlib

from absl import app, flags

from keras_vit_cli import console

if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported (by keras_vit_data): our lines only

# TensorFlow is imported only when needed (encoded images to check, an output path
# with a scheme: gs://, ram://): writing arrays (fashion_mnist) locally needs none.
from keras_vit_data import fashion_mnist, files, image_header, writer

FLAGS = flags.FLAGS
flags.DEFINE_string("source", "fashion_mnist", "fashion_mnist | folder:PATH | tfds:NAME[:CONFIG]")
flags.DEFINE_string("output_dir", None, "Where the shards and manifest.json go.")
flags.DEFINE_string(
    "fashion_mnist_dir",
    fashion_mnist.FASHION_MNIST_DIR,
    "IDX files (Debian package dataset-fashion-mnist).",
)
flags.DEFINE_integer("examples_per_shard", 10000, "Examples per shard (approx).")
flags.DEFINE_string("tfds_data_dir", None, "TFDS data_dir for --source=tfds:.")
flags.DEFINE_list("splits", None, "Splits to write (default: all the source has).")
flags.DEFINE_integer("max_examples", None, "Keep the first N of each split (tests).")
flags.DEFINE_bool("progress", True, "Show a progress bar.")
flags.DEFINE_bool(
    "strict",
    False,
    "An image that does not decode (or is above --max_pixels) is fatal (default: "
    "skipped, counted in the manifest and named in a warning).",
)
flags.DEFINE_float(
    "holdout",
    None,
    "folder: and fashion_mnist sources (no validation split): the fraction of train written as a "
    "stratified, seeded `validation` split (e.g. 0.1).",
)
flags.DEFINE_integer("seed", 0, "folder: sources: the seed of the write order and --holdout.")
flags.DEFINE_integer(
    "max_pixels",
    image_header.DEFAULT_MAX_PIXELS,
    "Skip an image whose header declares more pixels (height x width), before decoding it.",
    lower_bound=1,
)


flags.DEFINE_integer(
    "workers",
    None,
    "Images checked (and arrays PNG-encoded) in parallel (default: all cores); 0: one at "
    "a time, eagerly (slow; the files are the same).",
    lower_bound=0,
)
flags.DEFINE_integer(
    "num_tasks",
    1,
    "Split the writing into this many tasks (machines); see --task_index.",
    lower_bound=1,
)
flags.DEFINE_integer(
    "task_index",
    0,
    "With --num_tasks=N: this task (0 .. N-1) writes only its block of each split's shards "
    "and a partial manifest; --merge writes manifest.json once all N are done.",
    lower_bound=0,
)
flags.DEFINE_bool(
    "merge",
    False,
    "Write manifest.json from the partial manifests of the --num_tasks tasks (after all "
    "have run; nothing is read from --source).",
)


def _split_summary(name, split):
    """'train: 26 (3 skipped: 1 not an image, 1 truncated, 1 too large; 2 with alpha,
    dropped)' of one split of the manifest."""
    notes = []
    if split.get("skipped"):
        by_reason = writer.describe_skipped(split.get("skipped_by_reason", {}))
        notes.append(f"{split['skipped']} skipped" + (f": {by_reason}" if by_reason else ""))
    if split.get("alpha_dropped"):
        notes.append(f"{split['alpha_dropped']} with alpha, dropped")
    return f"{name}: {split['count']}" + (f" ({'; '.join(notes)})" if notes else "")


def _summary(manifest):
    return ", ".join(_split_summary(k, v) for k, v in manifest["splits"].items())


def main(argv):
    del argv
    if not FLAGS.output_dir:
        raise app.UsageError("--output_dir is required")
    if FLAGS.task_index >= FLAGS.num_tasks:
        raise app.UsageError(
            f"--task_index={FLAGS.task_index}: expected < --num_tasks={FLAGS.num_tasks}"
        )
    # A failed single-task write removes the folder it made (never one that was there).
    made = not FLAGS.merge and FLAGS.num_tasks == 1 and not files.exists(FLAGS.output_dir)
    try:
        if FLAGS.merge:
            manifest = writer.merge_tasks(FLAGS.output_dir, FLAGS.num_tasks)
            print(
                f"Merged {FLAGS.num_tasks} tasks into {FLAGS.output_dir} "
                f"({_summary(manifest)}; {manifest['num_classes']} classes)"
            )
            return
        manifest = writer.make_tfrecords(
            FLAGS.source,
            FLAGS.output_dir,
            FLAGS.examples_per_shard,
            FLAGS.splits,
            FLAGS.max_examples,
            FLAGS.progress,
            FLAGS.strict,
            FLAGS.max_pixels,
            FLAGS.workers,
            FLAGS.task_index,
            FLAGS.num_tasks,
            fashion_mnist_dir=FLAGS.fashion_mnist_dir,
            tfds_data_dir=FLAGS.tfds_data_dir,
            holdout=FLAGS.holdout,
            seed=FLAGS.seed,
        )
    except (ValueError, OSError) as e:  # DataError included; a failed download
        if made and files.isdir(FLAGS.output_dir):
            with contextlib.suppress(OSError):
                files.rmtree(FLAGS.output_dir)
        console.fail(console.error_line(e), console.user_error(e) or console.USAGE)
    if FLAGS.num_tasks > 1:
        print(
            f"Wrote task {FLAGS.task_index} of {FLAGS.num_tasks} to {FLAGS.output_dir} "
            f"({_summary(manifest)}); once all tasks are done, run --num_tasks="
            f"{FLAGS.num_tasks} --merge"
        )
        return
    print(f"Wrote {FLAGS.output_dir} ({_summary(manifest)}; {manifest['num_classes']} classes)")


if __name__ == "__main__":
    console.run_app(main)
