"""data/writer.py at scale: the parallel checks write the serial writer's files byte for
byte (good, undecodable and over-the-limit images; arrays), JPEG and PNG bytes pass
through unchanged, and --num_tasks tasks plus --merge write the files of one run."""

import hashlib
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from test_make_tfrecords import run_main
from test_pixel_limit import grey_png

from keras_vit_data import records, writer
from keras_vit_data.records import DataError


def _files(d):
    return {
        f: hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest()
        for f in sorted(os.listdir(d))
    }


def _image(seed, size=(9, 7)):
    return np.random.default_rng(seed).integers(0, 256, (*size, 3), np.uint8)


@pytest.fixture(scope="module")
def mixed_folder(tmp_path_factory):
    """Two classes of PNGs and JPEGs, with a file that does not decode, a JPEG cut
    short, and a PNG that declares more pixels than --max_pixels=5000 allows."""
    root = tmp_path_factory.mktemp("mixed")
    for c, cls in enumerate(("cat", "dog")):
        (root / cls).mkdir()
        for i in range(13):
            image = _image(100 * c + i, (8 + i, 6 + c))
            encode = tf.io.encode_jpeg if i % 3 == 0 else tf.io.encode_png
            ext = "jpg" if i % 3 == 0 else "png"
            (root / cls / f"{i:02d}.{ext}").write_bytes(encode(image).numpy())
    (root / "cat" / "junk.jpg").write_bytes(b"junk\n")
    (root / "dog" / "cut.jpg").write_bytes(tf.io.encode_jpeg(_image(7, (16, 16))).numpy()[:200])
    (root / "dog" / "big.png").write_bytes(grey_png(100, 80))  # 8000 pixels
    return root


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_parallel_writer_writes_the_serial_writers_files(tmp_path, mixed_folder, workers):
    kwargs = dict(examples_per_shard=7, progress=False, max_pixels=5000, seed=4)
    serial = writer.make_tfrecords(
        f"folder:{mixed_folder}", str(tmp_path / "s"), workers=0, **kwargs
    )
    parallel = writer.make_tfrecords(
        f"folder:{mixed_folder}", str(tmp_path / "p"), workers=workers, **kwargs
    )
    assert parallel == serial
    assert _files(tmp_path / "p") == _files(tmp_path / "s")
    split = serial["splits"]["train"]
    assert split["skipped"] == 3 and split["count"] == 26
    assert sorted(os.path.basename(p) for p in split["skipped_examples"]) == [
        "big.png",
        "cut.jpg",
        "junk.jpg",
    ]


def test_parallel_writer_encodes_arrays_as_the_serial_writer(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "CHUNK_EXAMPLES", 5)  # several chunks, one ahead
    images = [_image(i, (4 + i % 5, 3 + i % 4)) for i in range(23)]
    images[3] = images[3][..., 0]  # (H, W): one grey channel
    images[8] = np.zeros((100, 100), np.uint8)  # above max_pixels
    labels = [[i % 3, (i + 1) % 3] for i in range(23)]

    def source():
        return ({"train": (23, zip(images, labels))}, ["a", "b", "c"], True)

    kwargs = dict(examples_per_shard=6, progress=False, max_pixels=2000)
    a = writer.make_tfrecords(source(), str(tmp_path / "s"), workers=0, **kwargs)
    b = writer.make_tfrecords(source(), str(tmp_path / "p"), workers=2, **kwargs)
    assert a == b and a["splits"]["train"]["skipped_examples"] == ["train example 8"]
    assert _files(tmp_path / "p") == _files(tmp_path / "s")


def test_fast_serialization_is_the_record_formats():
    for encoded, labels in [
        (b"abc", [1, 2]),
        (b"x" * 300, 5),
        (b"", -1),
        (b"y" * 70_000, np.int64(3)),
        (b"z", []),
        (b"q", np.array([0, 2**40, -5])),
        (b"\x89PNG", np.uint8(9)),
    ]:
        assert writer.serialize_example(encoded, labels) == records.serialize_example(
            encoded, labels
        )


def test_jpeg_and_png_bytes_are_written_unchanged(tmp_path, mixed_folder):
    manifest = writer.make_tfrecords(
        f"folder:{mixed_folder}", str(tmp_path), progress=False, max_pixels=5000, workers=2
    )
    written = [
        records.parse_example(r)[0].numpy()
        for shard in manifest["splits"]["train"]["shards"]
        for r in tf.data.TFRecordDataset(str(tmp_path / shard["file"]))
    ]
    files = {
        p.read_bytes()
        for p in mixed_folder.rglob("*")
        if p.is_file() and p.name not in ("junk.jpg", "cut.jpg", "big.png")
    }
    assert len(written) == 26 and set(written) == files
    assert any(w[:3] == b"\xff\xd8\xff" for w in written)


