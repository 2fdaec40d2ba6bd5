"""tf.data input pipeline over the shards written by tools/make_tfrecords.py.

Deterministic by construction, so a resumed run sees exactly the batches an
uninterrupted run would have: the training stream is a pure function of
(seed, epoch, position). Epoch e reads the shards in a permutation seeded by
(seed, e), interleaves them deterministically, permutes each window of
`shuffle_buffer` records with stateless ops seeded by (seed, e, window), and augments example i with stateless random ops seeded by (seed, e, i).
`start_step` skips the examples already consumed (only within the current epoch;
earlier epochs are never read).

What is read and how is an `InputSpec` (trainers/input_spec.py), built once from the
config; the stream is staged: `records_stream` (records of this pipeline's share, in
order) -> `example_stage` (decode, crop, flip, RandAugment) -> `batch_stage` (batch,
failed rows filled, the objective's batch_fn) -> `mix_stage` (Mixup / CutMix).

Augmentation (trainers/augment/, docs/augmentation.md): the crop (`spec.crop`) and
flip (augment/crops.py) and, with AugReg's `spec.augmentation`, RandAugment
(augment/randaugment.py) run per example, each from its own split of the example
seed; Mixup / CutMix (augment/mixing.py) run per batch, after `batch_fn` (so on
one-hot labels), from a batch seed that is a function of (seed, step).
`spec.augmentation` None: off, and the stream is exactly the one without it.

`spec.cache_decoded` (small datasets: Fashion-MNIST's 60,000 images take 141 MB): the
pipeline's records are parsed and decoded once, into memory (`decoded_table`), and the
stream names them by position (`records_stream(positions=True)`): the same batches,
without reading and decoding every record every epoch.

Across input pipelines (multi-worker, TPU hosts) the stream is split either by
example (`shard_by='examples'`: pipeline p takes examples p, p+P, ...; every global
batch then holds exactly the examples a single device would see, which the
strategy tests rely on) or by file (`shard_by='files'`: each pipeline reads its own
subset of shards; what you want for ImageNet-21k-sized data).

Corrupt data: at start-up every shard is scanned (when the split is smaller than
`verify_max_bytes`); a shard that fails its CRC check is cut at its last good record,
the lost records are counted and a warning names the shard. A record that still fails
to parse or decode at run time (or declares more than `max_pixels` pixels,
data/image_header.py) keeps its position (`map_keeping_positions`): it is logged
as `ignore_errors` logs it and becomes a placeholder, which in training takes the image
and label of a good record of the same batch (`fill_failed_rows`), and in evaluation
gets weight 0. Every step thus reads the same records, whichever of them decode, and
a resumed run skips records, not decoded examples, without decoding what it skips.
`spec.strict` makes both fatal instead (the spec's fields: trainers/input_spec.py).
"""

import dataclasses
import logging
import time

import tensorflow as tf

from keras_vit import preprocessing as keras_vit_preprocessing
from keras_vit.preprocessing import PIXEL_SCALE
from keras_vit_data import image_header, readers, records, splits
from keras_vit_trainers import tracing
from keras_vit_trainers.augment import crops, mixing, randaugment
from keras_vit_trainers.augment import settings as augment_settings
from keras_vit_trainers.tracing import as_written

AUTOTUNE = tf.data.AUTOTUNE
MEAN, SCALE = PIXEL_SCALE, PIXEL_SCALE  # [0, 255] -> [-1, 1], as the official code.
# input.shard_by: how the stream is split across input pipelines (module docstring).
SHARD_BY = ("auto", "examples", "files")


# The record format and its manifest (data/records.py) and a split's records, scanned
# (data/splits.py): one owner each, named here too for the pipeline's callers.
DataError = records.DataError  # a data directory that is missing, empty or unusable
Split = records.Split
read_manifest = records.read_manifest
get_split = splits.get_split
first_examples = splits.first_examples


# --- parsing and preprocessing ---------------------------------------------


def parse(serialized, num_classes, multi_label, reader=None):
    """A serialized example -> (encoded image, label): int32 () (the first of its
    labels), or multi_label float32 (num_classes,) multi-hot. `reader` (a
    keras_vit_data.readers.Reader) names the dataset's features; None: ours."""
    parse_example = records.parse_example if reader is None else reader.parse
    encoded, labels = parse_example(serialized)
    if multi_label:
        label = tf.reduce_max(tf.one_hot(labels, num_classes), axis=0)
    else:
        label = tf.cast(labels[0], tf.int32)
    return encoded, label


def decode(encoded, max_pixels=image_header.DEFAULT_MAX_PIXELS):
    """PNG/JPEG (GIF/BMP) bytes -> uint8 (H, W, 3); grayscale is repeated to 3
    channels. An image whose header declares more than `max_pixels` pixels (or
    does not give its size) fails before it is decoded, as one that does not decode."""
    where = "input pipeline: an image"
    with tf.control_dependencies([image_header.assert_max_pixels(encoded, max_pixels, where)]):
        return tf.io.decode_image(encoded, channels=3, expand_animations=False)


