"""Resume cost of the training input pipeline: time to the first batch and peak RSS
at several positions of the epoch, with and without the shuffle window's byte budget.

  python benchmarks/input_resume.py [--data_dir=DIR] [--records=100000] [--shards=64]
      [--batch_size=512] [--positions=0,0.01,0.9] [--unbounded_positions=0.01,0.9]
      [--repeats=1] [--output=benchmarks/results/input_resume.json]

Writes (or reuses, with --data_dir holding a manifest of at least --records records) a
`train` split of --records synthetic 224 x 224 JPEGs (benchmarks/make_tfrecords_speed.py's
images, quality 90, about 23 KB) in --shards shards, with 21,843 classes (ImageNet-21k's),
as `keras_vit_data.writer.serialize_example` writes records (the bytes make_tfrecords
writes), one process per core. Without --data_dir the split goes to a temporary
folder under /tmp, deleted at the end (--keep keeps it and prints where).

Then, for each resume position p (a fraction of the epoch), in a fresh subprocess (so
that the peak RSS, `getrusage(RUSAGE_SELF).ru_maxrss`, is that run's own), builds
`input_pipeline.train_dataset(data_dir, spec, batch_size=B, start_step=p * N // B)` with
the input settings of configs/vit_b16_i21k.py as trainers/train_config.resolve gives them
(`InputSpec.from_config`: 224 px, inception crop + flip, shuffle_buffer 250,000, the
default shuffle_bytes of 1 GiB) and times building it and reading its first batch.
The same at --unbounded_positions with shuffle_bytes=0 (no byte limit: the window is
the record count, here the whole epoch), to show what the budget saves.

The split's start-up CRC scan (done when a split is below input.verify_max_bytes, 4 GiB)
is the same at every position and is not what is measured: the runs set
verify_max_bytes=0, as an ImageNet-21k-sized split (about 1.3 TB) is never scanned;
one more run at position 0 keeps the config's limit, to show what the scan costs.
The shards are read once before the runs, so every run reads them from the page cache
(a cold read from disk is not measured). Prints and writes JSON that names the machine
(cli/machine.py) and the load average of every run: on a shared 2-core machine,
compare the runs of one invocation, not figures of different ones; --repeats runs
every case that many times, in rounds, and the summary gives medians and ranges.
"""

import argparse
import dataclasses
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

I21K_CLASSES = 21_843


def _write_shards(args):
    """Worker: writes shards `indices` of `num_shards`, `counts[i]` records each;
    returns [(index, records, bytes)]."""
    data_dir, indices, num_shards, counts, seed = args
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    from keras_vit_benchmarks.make_tfrecords_speed import synthetic_image
    from keras_vit_data import records, writer

    done = []
    for s in indices:
        rng = np.random.default_rng([seed, s])
        path = os.path.join(data_dir, records.shard_name("train", s, num_shards))
        total = 0
        with tf.io.TFRecordWriter(path) as w:
            for _ in range(counts[s]):
                jpeg = tf.io.encode_jpeg(synthetic_image(rng), quality=90).numpy()
                total += len(jpeg)
                w.write(writer.serialize_example(jpeg, int(rng.integers(I21K_CLASSES))))
        done.append((s, counts[s], total))
    return done


def write_synthetic_split(data_dir, num_records, num_shards, workers=None, seed=0):
    """Writes a `train` split of `num_records` synthetic 224-px JPEG records in
    `num_shards` shards and its manifest.json (as make_tfrecords writes them) into
    `data_dir`; returns {"seconds", "mean_jpeg_bytes", "bytes"}."""
    from keras_vit_data import records

    workers = workers or len(os.sched_getaffinity(0))
    os.makedirs(data_dir, exist_ok=True)
    base, extra = divmod(num_records, num_shards)
    counts = [base + (s < extra) for s in range(num_shards)]
    start = time.perf_counter()
    jobs = [
        (data_dir, list(range(w, num_shards, workers)), num_shards, counts, seed)
        for w in range(workers)
    ]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        written = sorted(x for part in pool.map(_write_shards, jobs) for x in part)
    seconds = time.perf_counter() - start
    shards = [
        {"file": records.shard_name("train", s, num_shards), "count": n} for s, n, _ in written
    ]
    records.write_manifest(
        data_dir,
        {
            "source": "synthetic 224 px JPEGs (benchmarks/input_resume.py)",
            "format": "tf.train.Example",
            "features": dict(records.FEATURE_DESCRIPTIONS),
            "num_classes": I21K_CLASSES,
            "class_names": [f"c{i:05d}" for i in range(I21K_CLASSES)],
            "multi_label": False,
            "splits": {"train": {"count": num_records, "shards": shards}},
        },
    )
    jpeg_bytes = sum(b for _, _, b in written)
    return {"seconds": seconds, "mean_jpeg_bytes": jpeg_bytes / num_records, "workers": workers}