def _task_runs(tmp_path, root, num_tasks, out, extra=()):
    for i in range(num_tasks):
        run_main(
            f"--source=folder:{root}",
            f"--output_dir={out}",
            "--examples_per_shard=4",
            "--noprogress",
            f"--num_tasks={num_tasks}",
            f"--task_index={i}",
            *extra,
        )
        with pytest.raises(DataError, match="no manifest.json"):
            records.read_manifest(str(out))  # the readers refuse the folder until --merge


def test_tasks_then_merge_write_the_files_of_one_run(tmp_path, capsys):
    root = tmp_path / "images"
    for split, n in (("train", 11), ("test", 5)):
        for c, cls in enumerate(("cat", "dog")):
            (root / split / cls).mkdir(parents=True)
            for i in range(n):
                png = tf.io.encode_png(_image(1000 * c + i + 50 * n)).numpy()
                (root / split / cls / f"{i}.png").write_bytes(png)
    one = tmp_path / "one"
    run_main(
        f"--source=folder:{root}", f"--output_dir={one}", "--examples_per_shard=4", "--noprogress"
    )
    tasks = tmp_path / "tasks"
    _task_runs(tmp_path, root, 3, tasks)
    assert "once all tasks are done, run --num_tasks=3 --merge" in capsys.readouterr().out
    assert len(list(tasks.glob("manifest.task-*-of-00003.json"))) == 3
    run_main(f"--output_dir={tasks}", "--num_tasks=3", "--merge")
    assert "Merged 3 tasks" in capsys.readouterr().out
    assert _files(tasks) == _files(one)  # shards, and manifest.json; the partials are gone
    manifest = records.read_manifest(str(tasks))
    assert [s["count"] for s in manifest["splits"]["train"]["shards"]] == [4, 4, 4, 4, 4, 2]


def test_tasks_with_skipped_images_and_a_missing_task(tmp_path, mixed_folder, capsys):
    out = tmp_path / "tasks"
    _task_runs(tmp_path, mixed_folder, 3, out, ["--max_pixels=5000"])
    one = writer.make_tfrecords(
        f"folder:{mixed_folder}", str(tmp_path / "one"), 4, progress=False, max_pixels=5000
    )
    os.remove(out / writer.partial_manifest_name(1, 3))
    with pytest.raises(SystemExit):
        run_main(f"--output_dir={out}", "--num_tasks=3", "--merge")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no partial manifest of task(s) 1 of --num_tasks=3" in err[0]
    run_main(
        f"--source=folder:{mixed_folder}",
        f"--output_dir={out}",
        "--examples_per_shard=4",
        "--noprogress",
        "--max_pixels=5000",
        "--num_tasks=3",
        "--task_index=1",
    )
    merged = writer.merge_tasks(str(out), 3)
    # The same images in the same order and the same skips; each task's shards keep
    # the images of their own slice (shorter where an image was skipped).
    a, b = merged["splits"]["train"], one["splits"]["train"]
    assert (a["count"], a["skipped"], a["skipped_examples"]) == (
        b["count"],
        b["skipped"],
        b["skipped_examples"],
    )
    assert len(a["shards"]) == len(b["shards"])

    def images(d, split):
        return [
            r.numpy()
            for s in split["shards"]
            for r in tf.data.TFRecordDataset(os.path.join(d, s["file"]))
        ]

    assert images(out, a) == images(tmp_path / "one", b)


def test_merge_refuses_tasks_run_with_other_flags(tmp_path, mixed_folder):
    out = tmp_path / "tasks"
    _task_runs(tmp_path, mixed_folder, 2, out)
    partial = out / writer.partial_manifest_name(1, 2)
    manifest = json.loads(partial.read_text())
    manifest["max_pixels"] = 5
    partial.write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"task 1 was run with other settings .*max_pixels"):
        writer.merge_tasks(str(out), 2)


def test_the_progress_bar_shows_a_rate_and_an_eta(tmp_path, mixed_folder, monkeypatch):
    import io

    from keras_vit_cli import console

    stream = io.StringIO()

    class Captured(console.Progress):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, stream=stream, every_seconds=0, **kwargs)

    monkeypatch.setattr(writer.console, "Progress", Captured)
    monkeypatch.setattr(writer, "CHUNK_EXAMPLES", 8)
    writer.make_tfrecords(f"folder:{mixed_folder}", str(tmp_path), workers=2, max_pixels=5000)
    lines = stream.getvalue().splitlines()
    assert lines[-1].startswith("writing train: 29/29 images (100%)")
    assert all(" images/s" in line and "ETA " in line for line in lines[1:])