def scale(image, preprocessing=None):
    """[0, 255] pixels -> the model's input: (x - 127.5) / 127.5 as the official code,
    or, for a model whose checkpoint states its normalisation (`model.preprocessing`,
    a timm or transformers file), `keras_vit.preprocess_input`'s, as its exports do."""
    if preprocessing is None:
        return tf.cast(image, tf.float32) / SCALE - MEAN / SCALE
    return keras_vit_preprocessing.preprocess_input(tf.cast(image, tf.float32), preprocessing)


def preprocess_train(
    image,
    seed,
    image_size,
    crop="inception_crop",
    area_range=(0.05, 1.0),
    flip=True,
    randaug=None,
    preprocessing=None,
):
    """uint8 (H, W, 3) -> float32 (*image_size, 3) in [-1, 1] (or as `preprocessing`
    normalises: `scale`).

    Crop (`crop`, one of augment.settings.CROPS) and flip (augment/crops.py), then
    `randaug` = (num_layers, magnitude) or None (augment/randaugment.py, on the 0..255
    image, before `scale`: big_vision's
    `inception_crop(224)|flip_lr|randaug(2,15)|value_range(-1,1)`). `seed` (int64
    [2]) is split into crop, flip (and randaug) seeds; stateless_split(seed, 3)
    starts with the two seeds of stateless_split(seed, 2), so turning RandAugment
    on leaves the crops and flips as they were.
    """
    seeds = tf.random.experimental.stateless_split(seed, 3 if randaug else 2)
    image = crops.crop(image, seeds[0], image_size, crop, area_range)
    if flip:
        image = crops.flip(image, seeds[1])
    if randaug:
        image = randaugment.randaug(image, seeds[2], *randaug)
    return scale(image, preprocessing)


def preprocess_eval(image, image_size, preprocessing=None):
    return scale(tf.image.resize(image, image_size), preprocessing)


# --- records that do not decode ----------------------------------------------------


# Records that `map_keeping_positions` maps in one small dataset (whose errors it skips).
KEEPING_CHUNK = 64


def map_keeping_positions(ds, fn):
    """`ds.map(fn)` that yields one element for every element of `ds`: (*fn's
    outputs, True), or where `fn` fails (the error logged, as `ignore_errors` logs it)
    zeros of the same shapes and False. Output p is thus always input p. `fn` returns
    a tuple of tensors of static shapes (e.g. image (H, W, 3), label ()).

    Records go through `fn` in chunks of KEEPING_CHUNK, each chunk a small dataset of
    its records numbered 0..k-1 whose failures `ignore_errors` drops; the outputs that
    remain are then placed back at their numbers among zeros."""
    fn = tracing.function(fn)  # traced once for every chunk

    def chunk(*elements):
        size = tf.shape(tf.nest.flatten(elements)[0], out_type=tf.int64)[0]
        done = (
            tf.data.Dataset.from_tensor_slices(elements)
            .enumerate()
            .map(as_written(lambda i, element: (i, *fn(*element))))
            .ignore_errors(log_warning=True)
            .batch(size)
        )
        nothing = tuple(tf.zeros([0, *s.shape[1:]], s.dtype) for s in done.element_spec)
        return (
            done.concatenate(tf.data.Dataset.from_tensors(nothing))
            .take(1)
            .map(as_written(lambda numbers, *outputs: _place(numbers, outputs, size)))
        )

    # One element (a chunk) from each input, in turn: the input's order (deterministic).
    ds = ds.batch(KEEPING_CHUNK).interleave(
        as_written(chunk), block_length=1, num_parallel_calls=AUTOTUNE, deterministic=True
    )
    return ds.unbatch()


def _place(numbers, outputs, size):
    """Rows numbers (m,) of a chunk of `size` and their outputs (m, ...) -> the outputs
    (size, ...) with zeros at the other rows, and (size,) bool: which rows are there."""
    at = numbers[:, None]
    placed = tuple(
        tf.ensure_shape(
            tf.scatter_nd(at, out, tf.concat([[size], tf.shape(out, tf.int64)[1:]], 0)),
            [None, *out.shape[1:]],
        )
        for out in outputs
    )
    there = tf.scatter_nd(at, tf.ones_like(numbers, tf.int32), [size]) > 0
    return (*placed, there)