def ensure_split(data_dir, num_records, num_shards):
    """Reuses `data_dir` when its manifest's train split has >= num_records records;
    else writes it. Returns the writing figures (None when reused)."""
    path = os.path.join(data_dir, "manifest.json")
    if os.path.exists(path):
        with open(path) as f:
            count = json.load(f)["splits"].get("train", {}).get("count", 0)
        if count >= num_records:
            return None
        raise SystemExit(
            f"{data_dir} holds {count} train records, fewer than --records={num_records}"
        )
    return write_synthetic_split(data_dir, num_records, num_shards)


def read_shards(data_dir):
    """(shards, total bytes) of `data_dir`, each read once (into the page cache)."""
    total, shards = 0, 0
    for name in sorted(os.listdir(data_dir)):
        if name.endswith(".tfrecord"):
            shards += 1
            with open(os.path.join(data_dir, name), "rb") as f:
                while chunk := f.read(64 << 20):
                    total += len(chunk)
    return shards, total


def i21k_spec(data_dir, **replace):
    """configs/vit_b16_i21k.py's InputSpec as a pretraining run builds it, for the
    data in `data_dir`, with fields replaced as given."""
    from keras_vit_configs import vit_b16_i21k
    from keras_vit_trainers import input_pipeline, input_spec, objectives, train_config

    config = train_config.resolve(vit_b16_i21k.get_config(), "pretrain")
    manifest = input_pipeline.read_manifest(data_dir)
    spec = input_spec.InputSpec.from_config(
        config,
        config.num_classes or int(manifest["num_classes"]),
        bool(manifest.get("multi_label", False)),
        objectives.get(config.objective),
    )
    return dataclasses.replace(spec, **replace), config


