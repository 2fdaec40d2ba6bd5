"""An exported ONNX file: the names of its input and outputs, and what reading it
tells (its operators, constants and opset; the report's facts of the file).

The file takes `images` (1, H, W, C), or (batch, H, W, C) with a dynamic batch
axis, float32 pixels in [0, 255], and returns what the model computes, named as
in the SavedModel (`deploy/serving.py`, `output_names`): a classifier ending in
logits `logits` (B, K) and `probabilities` (B, K) float32 (their softmax); one
with `classifier_activation='softmax'` its `probabilities`, with another
activation its `scores`; a headless model `features` (B, D) or `feature_map`
(B, rows, cols, D)."""

import collections
import importlib
import os

from keras_vit_deploy.onnx_packages import require_packages

INPUT_NAME = "images"
OUTPUT_NAMES = ("logits", "probabilities")  # a classifier ending in logits (`output_names`)
_STANDARD_DOMAINS = ("", "ai.onnx")


def output_names(spec):
    """The ONNX file's outputs for `serving.ModelOutputs` `spec`, in order."""
    return OUTPUT_NAMES if spec.softmax else (spec.name,)


def _load(path):
    return require_packages()["onnx"].load(path)


def _graph_nodes(graph):
    """Every node of `graph` and of its subgraphs (If/Loop bodies)."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else attribute.graphs:
                yield from _graph_nodes(subgraph)


def operator_counts(path):
    """{operator: count} over the graph and its subgraphs; operators outside the
    standard ONNX domains appear as 'domain:Op'."""
    counts = collections.Counter(
        node.op_type if node.domain in _STANDARD_DOMAINS else f"{node.domain}:{node.op_type}"
        for node in _graph_nodes(_load(path).graph)
    )
    return dict(sorted(counts.items()))


def non_standard_ops(counts):
    """The names in `operator_counts(...)` outside the standard ONNX domains."""
    return [name for name in counts if ":" in name]


def constant_bytes(path):
    """Bytes of the graph's initializers (weights and other constants)."""
    numpy_helper = importlib.import_module("onnx.numpy_helper")
    return int(sum(numpy_helper.to_array(init).nbytes for init in _load(path).graph.initializer))


def opset_of(path):
    """The standard-domain opset the file declares."""
    for entry in _load(path).opset_import:
        if entry.domain in _STANDARD_DOMAINS:
            return int(entry.version)
    return None


def file_facts(path, precision):
    """What the report (`report.build_report`) says of the ONNX file `path`,
    exported at `precision`: its size, constants, opset and operators."""
    counts = operator_counts(path)
    return {
        "precision": precision,
        "file_size_bytes": os.path.getsize(path),
        "constant_bytes": constant_bytes(path),
        "opset": opset_of(path),
        "ops": sorted(counts),
        "op_counts": counts,
        "standard_ops_only": not non_standard_ops(counts),
    }
