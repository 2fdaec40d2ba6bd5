"""TensorFlow profiler's per-op statistics, read from a profile directory.

TensorFlow has no public reader for them: `op_stats` goes through
`tensorflow.python.profiler.internal._pywrap_profiler_plugin` (what TensorBoard's profile
plugin calls), a private module that may move between TensorFlow releases, so it is used
here alone; tests/test_profiler_stats.py checks that it still reads a profile (tested with
TensorFlow 2.21).
"""

import glob
import json
import os


def op_stats(logdir):
    """The profiler's per-op statistics under `logdir`: one dict per TensorFlow op run
    on the host (type, operation name, occurrences, total self time in µs), from its
    `framework_op_stats` table; the profiler's IDLE row is left out."""
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin

    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        raise RuntimeError(f"the profiler wrote no .xplane.pb under {logdir}")
    data, ok = plugin.xspace_to_tools_data(paths, "framework_op_stats")
    if not ok:
        raise RuntimeError(f"could not read op statistics from {paths}: {data[:200]!r}")
    table = json.loads(data)[0]
    columns = [column["id"] for column in table["cols"]]
    for row in table["rows"]:
        values = dict(zip(columns, (cell.get("v") for cell in row["c"])))
        if values["type"] != "IDLE":
            yield values