def records_before_first_batch(spec, share, batch_size):
    """What `records_stream` reads before the first batch: the records of the resume
    window's group that precede the window (read and skipped), the window (read whole),
    and of these the records already consumed (skipped, not decoded)."""
    import tensorflow as tf

    n = sum(c for _, _, c in share.files)
    cycle = min(16, len(share.files))
    order = tf.random.experimental.stateless_shuffle(
        tf.range(len(share.files), dtype=tf.int64), seed=[int(spec.seed), share.start_epoch]
    ).numpy()
    counts = np.array([share.files[i][2] for i in order])
    group_ends = np.cumsum([counts[g : g + cycle].sum() for g in range(0, len(counts), cycle)])
    window = max(1, int(share.window))
    resume_from = (share.skip // window) * window
    group = int(np.sum(group_ends <= resume_from))
    group_start = int(group_ends[group] - counts[group * cycle : (group + 1) * cycle].sum())
    window_records = min(window, n - resume_from)
    return {
        "window": window,
        "resume_window_start": resume_from,
        "group_records_skipped": resume_from - group_start,
        "window_records_read": window_records,
        "consumed_records_skipped": share.skip - resume_from,
        "records_read": resume_from - group_start + window_records,
        "records_decoded_at_least": batch_size,
    }


def child(a):
    """One measurement, in this fresh process: prints one JSON line."""
    t0 = time.perf_counter()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from keras_vit_trainers import input_pipeline

    t_import = time.perf_counter() - t0
    rss_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    replace = {}
    if a.shuffle_bytes is not None:
        replace["shuffle_bytes"] = a.shuffle_bytes
    if not a.scan:
        replace["verify_max_bytes"] = 0
    spec, config = i21k_spec(a.data_dir, **replace)
    num_records = input_pipeline.read_manifest(a.data_dir)["splits"]["train"]["count"]
    position = int(round(a.position * num_records))
    start_step = position // a.batch_size
    t1 = time.perf_counter()
    ds = input_pipeline.train_dataset(
        a.data_dir, spec, batch_size=a.batch_size, start_step=start_step
    )
    t2 = time.perf_counter()
    images, labels = next(iter(ds))
    t3 = time.perf_counter()
    assert images.shape == (a.batch_size, 224, 224, 3), images.shape
    info = input_pipeline.first_examples(
        input_pipeline.get_split(a.data_dir, spec.split, strict=False, verify_max_bytes=0), 0
    )
    share = input_pipeline.pipeline_share(
        info,
        spec,
        batch_size=a.batch_size,
        global_batch_size=None,
        start_step=start_step,
        input_context=None,
    )
    result = {
        "position": a.position,
        "start_step": start_step,
        "examples_skipped": share.skip,
        "shuffle_buffer": spec.shuffle_buffer,
        "shuffle_bytes": spec.shuffle_bytes,
        "verify_max_bytes": spec.verify_max_bytes,
        **records_before_first_batch(spec, share, a.batch_size),
        "build_seconds": t2 - t1,
        "first_batch_seconds": t3 - t2,
        "time_to_first_batch_seconds": t3 - t1,
        "import_seconds": t_import,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_after_import_mb": rss_import / 1024,
        "cpu_seconds": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
        "loadavg": os.getloadavg(),
        "tensorflow": tf.__version__,
    }
    print("RESULT " + json.dumps(result), flush=True)


def run_child(data_dir, position, batch_size, shuffle_bytes=None, scan=False):
    cmd = [
        sys.executable,
        "-m",
        "keras_vit_benchmarks.input_resume",
        "--child",
        f"--data_dir={data_dir}",
        f"--position={position}",
        f"--batch_size={batch_size}",
    ]
    if shuffle_bytes is not None:
        cmd.append(f"--shuffle_bytes={shuffle_bytes}")
    if scan:
        cmd.append("--scan")
    out = subprocess.run(cmd, capture_output=True, text=True)
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    if out.returncode or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT ") :])
    print(json.dumps(result), flush=True)
    return result


def summarize(runs):
    """Per case (position, shuffle_bytes, verify_max_bytes): the median and the range
    over the rounds of the time to the first batch and the peak RSS."""
    cases = {}
    for run in runs:
        key = (run["position"], run["shuffle_bytes"], run["verify_max_bytes"])
        cases.setdefault(key, []).append(run)
    out = []
    for (position, shuffle_bytes, verify), same in cases.items():
        times = [r["time_to_first_batch_seconds"] for r in same]
        rss = [r["peak_rss_mb"] for r in same]
        out.append(
            {
                "position": position,
                "shuffle_bytes": shuffle_bytes,
                "verify_max_bytes": verify,
                "window": same[0]["window"],
                "records_read": same[0]["records_read"],
                "rounds": len(same),
                "time_to_first_batch_seconds_median": float(np.median(times)),
                "time_to_first_batch_seconds_range": [min(times), max(times)],
                "peak_rss_mb_median": float(np.median(rss)),
                "peak_rss_mb_range": [min(rss), max(rss)],
            }
        )
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data_dir", default=None)
    p.add_argument("--keep", action="store_true", help="keep the written split")
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--shards", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=512)
    p.add_argument("--positions", default="0,0.01,0.9")
    p.add_argument("--unbounded_positions", default="0.01,0.9")
    p.add_argument("--repeats", type=int, default=1, help="rounds of every case")
    p.add_argument("--output", default=None)
    # one measurement (run by main in a subprocess)
    p.add_argument("--child", action="store_true")
    p.add_argument("--position", type=float, default=0.0)
    p.add_argument("--shuffle_bytes", type=int, default=None)
    p.add_argument("--scan", action="store_true")
    a = p.parse_args()
    if a.child:
        return child(a)
    if a.records < 50_000:
        raise SystemExit("--records: at least 50,000 (the benchmark's size)")
    from keras_vit_cli.machine import machine_info, report, source_commit

    tmp = None
    data_dir = a.data_dir
    if data_dir is None:
        tmp = tempfile.mkdtemp(prefix="input_resume_", dir="/tmp")
        data_dir = os.path.join(tmp, "data")
    try:
        written = ensure_split(data_dir, a.records, a.shards)
        if written:
            print(f"wrote {a.records} records in {written['seconds']:.0f} s", flush=True)
        t = time.perf_counter()
        shards, total = read_shards(data_dir)
        read_seconds = time.perf_counter() - t
        with open(os.path.join(data_dir, "manifest.json")) as f:
            num_records = json.load(f)["splits"]["train"]["count"]
        cases = [(float(x), None, False) for x in a.positions.split(",") if x]
        cases += [(float(x), 0, False) for x in a.unbounded_positions.split(",") if x]
        cases.append((0.0, None, True))
        runs = []
        for r in range(a.repeats):  # rounds: every case once per round, in turn
            for position, shuffle_bytes, scan in cases:
                run = run_child(data_dir, position, a.batch_size, shuffle_bytes, scan)
                runs.append({"round": r, **run})
    finally:
        if tmp and not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp:
            print(f"kept {data_dir}")
    result = {
        "benchmark": "input_resume",
        "config": "configs/vit_b16_i21k.py",
        "records": num_records,
        "shards": shards,
        "split_bytes": total,
        "mean_record_bytes": total / num_records,
        "image_size": 224,
        "batch_size": a.batch_size,
        "cycle_files": 16,
        "written": written,
        "page_cache_read_seconds": read_seconds,
        "summary": summarize(runs),
        "runs": runs,
        "source_commit": source_commit(),
        "command": " ".join(["python", "benchmarks/input_resume.py", *sys.argv[1:]]),
        "loadavg": os.getloadavg(),
        "machine": machine_info(),
    }
    report(result, a.output)


if __name__ == "__main__":
    main()