def fill_failed_rows(images, labels, ok):
    """A batch (images (B, ...), labels (B, ...), ok (B,) bool from
    `map_keeping_positions`) -> (images, labels) of the same shapes, each failed row
    (ok False) replaced by a good row of the batch (the first good row for the first
    failed one, the second for the second, ..., cyclically). A batch without a good
    row fails (InvalidArgumentError)."""
    good = tf.where(ok)[:, 0]
    num_good = tf.size(good, out_type=tf.int64)
    check = tf.debugging.Assert(
        num_good > 0,
        [
            tf.strings.format(
                "input pipeline: none of the {} records of a batch decode", tf.size(ok)
            )
        ],
    )
    rank = tf.cumsum(tf.cast(tf.logical_not(ok), tf.int64)) - 1  # among the failed rows
    with tf.control_dependencies([check]):
        source = tf.where(
            ok,
            tf.range(tf.size(ok, out_type=tf.int64)),
            tf.gather(good, rank % tf.maximum(num_good, 1)),
        )
    return tf.gather(images, source), tf.gather(labels, source)


# --- datasets: records -> examples -> batches -----------------------------------


@dataclasses.dataclass(frozen=True)
class Share:
    """What one input pipeline reads of a split, from where its stream resumes.

    files: its (shard, first record, records) triples; start_epoch, skip: the epoch
    it starts in and the records of that epoch already consumed; stride, offset: it
    keeps record offset, offset + stride, ... (shard_by='examples'); batches_per_step:
    the batches it yields per step (one per replica it feeds); first_batch: the number
    of its first batch in an uninterrupted run; window: the records each shuffle
    window permutes (`shuffle_window`)."""

    files: tuple
    start_epoch: int
    skip: int
    stride: int
    offset: int
    batches_per_step: int
    first_batch: int
    window: int = 1


def shard_mode(spec, num_files, num_pipelines):
    """'files' or 'examples': spec.shard_by, or for 'auto' files where the split has a
    file for every input pipeline (each reads only its own), examples otherwise (each
    reads every record and keeps its 1/P)."""
    if spec.shard_by not in SHARD_BY:
        raise ValueError(f"input.shard_by={spec.shard_by!r}: expected one of {SHARD_BY}")
    if spec.shard_by != "auto":
        return spec.shard_by
    return "files" if num_pipelines > 1 and num_files >= num_pipelines else "examples"


