"""Writes a data directory: each split's shards of `tf.train.Example`s and, last, its
manifest (`records`): `make_tfrecords` from a source (`sources`) or from arrays, and
`ensure_records` for the programs that need a data directory and write it only when
it is missing (tools/demo.py, the benchmarks).

Every image is checked before it is written (`image_checks.image_problem`): one that
is not a JPEG, PNG, GIF or BMP image, declares more than `max_pixels` pixels, is
truncated or does not decode is skipped, counted by reason (`skipped_by_reason`) and
named in the manifest (`strict`: an error). PNGs with alpha are written as they are
and counted (`alpha_dropped`): decoding drops the alpha (docs/data.md). JPEG
and PNG bytes that pass are written as they are; arrays are PNG-encoded
(`image_checks.encode_png`, by every path into the same bytes).

`workers` checks (and PNG-encodes) images in parallel: chunks of examples are checked
one chunk ahead of the Python thread that writes, in the source's order; encoded
images through a tf.data map of that many parallel calls (`_check_encoded`: the
header's pixel count, then a decode), arrays by `image_checks.array_problem` in a
pool of that many threads (zlib releases the GIL). An image found wrong is checked
again by the serial writer's check itself, so what is skipped, and why, is the serial
writer's (`workers=0`: one image at a time, eagerly); the shards are byte for byte
the same.

Arrays alone (Fashion-MNIST, a numpy source) written to a local folder import no
TensorFlow: the PNGs are zlib's, the files framed by `tfrecord_file`, the folder
made through `files` (TensorFlow only for paths with a scheme: gs://, ram://). Its
import was half the time of writing Fashion-MNIST. Where TensorFlow is imported
anyway (encoded images to check), its own TFRecordWriter frames the shards: the same
bytes, with a native CRC32C.

`num_tasks`/`task_index` split the writing across machines: task i writes the shards
`task_shards` gives it (a contiguous block of each split's shards, named as in one
run) and a partial manifest (`partial_manifest_name`); `merge_tasks` then checks that
all tasks' partials are there and agree, and writes manifest.json. A task's shard
holds the images of its slice of the split's examples that pass the checks: when
none is skipped, the files and manifest are those of one run.
"""

import concurrent.futures
import functools
import itertools
import json
import logging
import os

import numpy as np

from keras_vit_cli import console
from keras_vit_data import files, image_checks, image_header, records, sources, tfrecord_file
from keras_vit_data.records import DataError

MAX_NAMED_SKIPS = 100  # the manifest names at most this many skipped examples per split
CHUNK_EXAMPLES = 2048  # examples per chunk of the parallel checks
CHUNK_BYTES = 64 << 20  # and at most about this many bytes of images per chunk

log = logging.getLogger("data")


def default_workers():
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# --- checking the images --------------------------------------------------------------


def _check_one(example, max_pixels):
    """(encoded, problem or None) of one example's image, eagerly: the serial writer."""
    image = example[0]
    if isinstance(image, bytes):
        return image, image_checks.image_problem(image, max_pixels)
    return image_checks.array_problem(image, max_pixels)


def _check_serially(examples, max_pixels):
    for example in examples:
        yield (*_check_one(example, max_pixels), example)


@functools.cache
def _encoded_checker():
    """`_check_encoded` as a tf.function, traced once per process (TensorFlow is
    imported here: only sources of encoded images need it)."""
    import tensorflow as tf

    return tf.function(
        _check_encoded,
        input_signature=[
            tf.TensorSpec([None], tf.string),  # encoded images
            tf.TensorSpec([], tf.int64),  # max_pixels
            tf.TensorSpec([], tf.int64),  # parallel calls
        ],
        autograph=False,
    )


def _check_encoded(data, max_pixels, workers):
    """Encoded images -> (index, passed) of each whose check raised no error, in
    order; `passed` where the header gives a size of at most `max_pixels` pixels and
    the image decodes (as `image_checks.image_problem`)."""
    import tensorflow as tf

    def check(i):
        _, _, pixels = image_header.count_pixels(data[i])
        fits = tf.logical_and(pixels >= 0, pixels <= max_pixels)

        def decodes():
            image = tf.io.decode_image(data[i], channels=3, expand_animations=False)
            return tf.size(image) >= 0

        return i, tf.cond(fits, decodes, lambda: fits)

    ds = tf.data.Dataset.range(tf.size(data, out_type=tf.int64))
    ds = ds.map(check, num_parallel_calls=workers, deterministic=True)
    # An image whose check fails (a JPEG header or data that does not parse) is left
    # out here, and checked again eagerly.
    return (
        ds.ignore_errors()
        .batch(tf.maximum(tf.size(data, out_type=tf.int64), 1))
        .get_single_element()
    )