def shuffle_window(info, spec):
    """The records a shuffle window holds: spec.shuffle_buffer, cut to what
    spec.shuffle_bytes holds at the split's mean record size (its files' bytes over
    its records), so that the shuffle's memory does not grow with the images' size.
    <= 1: no shuffle. The same for every pipeline and every resume of a run."""
    records_wanted = int(spec.shuffle_buffer)
    if records_wanted <= 1 or not spec.shuffle_bytes:
        return max(records_wanted, 1)
    sizes = [tf.io.gfile.stat(f).length for f in sorted(set(info.files))]
    mean = max(1, sum(sizes) // max(1, sum(_file_records(info))))
    return max(1, min(records_wanted, int(spec.shuffle_bytes) // mean))


def _file_records(info):
    """How many records each distinct file of `info` holds, at least (for the mean
    record size: a TFDS slice reads part of a file)."""
    most = {}
    for path, start, count in zip(info.files, info.file_starts(), info.counts):
        most[path] = max(most.get(path, 0), start + count)
    return list(most.values())


def pipeline_share(info, spec, *, batch_size, global_batch_size, start_step, input_context):
    """The `Share` of `info` (a Split) that the pipeline of `input_context` (None: the
    only one) reads, for per-replica `batch_size` and `global_batch_size` (None:
    batch_size times the pipelines), resuming at `start_step`."""
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    global_batch_size, per_pipeline = _pipeline_batch(batch_size, global_batch_size, num_pipelines)
    files = tuple(zip(info.files, info.file_starts(), info.counts))
    mode = shard_mode(spec, len(files), num_pipelines)
    if spec.shard_by == "auto" and num_pipelines > 1 and pipeline_id == 0:
        logging.info(
            "input.shard_by=auto: by %s (%d files for %d input pipelines)%s",
            mode,
            len(files),
            num_pipelines,
            "" if mode == "files" else ": each pipeline reads every record and keeps 1/P",
        )
    if mode == "files" and num_pipelines > 1:
        if len(files) < num_pipelines:
            raise DataError(f"shard_by='files' needs >= {num_pipelines} shards, found {len(files)}")
        files = files[pipeline_id::num_pipelines]
        examples_per_epoch = sum(c for _, _, c in files)
        consumed = start_step * per_pipeline
        stride, offset = 1, 0
    else:
        examples_per_epoch = info.num_examples
        consumed = start_step * global_batch_size
        stride, offset = num_pipelines, pipeline_id
    start_epoch, skip = divmod(consumed, examples_per_epoch)
    batches_per_step = per_pipeline // batch_size
    return Share(
        files,
        start_epoch,
        skip,
        stride,
        offset,
        batches_per_step,
        start_step * batches_per_step,
        shuffle_window(info, spec),
    )


def _pipeline_batch(batch_size, global_batch_size, num_pipelines):
    """(global batch, examples one pipeline yields per step: a batch per replica it feeds,
    several under a mirrored strategy on one worker or on a TPU host)."""
    global_batch_size = global_batch_size or batch_size * num_pipelines
    per_pipeline = global_batch_size // num_pipelines
    if per_pipeline % batch_size:
        raise ValueError(
            f"global_batch_size={global_batch_size} over {num_pipelines} input pipeline(s) is "
            f"not a multiple of the per-replica batch_size={batch_size}."
        )
    return global_batch_size, per_pipeline


CYCLE = 16  # files read at once (interleaved record by record) in an epoch


def records_stream(spec, share, positions=False):
    """The pipeline's infinite stream of (epoch int64 (), index int64 (), record string
    ()): epoch e reads `share.files` in an order seeded by (seed, e), in groups of
    CYCLE files each interleaved record by record, and permutes each window of
    share.window records by (seed, e, window); index is the record's place in its
    epoch. Starts after the records `share` says are consumed. `positions`: each
    record is instead its position (int64 ()) among share.files' records in their
    order, the row of `decoded_table(share.files, ...)` that holds it decoded; the
    files are then not read.

    Resuming costs what one group and one window hold, wherever the epoch stopped:
    the groups before the window the stream resumes in are not opened (their records
    are counted from the manifest), and only the records of that window before the
    resume point are read again."""
    files, seed, window = share.files, int(spec.seed), max(1, int(share.window))
    cycle = min(CYCLE, len(files))
    file_names = tf.constant([f for f, _, _ in files])
    file_starts = tf.constant([s for _, s, _ in files], tf.int64)
    file_counts = tf.constant([c for _, _, c in files], tf.int64)
    file_firsts = tf.cumsum(file_counts, exclusive=True)  # positions of their first records

    def file_positions(name, start, count, first):
        del name, start
        return tf.data.Dataset.range(first, first + count)

    def file_records(name, start, count, first):
        del first
        return records.file_records(name, start, count)

    def epoch_records(epoch, first=0):
        """The records of `epoch` from place `first`, a multiple of `window`."""
        order = tf.random.experimental.stateless_shuffle(
            tf.range(len(files), dtype=tf.int64), seed=tf.stack([seed, epoch])
        )
        # The groups of `cycle` files in this order, and where each starts in the epoch.
        counts = tf.gather(file_counts, order)
        group_sizes = tf.math.segment_sum(counts, tf.range(len(files), dtype=tf.int64) // cycle)
        group_ends = tf.cumsum(group_sizes)
        group = tf.reduce_sum(tf.cast(group_ends <= first, tf.int64))  # the one `first` is in
        group_start = group_ends[group] - group_sizes[group]

        def group_records(g):
            members = order[g * cycle : (g + 1) * cycle]
            ds = tf.data.Dataset.from_tensor_slices(
                (
                    tf.gather(file_names, members),
                    tf.gather(file_starts, members),
                    tf.gather(file_counts, members),
                    tf.gather(file_firsts, members),
                )
            )
            return ds.interleave(
                as_written(file_positions if positions else file_records),
                cycle_length=cycle,
                block_length=1,
                deterministic=True,
                num_parallel_calls=AUTOTUNE,
            )

        num_groups = -(-len(files) // cycle)
        ds = tf.data.Dataset.range(group, num_groups).flat_map(as_written(group_records))
        ds = ds.skip(first - group_start)
        if window > 1:  # stateless block shuffle: windows permuted by (seed, epoch, w)

            def shuffle(w, batch):
                order = tf.random.experimental.stateless_shuffle(
                    tf.range(tf.shape(batch, out_type=tf.int64)[0]),
                    seed=tf.stack([tf.constant(seed, tf.int64) * 1_000_003 + epoch, w]),
                )
                return tf.data.Dataset.from_tensor_slices(tf.gather(batch, order))

            ds = ds.batch(window).enumerate(start=first // window)
            ds = ds.flat_map(as_written(shuffle))
        return ds.enumerate(start=first).map(as_written(lambda i, r: (epoch, i, r)))

    resume_from = (share.skip // window) * window  # the window the stream resumes in
    ds = epoch_records(tf.constant(share.start_epoch, tf.int64), resume_from)
    ds = ds.skip(share.skip - resume_from)
    later = tf.data.Dataset.range(share.start_epoch + 1, 2**62)
    later = later.flat_map(as_written(epoch_records))
    ds = ds.concatenate(later)
    if share.stride > 1:
        ds = ds.shard(share.stride, share.offset)
    return ds


def example_stage(ds, spec, reader=None, table=None):
    """(epoch, index, record) -> (image float32 (*image_size, 3) in [-1, 1], label),
    decoded and augmented (crop, flip, RandAugment) with seeds of (seed, epoch, index).
    Not strict: one element per record, (image, label, ok bool ()), a record that does
    not decode a zero image with ok False (`map_keeping_positions`). `table` (a
    `DecodedTable`): each record is a position in it (`records_stream(positions=True)`),
    its image already decoded; the same examples, but for the zero image of a record
    that does not decode, which `fill_failed_rows` replaces either way."""
    seed = int(spec.seed)
    randaug = spec.augmentation["randaug"] if spec.augmentation else None

    def augment(epoch, index, image):
        example_seed = tf.stack([tf.cast(seed, tf.int64) * 65_537 + epoch, index])
        image = preprocess_train(
            image,
            example_seed,
            spec.image_size,
            spec.crop,
            spec.area_range,
            spec.flip,
            randaug,
            spec.preprocessing,
        )
        return tf.ensure_shape(image, [*spec.image_size, 3])

    if table is not None:

        def look_up(epoch, index, position):
            image = augment(epoch, index, table.image(position))
            label = tf.gather(table.labels, position)
            if spec.strict:
                return image, label
            return image, label, tf.gather(table.ok, position)

        return ds.map(as_written(look_up), num_parallel_calls=AUTOTUNE, deterministic=True)

    def process(epoch, index, record):
        encoded, label = parse(record, spec.num_classes, spec.multi_label, reader)
        return augment(epoch, index, decode(encoded, spec.max_pixels)), label

    if spec.strict:  # a record that does not decode is fatal
        return ds.map(as_written(process), num_parallel_calls=AUTOTUNE, deterministic=True)
    return map_keeping_positions(ds, process)  # step s reads the same records, whichever decode


def batch_stage(ds, spec, batch_size):
    """`example_stage`'s examples -> batches (images (B, H, W, 3), labels (B, ...)),
    each row that did not decode replaced by a good one (`fill_failed_rows`), then
    mapped by spec.batch_fn."""
    ds = ds.batch(batch_size, drop_remainder=True)
    if not spec.strict:
        ds = ds.map(as_written(fill_failed_rows), num_parallel_calls=AUTOTUNE, deterministic=True)
    if spec.batch_fn is not None:
        ds = ds.map(as_written(spec.batch_fn), num_parallel_calls=AUTOTUNE, deterministic=True)
    return ds


def mix_stage(ds, spec, first_batch):
    """Batches -> batches mixed by Mixup / CutMix (spec.augmentation), batch n (counted
    from `first_batch`) from a seed of (seed, n); unchanged when both are off."""
    aug = spec.augmentation
    if not (aug and (aug["mixup"] or aug["cutmix"])):
        return ds
    return ds.enumerate(start=first_batch).map(
        as_written(
            mixing.batch_mixer(int(spec.seed), aug["mixup"], aug["cutmix"], spec.num_classes)
        ),
        num_parallel_calls=AUTOTUNE,
        deterministic=True,
    )


# --- input.cache_decoded: the records decoded once, held in memory -------------------

# The decoded images a table may hold: tf.data captures them in its graph, whose
# serialised form (a protocol buffer) must stay under 2 GB.
CACHE_MAX_BYTES = 1 << 30
CACHE_BATCH = 4096  # records decoded per batch while the table is built


@dataclasses.dataclass(frozen=True)
class DecodedTable:
    """Records decoded once, each at its own size: images uint8 (total,), every
    image's pixels flattened one after another; offsets (N,) int64, where image p
    starts in it; sizes (N, 2) int32, its (height, width); labels (N,) int32
    (multi_label: (N, num_classes) float32); ok (N,) bool (False: the record did not
    decode, its image zeros of spec.image_size)."""

    images: tf.Tensor
    offsets: tf.Tensor
    sizes: tf.Tensor
    labels: tf.Tensor
    ok: tf.Tensor

    def image(self, position):
        """Image `position` (a scalar int64 tensor), uint8 (height, width, 3): the
        array `decode` gave for its record."""
        height, width = tf.unstack(tf.gather(self.sizes, position))
        start = tf.gather(self.offsets, position)
        pixels = tf.slice(self.images, [start], [tf.cast(height * width * 3, tf.int64)])
        return tf.reshape(pixels, [height, width, 3])


def decoded_table(files, spec, reader=None):
    """A `DecodedTable` of every record of `files` ((shard, first record, records)
    triples, a `Share`'s), in their order: row p holds the record that
    `records_stream(..., positions=True)` names p, decoded as `example_stage` decodes
    it and kept at its own size (a split of images of several sizes gives the very
    batches of the stream that decodes them). `spec.strict`: a record that does not
    decode is fatal; otherwise it is logged (as `ignore_errors` logs it) and marked not
    ok. None, after one log line, where the images take more than CACHE_MAX_BYTES
    decoded: the stream then reads and decodes every record, as without the cache."""
    import numpy as np

    started = time.perf_counter()
    log = logging.getLogger("trainers")
    names, starts, counts = (list(column) for column in zip(*files))
    num = int(sum(counts))

    def stepping_aside(what):
        log.info(
            "input.cache_decoded steps aside: the %d training images take %s decoded, over "
            "the %.3g GiB a cache holds (input_pipeline.CACHE_MAX_BYTES); each epoch reads "
            "and decodes them",
            num,
            what,
            CACHE_MAX_BYTES / 2**30,
        )

    def decoded(index, record):
        encoded, label = parse(record, spec.num_classes, spec.multi_label, reader)
        image = decode(encoded, spec.max_pixels)
        return index, tf.reshape(image, [-1]), label, tf.shape(image)[:2]

    ds = (
        tf.data.Dataset.from_tensor_slices(
            (tf.constant(names), tf.constant(starts, tf.int64), tf.constant(counts, tf.int64))
        )
        .flat_map(as_written(records.file_records))
        .enumerate()
        .map(as_written(decoded), num_parallel_calls=AUTOTUNE, deterministic=True)
    )
    if not spec.strict:  # dropped here, marked not ok below
        ds = ds.ignore_errors(log_warning=True)
    first = next(iter(ds.take(1)), None)
    if first is not None and num * int(tf.size(first[1])) > CACHE_MAX_BYTES:
        # An estimate from the first image; a split of several sizes is counted below.
        stepping_aside(f"about {num * int(tf.size(first[1])) / 2**30:.2f} GiB")
        return None
    batches, total = [], 0
    for index, pixels, label, size in ds.ragged_batch(CACHE_BATCH).prefetch(1):
        kept = pixels.flat_values.numpy()  # the batch's images, one after another
        total += kept.size
        if total > CACHE_MAX_BYTES:
            stepping_aside(f"over {total / 2**30:.2f} GiB")
            return None
        batches.append((index.numpy(), kept, label.numpy(), size.numpy().astype(np.int32)))
    if not batches:
        raise DataError(f"input.cache_decoded: none of the {num} records of {names[0]}... decode")
    index, kept, labels, sizes = (np.concatenate(column) for column in zip(*batches))
    ok = np.zeros(num, bool)
    ok[index] = True
    # A record that does not decode: zeros of the model's size (`fill_failed_rows`
    # replaces its example, as it does the stream's).
    full_sizes = np.tile(np.asarray(spec.image_size, np.int32), (num, 1))
    full_sizes[index] = sizes
    full_labels = np.zeros((num, *labels.shape[1:]), labels.dtype)
    full_labels[index] = labels
    lengths = full_sizes.prod(axis=1).astype(np.int64) * 3
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    images = np.zeros(int(lengths.sum()), np.uint8)
    # `kept` holds the decoded images in record order, without the failed ones.
    decoded_at = np.repeat(ok, lengths)
    images[decoded_at] = kept
    distinct = len({tuple(s) for s in sizes})
    log.info(
        "input.cache_decoded: %d images (%s) decoded into memory (%.0f MB) in %.1f s",
        num,
        f"{sizes[0][0]}x{sizes[0][1]}" if distinct == 1 else f"{distinct} sizes",
        images.size / 1e6,
        time.perf_counter() - started,
    )
    return DecodedTable(*(tf.constant(a) for a in (images, offsets, full_sizes, full_labels, ok)))


# --- tf.data service (input.data_service) --------------------------------------------


def service_job_name(model_dir, seed, start_step):
    """The tf.data service job of a run: every trainer process of a run (same
    model_dir, seed and resume step) reads from it, and a resumed run (another start
    step) starts a job of its own rather than joining what the dispatcher still holds
    of the interrupted one."""
    import hashlib

    where = hashlib.sha1(str(model_dir or "").encode()).hexdigest()[:12]
    return f"keras_vit-{where}-seed{int(seed)}-step{int(start_step)}"


def service_first_split(info, spec, consumed):
    """The first split of `service_records` for a stream that has consumed `consumed`
    examples: the epoch they end in, after the files of that epoch's order (the order
    `records_stream` reads them in) whose records are all counted as consumed."""
    num_files = len(info.files)
    epoch, skip = divmod(int(consumed), info.num_examples)
    order = tf.random.experimental.stateless_shuffle(
        tf.range(num_files, dtype=tf.int64), seed=tf.constant([int(spec.seed), epoch], tf.int64)
    ).numpy()
    ends, whole = 0, 0
    for f in order:
        ends += int(info.counts[f])
        if ends > skip:
            break
        whole += 1
    return epoch * num_files + whole


def service_records(info, spec, first_split=0):
    """The stream `example_stage` takes, (epoch int64 (), index int64 (), record string
    ()), for tf.data service workers: its source is `Dataset.range` of splits, which the
    dispatcher hands out one at a time (ShardingPolicy.DYNAMIC), split k being file k % F
    of epoch k // F in that epoch's order (`records_stream`'s, F the split's files).
    Every split goes to exactly one worker, in order, so each epoch's records are each
    processed once. index is the record's place in the split, so the example's
    augmentation (seeded by (seed, epoch, index)) does not depend on the worker. Each
    worker interleaves the splits it holds (up to CYCLE) and shuffles a window of
    `shuffle_window` records: the order is the workers', not deterministic."""
    files = tuple(zip(info.files, info.file_starts(), info.counts))
    num_files, seed = len(files), int(spec.seed)
    names = tf.constant([f for f, _, _ in files])
    starts = tf.constant([s for _, s, _ in files], tf.int64)
    counts = tf.constant([c for _, _, c in files], tf.int64)
    firsts = tf.cumsum(counts, exclusive=True)  # each file's first record in the split

    def split_records(k):
        epoch = k // num_files
        order = tf.random.experimental.stateless_shuffle(
            tf.range(num_files, dtype=tf.int64), seed=tf.stack([tf.constant(seed, tf.int64), epoch])
        )
        f = order[k % num_files]
        ds = records.file_records(names[f], starts[f], counts[f]).enumerate(start=firsts[f])
        return ds.map(as_written(lambda i, r: (epoch, i, r)))

    ds = tf.data.Dataset.range(first_split, 2**62).interleave(
        as_written(split_records),
        cycle_length=min(CYCLE, num_files),
        block_length=1,
        num_parallel_calls=AUTOTUNE,
        deterministic=False,
    )
    window = shuffle_window(info, spec)
    return ds.shuffle(window, seed=seed) if window > 1 else ds


def from_service(ds, spec, job_name):
    """`ds` (a `service_records` stream and the stages after it) run on the tf.data
    service workers of spec.data_service ("grpc://HOST:PORT"), in the shared job
    `job_name`: this process receives its elements. ShardingPolicy.DYNAMIC: the
    dispatcher hands each split of the source to one worker, so across workers and
    consumers every element is produced once (at most once where a worker fails)."""
    service = tf.data.experimental.service
    return ds.apply(
        service.distribute(
            processing_mode=service.ShardingPolicy.DYNAMIC,
            service=spec.data_service,
            job_name=job_name,
        )
    )


SERVICE_NOTE = (
    "input.data_service=%s: decoding, augmentation and batching run on tf.data service "
    "workers (job %s); examples arrive in the order the workers deliver them, not the "
    "deterministic stream, so a resumed run does not see the batches an uninterrupted "
    "run would: it starts epoch %d after the %d of its files whose records were all "
    "consumed (records in flight at the interruption may be seen again or skipped)"
)


def _service_batches(reader, info, spec, *, batch_size, consumed, job_name):
    """Batches of `batch_size` from spec.data_service's workers (`service_records` ->
    `example_stage` -> `batch_stage` on the workers), resuming after `consumed` examples;
    logs SERVICE_NOTE."""
    first = service_first_split(info, spec, consumed)
    logging.getLogger("trainers").info(  # a trainer's console shows it
        SERVICE_NOTE, spec.data_service, job_name, *divmod(first, max(1, len(info.files)))
    )
    ds = example_stage(service_records(info, spec, first), spec, reader)
    return from_service(batch_stage(ds, spec, batch_size), spec, job_name)


def train_dataset(
    data,
    spec,
    *,
    batch_size,
    global_batch_size=None,
    start_step=0,
    input_context=None,
    prefetch=True,
    job_name=None,
):
    """Infinite, deterministic stream of (image, label) batches of `batch_size` of
    spec.split (the first spec.max_examples records, `first_examples`) of `data` (a
    keras_vit_data.readers.Reader, or a data directory written by make_tfrecords).

    Images are float32 (batch_size, *image_size, 3) in [-1, 1]; labels int32
    (batch_size,) (multi_label: float32 (batch_size, num_classes)), or whatever
    spec.batch_fn maps them to; Mixup / CutMix (after batch_fn) need float (batch,
    classes) labels there (int labels are one-hot encoded with num_classes) and yield
    float32 labels. `batch_size` is this pipeline's batch (per replica under
    distribute_datasets_from_function), `global_batch_size` the global one, which with
    `start_step` fixes how many examples to skip on resume. `spec`: an
    input_spec.InputSpec.

    spec.data_service ("grpc://HOST:PORT"): the batches come from tf.data service
    workers (`_service_batches`; Mixup / CutMix still run here), in the service job
    `job_name` (None: `service_job_name(None, seed, start_step)`); the stream is then
    not deterministic (SERVICE_NOTE).
    """
    if spec.augmentation:
        logging.info("train augmentation: %s", augment_settings.describe(spec.augmentation))
    reader = readers.as_reader(data)
    info = first_examples(reader.split(spec.split, **spec.split_checks), spec.max_examples)
    if spec.data_service:
        # One job for every pipeline: the whole split, whatever the input context.
        num_pipelines = input_context.num_input_pipelines if input_context else 1
        global_batch_size, per_pipeline = _pipeline_batch(
            batch_size, global_batch_size, num_pipelines
        )
        ds = _service_batches(
            reader,
            info,
            spec,
            batch_size=batch_size,
            consumed=start_step * global_batch_size,
            job_name=job_name or service_job_name(None, spec.seed, start_step),
        )
        first_batch = start_step * (per_pipeline // batch_size)
    else:
        share = pipeline_share(
            info,
            spec,
            batch_size=batch_size,
            global_batch_size=global_batch_size,
            start_step=start_step,
            input_context=input_context,
        )
        table = decoded_table(share.files, spec, reader) if spec.cache_decoded else None
        ds = records_stream(spec, share, positions=table is not None)
        ds = batch_stage(example_stage(ds, spec, reader, table), spec, batch_size)
        first_batch = share.first_batch
    # The pipeline's batches are numbered as in an uninterrupted run: step s, replica r
    # is batch s * batches_per_step + r (both shard_by modes, and through the service).
    ds = mix_stage(ds, spec, first_batch)
    if spec.synthetic:
        # Speed measurement: the same decoded batch every step, held in memory, so
        # the step runs without the input pipeline's decoding and augmentation.
        logging.warning("input.synthetic: training on one batch repeated (a speed run)")
        ds = ds.take(1).cache().repeat()
    options = tf.data.Options()
    options.deterministic = True
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = ds.with_options(options)
    return ds.prefetch(AUTOTUNE) if prefetch else ds


def eval_dataset(data, spec, *, batch_size, split="test", drop_remainder=False, info=None):
    """One pass over `split`, in order, resized and scaled (no augmentation), as
    `spec` (an input_spec.InputSpec: image_size, strict, num_classes, multi_label,
    max_pixels, batch_fn; its split and augmentation are the training stream's) says.

    Yields (images, labels, weights): example i is record i of the split (weight 0
    where it does not decode, unless `strict`), and the split is padded with weight-0
    zero images up to a multiple of `batch_size`, so with drop_remainder=True
    (TPUs) every batch has a fixed shape and no example is lost. Pass it to
    `model.evaluate` unsharded: every worker scores the whole split. `data`: a
    keras_vit_data.readers.Reader or a data directory; `info`: the split's records
    (default: read here).
    """
    reader = readers.as_reader(data)
    info = info or reader.split(split, **spec.split_checks)
    image_size, num_classes, multi_label = spec.image_size, spec.num_classes, spec.multi_label
    ds = records.read_records(info)

    def process(record):
        encoded, label = parse(record, num_classes, multi_label, reader)
        image = decode(encoded, spec.max_pixels)
        return preprocess_eval(image, image_size, spec.preprocessing), label

    if spec.strict:
        ds = ds.map(as_written(process), num_parallel_calls=AUTOTUNE, deterministic=True)
        ds = ds.map(as_written(lambda x, y: (x, y, tf.constant(1.0))))
    else:  # a record that does not decode: a zero image of weight 0, in its place
        ds = map_keeping_positions(ds, process)
        ds = ds.map(as_written(lambda x, y, ok: (x, y, tf.cast(ok, tf.float32))))
    pad = (-info.num_examples) % batch_size
    if pad:
        label = tf.zeros(
            [num_classes] if multi_label else [], tf.float32 if multi_label else tf.int32
        )
        ds = ds.concatenate(
            tf.data.Dataset.from_tensors(
                (tf.zeros([*image_size, 3]), label, tf.constant(0.0))
            ).repeat(pad)
        )
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    if spec.batch_fn is not None:
        batch_fn = spec.batch_fn
        ds = ds.map(as_written(lambda x, y, w: (*batch_fn(x, y), w)), num_parallel_calls=AUTOTUNE)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options).prefetch(AUTOTUNE)


def image_hw(image_size):
    """An int or (H, W) -> (H, W) ints."""
    if isinstance(image_size, int):
        return (image_size, image_size)
    return tuple(int(s) for s in image_size)


def distributed_train_dataset(
    strategy, data, spec, global_batch_size, *, start_step=0, job_name=None
):
    """Per-replica batches of the global batch via distribute_datasets_from_function:
    train_dataset's with `spec`; each replica mixes its own batch. `job_name`: the
    tf.data service job (spec.data_service), the same in every trainer process."""
    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ValueError(
            f"batch_size={global_batch_size} is not divisible by the {replicas} replicas in sync"
        )

    def fn(ctx):
        return train_dataset(
            data,
            spec,
            batch_size=ctx.get_per_replica_batch_size(global_batch_size),
            global_batch_size=global_batch_size,
            start_step=start_step,
            input_context=ctx,
            job_name=job_name,
        )

    return strategy.distribute_datasets_from_function(fn)