def _chunks(examples):
    """Lists of examples of at most CHUNK_EXAMPLES, and about CHUNK_BYTES."""
    chunk, size = [], 0
    for example in examples:
        chunk.append(example)
        image = example[0]
        size += len(image) if isinstance(image, bytes) else getattr(image, "nbytes", 0)
        if len(chunk) == CHUNK_EXAMPLES or size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _arrays_passing(images, max_pixels):
    """For each array, its PNG if it passes `image_checks.array_problem`, else None
    (an array of a shape it refuses included: the serial check then says why)."""
    pngs = []
    for image in images:
        try:
            encoded, problem = image_checks.array_problem(image, max_pixels)
        except ValueError:
            encoded, problem = None, "refused"
        pngs.append(None if problem else encoded)
    return pngs


def _run_chunk(chunk, max_pixels, workers, pool):
    """{position in `chunk`: its encoded image} of the examples that pass the checks."""
    encoded, arrays = [], []
    for i, (image, *_) in enumerate(chunk):
        if not isinstance(image, bytes):
            arrays.append((i, image))
        elif image_checks.is_image(image) and not image_checks.truncated(image):
            encoded.append((i, image))  # the others are not decoded: the serial check says why
    passed = {}
    if encoded:
        import tensorflow as tf

        index, ok = _encoded_checker()(
            tf.constant([image for _, image in encoded], tf.string),
            tf.constant(max_pixels, tf.int64),
            tf.constant(workers, tf.int64),
        )
        passed.update(
            (encoded[j][0], encoded[j][1]) for j, o in zip(index.numpy(), ok.numpy()) if o
        )
    if arrays:
        images = [image for _, image in arrays]
        step = -(-len(images) // workers)  # a block of the chunk's arrays per thread
        blocks = [images[k : k + step] for k in range(0, len(images), step)]
        pngs = itertools.chain(*pool.map(_arrays_passing, blocks, itertools.repeat(max_pixels)))
        passed.update((i, png) for (i, _), png in zip(arrays, pngs) if png is not None)
    return passed


def _check_in_parallel(examples, max_pixels, workers):
    """What `_check_serially` yields, the checks run by `_run_chunk` in a thread one
    chunk ahead of the caller. The examples are read here, in the caller's thread (a
    source's error is raised as it is)."""
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        concurrent.futures.ThreadPoolExecutor(workers) as encoders,
    ):
        ahead = None
        for chunk in _chunks(examples):
            future = pool.submit(_run_chunk, chunk, max_pixels, workers, encoders)
            if ahead:
                yield from _chunk_results(*ahead, max_pixels)
            ahead = chunk, future
        if ahead:
            yield from _chunk_results(*ahead, max_pixels)


def _chunk_results(chunk, future, max_pixels):
    passed = future.result()
    for i, example in enumerate(chunk):
        encoded = passed.get(i)
        if encoded is not None:
            yield encoded, None, example
        else:  # skipped or failed: the serial writer's check, which says why
            yield (*_check_one(example, max_pixels), example)


# --- serializing ---------------------------------------------------------------------------

_IMAGE_KEY = b"\x0a" + bytes([len(records.ENCODED_KEY)]) + records.ENCODED_KEY.encode()
_LABEL_KEY = b"\x0a" + bytes([len(records.LABEL_KEY)]) + records.LABEL_KEY.encode()


_ONE_BYTE = [bytes([n]) for n in range(0x80)]


def _varint(n):
    if 0 <= n < 0x80:
        return _ONE_BYTE[n]
    n &= (1 << 64) - 1  # a negative int64: ten bytes, as protobuf writes it
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag, payload):
    return tag + _varint(len(payload)) + payload


def serialize_example(encoded, labels):
    """`records.serialize_example`'s bytes (tested equal), written out directly: the
    tf.train.Example message, its map entries sorted by key as that function's
    deterministic serialization gives them,
    without building protobuf objects (a quarter of the time of the whole conversion
    of a small image otherwise)."""
    if isinstance(labels, (int, np.integer)):
        labels = [int(labels)]
    else:
        labels = [int(label) for label in np.atleast_1d(labels)]
    packed = _field(b"\x0a", b"".join(map(_varint, labels))) if labels else b""
    image = _field(b"\x0a", _IMAGE_KEY + _field(b"\x12", _field(b"\x0a", _field(b"\x0a", encoded))))
    label = _field(b"\x0a", _LABEL_KEY + _field(b"\x12", _field(b"\x1a", packed)))
    return _field(b"\x0a", label + image)  # keys sorted, as deterministic serialization


# --- one split ----------------------------------------------------------------------------


def task_shards(num_shards, task_index, num_tasks):
    """The shards [first, last) of `num_shards` that task `task_index` of `num_tasks`
    writes: contiguous blocks, the first `num_shards % num_tasks` tasks one more."""
    base, extra = divmod(num_shards, num_tasks)
    first = task_index * base + min(task_index, extra)
    return first, first + base + (task_index < extra)


def _examples_slice(examples, start, stop):
    if isinstance(examples, (list, tuple, sources.Lazy)):
        return examples[start:stop]
    return itertools.islice(examples, start, stop)


def write_split(
    output_dir,
    split,
    count,
    examples,
    examples_per_shard,
    progress=True,
    strict=False,
    max_pixels=image_header.DEFAULT_MAX_PIXELS,
    workers=None,
    task_index=0,
    num_tasks=1,
    num_classes=None,
):
    """Writes one split's shards; every image is checked first (`image_problem`), and
    one that fails is skipped (counted by reason, named in the manifest and a warning)
    or, with `strict`, fatal. `examples` yields (encoded bytes or uint8 array, labels)
    or (..., name). `workers`: parallel checks (None: all cores; 0: serially, eagerly).
    PNGs with alpha (`image_checks.has_alpha`) are counted as `alpha_dropped`; with
    `num_classes` (single-label data), `per_class` counts the images written.

    One task (the default) fills each shard with the next `per_shard` images that
    pass; task `task_index` of `num_tasks` > 1 writes only its `task_shards`, shard s
    holding the images that pass among examples [s * per_shard, (s + 1) * per_shard)."""
    num_shards = max(1, -(-count // examples_per_shard))
    per_shard = -(-count // num_shards)
    first, last = task_shards(num_shards, task_index, num_tasks)
    start = first * per_shard  # the index of the task's first example
    if num_tasks > 1:
        stop = min(last * per_shard, count)
        examples = _examples_slice(examples, start, stop)
        total = max(0, stop - start)
    else:
        total = count
    workers = default_workers() if workers is None else int(workers)
    if workers > 0:
        checked = _check_in_parallel(examples, max_pixels, workers)
    else:
        checked = _check_serially(examples, max_pixels)
    shards, written, skipped = [], 0, []
    reasons, alpha, per_class = {}, 0, [0] * num_classes if num_classes else None
    bar = console.Progress(total, f"writing {split}", unit="image") if progress else None
    seen, shown = start, start  # examples checked; and shown on the bar
    for s in range(first, last):
        name = records.shard_name(split, s, num_shards)
        n = 0
        # one task: `per_shard` images written; a task of several: its examples read
        end = min((s + 1) * per_shard, count) if num_tasks > 1 else None
        with tfrecord_file.open_records(os.path.join(output_dir, name)) as w:
            while (n < per_shard) if end is None else (seen < end):
                item = next(checked, None)
                if item is None:
                    break
                encoded, problem, (_, labels, *ident) = item
                seen += 1
                if bar and seen - shown >= 256:
                    bar.update(seen - shown)
                    shown = seen
                if problem:
                    what = ident[0] if ident else f"{split} example {seen - 1}"
                    if strict:
                        raise DataError(
                            f"{what}: {problem} ({len(encoded)} bytes); "
                            "remove it, or drop --strict to skip such files"
                        )
                    log.warning("skipping %s: %s (%d bytes)", what, problem, len(encoded))
                    skipped.append(what)
                    reason = getattr(problem, "reason", "undecodable")
                    reasons[reason] = reasons.get(reason, 0) + 1
                    continue
                w.write(serialize_example(encoded, labels))
                alpha += image_checks.has_alpha(encoded)
                if per_class is not None:
                    per_class[int(np.asarray(labels).reshape(-1)[0])] += 1
                n += 1
        shards.append({"file": name, "count": n})
        written += n
    checked.close()
    if bar:
        bar.update(seen - shown)
        bar.close()
    result = {"count": written, "shards": shards}
    if skipped:
        result["skipped"] = len(skipped)
        result["skipped_by_reason"] = {r: reasons[r] for r in image_checks.REASONS if r in reasons}
        result["skipped_examples"] = skipped[:MAX_NAMED_SKIPS]
        log.warning(
            "%s: skipped %d of %d examples (%s)",
            split,
            len(skipped),
            written + len(skipped),
            describe_skipped(result["skipped_by_reason"]),
        )
    if alpha:
        result["alpha_dropped"] = alpha
    if per_class is not None:
        result["per_class"] = per_class
    if num_tasks > 1:
        result["num_shards"] = num_shards
    return result


def describe_skipped(by_reason):
    """{'not_an_image': 2, 'truncated': 1} -> '2 not an image, 1 truncated'."""
    return ", ".join(f"{n} {image_checks.REASONS[r]}" for r, n in by_reason.items())


def _counts_agree(manifest):
    """Moves each split's `per_class` (the images written) into the holdout's
    `<split>_per_class`, so that those counts are the images written, not those the
    holdout assigned before skipped ones were left out: validation_per_class sums to
    splits.validation.count."""
    for split, result in manifest["splits"].items():
        per_class = result.pop("per_class", None)
        if per_class is not None and "holdout" in manifest:
            manifest["holdout"][f"{split}_per_class"] = per_class
    return manifest


def make_tfrecords(
    source,
    output_dir,
    examples_per_shard=10000,
    splits=None,
    max_examples=None,
    progress=True,
    strict=False,
    max_pixels=image_header.DEFAULT_MAX_PIXELS,
    workers=None,
    task_index=0,
    num_tasks=1,
    **source_kwargs,
):
    """Writes the shards and manifest; returns the manifest dict. Images above
    `max_pixels` pixels are skipped as those that do not decode (`write_split`);
    `workers` check them in parallel (None: all cores; 0: one at a time).

    `source` is a name as for --source, or a tuple (splits, class_names, multi_label)
    with splits {name: (count, iterable of (encoded_bytes_or_uint8_array, labels))}.

    `num_tasks` > 1: this is task `task_index`, which writes its shards of each split
    and, instead of manifest.json, its partial manifest (returned);
    `merge_tasks` writes manifest.json once every task's is there.
    """
    if not 0 <= task_index < num_tasks:
        raise ValueError(
            f"--task_index={task_index}: expected 0 <= task_index < --num_tasks={num_tasks}"
        )
    extra = {}
    if isinstance(source, str):
        split_sources, class_names, multi_label, extra = sources.get_source(
            source, arrays=True, **source_kwargs
        )
    else:
        split_sources, class_names, multi_label = source
        source = "arrays"
    files.makedirs(output_dir)  # local, gs://, ram://
    # A manifest left from an earlier run would describe shards this one overwrites: an
    # interrupted run must leave none, so that training refuses the folder.
    try:
        records.remove_manifest(output_dir)
    except FileNotFoundError:  # another task removed it first
        pass
    if num_tasks == 1:  # partial manifests of earlier tasks describe other shards
        for path in files.glob(os.path.join(output_dir, PARTIAL_GLOB)):
            files.remove(path)
    manifest = {
        "source": source,
        "format": "tf.train.Example",
        "features": dict(records.FEATURE_DESCRIPTIONS),
        "num_classes": len(class_names),
        "class_names": class_names,
        "multi_label": multi_label,
        "max_pixels": max_pixels,
        **extra,
        "splits": {},
    }
    for split, (count, examples) in split_sources.items():
        if splits and split not in splits:
            continue
        if max_examples:
            count = min(count, max_examples)
            examples = _examples_slice(examples, 0, count)
        manifest["splits"][split] = write_split(
            output_dir,
            split,
            count,
            examples,
            examples_per_shard,
            progress,
            strict,
            max_pixels,
            workers,
            task_index,
            num_tasks,
            num_classes=len(class_names) if "holdout" in extra else None,
        )
    if num_tasks > 1:
        manifest["task"] = {"index": task_index, "num_tasks": num_tasks}
        _write_json(
            os.path.join(output_dir, partial_manifest_name(task_index, num_tasks)), manifest
        )
        return manifest
    records.write_manifest(output_dir, _counts_agree(manifest))  # whole or absent
    return manifest


# --- tasks on several machines ------------------------------------------------------------

PARTIAL_GLOB = "manifest.task-*-of-*.json"


def partial_manifest_name(task_index, num_tasks):
    """The partial manifest task `task_index` of `num_tasks` writes."""
    return f"manifest.task-{task_index:05d}-of-{num_tasks:05d}.json"


def _write_json(path, value):
    with files.open_file(path + ".partial", "w") as f:
        json.dump(value, f, indent=1)
    files.rename(path + ".partial", path)


def merge_tasks(output_dir, num_tasks):
    """Writes DATA/manifest.json from the partial manifests of tasks 0..num_tasks-1
    (`make_tfrecords(..., task_index=i, num_tasks=num_tasks)`) and removes them;
    returns the manifest. DataError (one line) when a task's partial is missing, the
    tasks were run with different settings, or a split's shards are not all there."""
    paths = [
        os.path.join(output_dir, partial_manifest_name(i, num_tasks)) for i in range(num_tasks)
    ]
    missing = [i for i, path in enumerate(paths) if not files.exists(path)]
    if missing:
        raise DataError(
            f"{output_dir}: no partial manifest of task(s) "
            f"{', '.join(map(str, missing))} of --num_tasks={num_tasks} "
            f"({partial_manifest_name(missing[0], num_tasks)}): run --task_index="
            f"{missing[0]} --num_tasks={num_tasks} first"
        )
    partials = []
    for path in paths:
        with files.open_file(path) as f:
            partials.append(json.load(f))
    header = {k: v for k, v in partials[0].items() if k not in ("splits", "task")}
    for i, partial in enumerate(partials):
        theirs = {k: v for k, v in partial.items() if k not in ("splits", "task")}
        differs = sorted(k for k in {*header, *theirs} if header.get(k) != theirs.get(k))
        if differs or partial.get("task") != {"index": i, "num_tasks": num_tasks}:
            raise DataError(
                f"{paths[i]}: task {i} was run with other settings than task 0 "
                f"({', '.join(differs) or 'task'} differ): run all tasks with the same flags"
            )
        if list(partial["splits"]) != list(partials[0]["splits"]):
            raise DataError(
                f"{paths[i]}: task {i} wrote splits {list(partial['splits'])}, task 0 "
                f"{list(partials[0]['splits'])}: run all tasks with the same flags"
            )
    manifest = {**header, "splits": {}}
    for split in partials[0]["splits"]:
        parts = [partial["splits"][split] for partial in partials]
        shards = [shard for part in parts for shard in part["shards"]]
        num_shards = parts[0]["num_shards"]
        expected = [records.shard_name(split, s, num_shards) for s in range(num_shards)]
        if [shard["file"] for shard in shards] != expected or any(
            part["num_shards"] != num_shards for part in parts
        ):
            raise DataError(
                f"{output_dir}: the tasks' {split} shards are not {expected[0]} .. "
                f"{expected[-1]} once each: run all tasks with the same flags"
            )
        absent = [f for f in expected if not files.exists(os.path.join(output_dir, f))]
        if absent:
            raise DataError(
                f"{output_dir}: shard(s) the tasks wrote are missing: {', '.join(absent[:3])}"
            )
        result = {"count": sum(part["count"] for part in parts), "shards": shards}
        skipped = [what for part in parts for what in part.get("skipped_examples", [])]
        if skipped:
            result["skipped"] = sum(part.get("skipped", 0) for part in parts)
            result["skipped_by_reason"] = {
                r: n
                for r in image_checks.REASONS
                if (n := sum(part.get("skipped_by_reason", {}).get(r, 0) for part in parts))
            }
            result["skipped_examples"] = skipped[:MAX_NAMED_SKIPS]
        alpha = sum(part.get("alpha_dropped", 0) for part in parts)
        if alpha:
            result["alpha_dropped"] = alpha
        if all("per_class" in part for part in parts):
            result["per_class"] = np.sum([part["per_class"] for part in parts], 0).tolist()
        manifest["splits"][split] = result
    records.write_manifest(output_dir, _counts_agree(manifest))
    for path in paths:
        files.remove(path)
    return manifest


def ensure_records(source, data_dir, progress=True, **kwargs):
    """The manifest of `data_dir`, writing the folder from `source` first
    (`make_tfrecords(source, data_dir, **kwargs)`) when it has no manifest. A folder
    written from another source, or with another `holdout` fraction, is refused (a
    DataError naming both), so that a program never uses data it did not ask for."""
    if files.exists(records.manifest_path(data_dir)):
        manifest = records.read_manifest(data_dir)
        holdout = kwargs.get("holdout")
        found = (manifest.get("source"), manifest.get("holdout", {}).get("fraction"))
        wanted = (source, float(holdout) if holdout else None)
        if found != wanted:
            raise DataError(
                f"{data_dir} holds records of source={found[0]!r} holdout={found[1]}, not "
                f"source={wanted[0]!r} holdout={wanted[1]}: give another data directory, "
                "or remove that one"
            )
        return manifest
    log.info("writing TFRecords (%s) to %s", source, data_dir)
    return make_tfrecords(source, data_dir, progress=progress, **kwargs)
