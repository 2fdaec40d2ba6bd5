"""TF Serving's REST predict API (`POST /v1/models/NAME:predict`): the JSON bodies a
client sends, and how the model server turns them into the signature's tensors and
its outputs back into JSON (tensorflow_serving/util/json_tensor.cc), in a few lines
of numpy rather than `tensorflow-serving-api` (which needs the full tensorflow).

A request is a JSON object:

- `"signature_name"` (optional, default `serving_default`) picks the signature;
- `"instances"` (row format): a non-empty list, one item per batch element; a
  signature with one input takes the values themselves, one with several takes an
  object per item with exactly its input names as keys (all items the same shape);
- or `"inputs"` (columnar format): the whole batch, a value or an object of named
  inputs. Sending both (or neither) is an error;
- bytes (encoded images, serialized tf.train.Example) travel as `{"b64": "..."}`,
  an object whose only key is `b64`; a plain JSON string is its UTF-8 bytes.

The answer is `{"predictions": [...]}` (row format: one item per batch element, an
object of the outputs when there are several) or `{"outputs": ...}` (columnar: the
whole tensors, an object when there are several); `{"error": "..."}` on failure.
String outputs are JSON strings, or `{"b64": ...}` where the output's name ends in
`_bytes`. See docs/deployment.md, "Serving with TF Serving".

Where the server lets a body through, `decode_request` may be stricter, never more
lenient: it also refuses keys of a columnar "inputs" object that are not inputs of
the signature, and integers outside the input dtype's range.

    body = rest.predict_request([png_bytes])          # serving_default, row format
    rest.predict(tf.saved_model.load(path), body)     # what TF Serving would answer
    rest.decode_response(answer)["top_k_names"]       # (B, k) array
"""

import base64
import binascii
import dataclasses
import json

import numpy as np

from keras_vit_deploy.serving import SERVING_DEFAULT

B64 = "b64"
BYTES_SUFFIX = "_bytes"  # string outputs sent as {"b64": ...}


class RequestError(ValueError):
    """A body the model server refuses (HTTP 400), or the error it answered."""


def b64(data):
    """bytes -> {"b64": base64 text}, the JSON form of a binary value."""
    return {B64: base64.b64encode(bytes(data)).decode("ascii")}


def predict_request(values, signature_name=SERVING_DEFAULT, input_name=None, columnar=False):
    """The body of a predict request to a signature of one input.

    Args:
        values: a batch: a list of bytes (encoded images, serialized Examples; each
            sent as {"b64": ...}) or an array (B, ...) of numbers (pixels).
        signature_name: omitted from the body when it is serving_default.
        input_name: None: the values alone; else named ({input_name: value} per
            instance, or {"inputs": {input_name: batch}}).
        columnar: "inputs" (the batch as one tensor) rather than "instances".
    """
    if isinstance(values, np.ndarray):
        batch = values.tolist()
    else:
        batch = [b64(value) for value in values]
    body = {} if signature_name == SERVING_DEFAULT else {"signature_name": signature_name}
    if columnar:
        body["inputs"] = batch if input_name is None else {input_name: batch}
    else:
        body["instances"] = batch if input_name is None else [{input_name: v} for v in batch]
    return body


# -- the model server's side: JSON -> tensors -> JSON ------------------------------


@dataclasses.dataclass(frozen=True)
class Request:
    """A decoded predict request: the signature, whether it came columnar
    ("inputs", answered with "outputs") and its tensors by input name."""

    signature_name: str
    columnar: bool
    inputs: dict


def signature_inputs(loaded):
    """{signature: {input name: numpy dtype (object for tf.string)}} of a SavedModel
    loaded with tf.saved_model.load."""
    return {
        name: {
            key: np.dtype(spec.dtype.as_numpy_dtype)
            for key, spec in function.structured_input_signature[1].items()
        }
        for name, function in loaded.signatures.items()
    }


def _is_b64(value):
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(B64), str)


def _is_named(value):
    """An object of named inputs (not a {"b64": ...} value)."""
    return isinstance(value, dict) and not _is_b64(value)


def _scalar(value, dtype, where):
    """One JSON leaf value at `where` (a path like instances[0][3]) -> a value of `dtype`."""
    if dtype.kind == "O":  # tf.string
        if isinstance(value, str):
            return value.encode("utf-8")
        if _is_b64(value):
            text = value[B64]
            try:
                return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
            except binascii.Error as e:
                raise RequestError(f"{where}: invalid base64 data ({e}).") from None
        if isinstance(value, dict):
            raise RequestError(
                f'{where}: a binary value is {{"b64": "<base64 text>"}} with \'b64\' its '
                f"only key; got an object with keys {', '.join(map(repr, value))}."
            )
        raise RequestError(f"{where}: {json.dumps(value)} is not a string (the input is bytes).")
    if isinstance(value, bool) != (dtype == np.bool_) or not isinstance(value, (int, float)):
        raise RequestError(f"{where}: {json.dumps(value)} is not a {dtype.name} value.")
    if dtype.kind == "f":
        exact = 2 ** (np.finfo(dtype).nmant + 1)  # integers beyond it are rounded
        if isinstance(value, int) and abs(value) > exact:
            raise RequestError(f"{where}: {value} is not exact as {dtype.name}.")
        if np.isfinite(value) and abs(value) > float(np.finfo(dtype).max):
            raise RequestError(f"{where}: {value} is out of the {dtype.name} range.")
    elif dtype.kind in "iu":
        if not isinstance(value, int):
            raise RequestError(f"{where}: {json.dumps(value)} is not an integer ({dtype.name}).")
        limits = np.iinfo(dtype)
        if not limits.min <= value <= limits.max:
            raise RequestError(
                f"{where}: {value} is out of the {dtype.name} range [{limits.min}, {limits.max}]."
            )
    elif dtype != np.bool_:
        raise RequestError(f"{where}: inputs of dtype {dtype.name} are not supported.")
    return value


def _tensor(value, dtype, where):
    """A JSON value -> an array of `dtype`, its shape given by the first items of
    its nested lists (every list checked against it)."""
    shape, first = [], value
    while isinstance(first, list):
        shape.append(len(first))
        first = first[0] if first else None
    flat = []
    _walk(value, shape, 0, where, dtype, flat)
    return np.array(flat, dtype=dtype).reshape(shape)


def _walk(value, shape, level, where, dtype, flat):
    if isinstance(value, list):
        if level == len(shape) or len(value) != shape[level]:
            expected = f"{shape[level]} values" if level < len(shape) else "a value, not a list"
            raise RequestError(
                f"{where}: a list of {len(value)} values where the first items give "
                f"{expected} (nested lists of one tensor must all have the same lengths)."
            )
        for i, item in enumerate(value):
            _walk(item, shape, level + 1, f"{where}[{i}]", dtype, flat)
    elif level != len(shape):
        raise RequestError(
            f"{where}: a single value where the first items give a list "
            f"(a tensor of rank {len(shape)})."
        )
    else:
        flat.append(_scalar(value, dtype, where))


def _row_inputs(instances, inputs, signature):
    if not isinstance(instances, list) or not instances:
        raise RequestError("'instances' must be a non-empty list, one item per batch element.")
    names = sorted(inputs)
    named = _is_named(instances[0])
    if not named and len(names) > 1:
        raise RequestError(
            f"'instances' holds plain values, but signature '{signature}' takes several "
            f"inputs ({', '.join(names)}): send one object per instance with those keys."
        )
    columns = {name: [] for name in names}
    for i, item in enumerate(instances):
        if _is_named(item) != named:
            kind = "an object of named inputs" if named else "a value"
            raise RequestError(f"instances[{i}] is not {kind} like instances[0].")
        if named and sorted(item) != names:
            raise RequestError(
                f"instances[{i}] has the keys {', '.join(sorted(item))}; signature "
                f"'{signature}' takes {', '.join(names)}."
            )
        for name in names:
            where = f"instances[{i}]['{name}']" if named else f"instances[{i}]"
            tensor = _tensor(item[name] if named else item, inputs[name], where)
            if columns[name] and tensor.shape != columns[name][0].shape:
                raise RequestError(
                    f"{where} has shape {tensor.shape}, instances[0] {columns[name][0].shape}: "
                    "all instances must have the same shape."
                )
            columns[name].append(tensor)
    return {name: np.stack(column) for name, column in columns.items()}


def _columnar_inputs(value, inputs, signature):
    names = sorted(inputs)
    if not _is_named(value):
        if len(names) > 1:
            raise RequestError(
                f"'inputs' is a plain value, but signature '{signature}' takes several "
                f"inputs ({', '.join(names)}): send an object with those keys."
            )
        return {names[0]: _tensor(value, inputs[names[0]], "inputs")}
    if sorted(value) != names:
        raise RequestError(
            f"'inputs' has the keys {', '.join(sorted(value))}; signature '{signature}' "
            f"takes {', '.join(names)}."
        )
    return {name: _tensor(value[name], inputs[name], f"inputs['{name}']") for name in names}


def decode_request(body, signatures):
    """A predict request body (JSON text, bytes or the parsed object) -> `Request`,
    decoded as the model server does; RequestError naming the problem otherwise.

    Args:
        signatures: {signature name: {input name: numpy dtype}} (`signature_inputs`).
    """
    if isinstance(body, (str, bytes)):
        try:
            body = json.loads(body)  # NaN and Infinity allowed, as the server does
        except ValueError as e:
            raise RequestError(f"the request body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object, got {type(body).__name__}.")
    signature = body.get("signature_name", SERVING_DEFAULT)
    if not isinstance(signature, str):
        raise RequestError(f"'signature_name' must be a string, got {json.dumps(signature)}.")
    if signature not in signatures:
        raise RequestError(
            f"signature '{signature}' not found; the model has {', '.join(sorted(signatures))}."
        )
    if ("instances" in body) == ("inputs" in body):
        raise RequestError(
            "the request must have exactly one of 'instances' (row format) and 'inputs' "
            f"(columnar format); it has {'both' if 'inputs' in body else 'neither'}."
        )
    inputs = signatures[signature]
    if "inputs" in body:
        return Request(signature, True, _columnar_inputs(body["inputs"], inputs, signature))
    return Request(signature, False, _row_inputs(body["instances"], inputs, signature))


def _json_value(value, name):
    """An output (an array, a numpy scalar or bytes) -> nested lists of JSON values."""
    if isinstance(value, bytes):
        return b64(value) if name.endswith(BYTES_SUFFIX) else value.decode("utf-8")
    if isinstance(value, np.ndarray) and value.dtype.kind == "O":
        return (
            [_json_value(item, name) for item in value]
            if value.ndim
            else _json_value(value.item(), name)
        )
    return value.tolist()  # float32 -> the same value as a Python float, exactly


def encode_response(outputs, columnar):
    """The outputs of a signature ({name: array (B, ...)}) -> the response object:
    {"outputs": ...} for a columnar request, else {"predictions": [...]}; the names
    are dropped when there is only one output."""
    outputs = {name: np.asarray(value) for name, value in outputs.items()}
    if columnar:
        values = {name: _json_value(value, name) for name, value in outputs.items()}
        return {"outputs": values if len(values) > 1 else next(iter(values.values()))}
    sizes = {name: value.shape[0] if value.ndim else None for name, value in outputs.items()}
    if None in sizes.values() or len(set(sizes.values())) != 1:
        raise RequestError(
            f"outputs of different batch sizes {sizes} have no row format; send 'inputs'."
        )
    rows = [
        {name: _json_value(value[i], name) for name, value in outputs.items()}
        for i in range(next(iter(sizes.values())))
    ]
    if len(outputs) == 1:
        rows = [next(iter(row.values())) for row in rows]
    return {"predictions": rows}


def _dims(shape):
    return "x".join("?" if d is None else str(d) for d in shape)


def check_shapes(request, specs):
    """RequestError unless each of the request's tensors fits the shape of its input's
    TensorSpec (`specs`: {input name: tf.TensorSpec}, a signature's
    `structured_input_signature[1]`); a restored signature would raise a TypeError
    printing the whole tensor. Pixels whose channel count alone differs (a grey image
    for an RGB model) are named as such, with both counts."""
    where = "inputs" if request.columnar else "instances"
    for name, value in sorted(request.inputs.items()):
        shape = specs[name].shape
        if shape.is_compatible_with(value.shape):
            continue
        expected = shape.as_list()
        if (
            len(expected) == value.ndim == 4
            and shape[:-1].is_compatible_with(value.shape[:-1])
            and value.dtype.kind in "uf"
        ):
            raise RequestError(
                f"{where}: {value.shape[-1]}-channel images for signature "
                f"'{request.signature_name}', whose input '{name}' takes "
                f"{expected[-1]}-channel {_dims(expected[1:])} pixels (convert the images, "
                f"or send the encoded files to '{SERVING_DEFAULT}', which converts them)."
            )
        raise RequestError(
            f"{where}: input '{name}' of shape {_dims(value.shape)}; signature "
            f"'{request.signature_name}' takes {_dims(expected)} (? any size)."
        )


def predict(loaded, body):
    """What TF Serving answers to `body` for a SavedModel loaded with
    tf.saved_model.load, in process: the response object. RequestError for a body
    it refuses or whose tensors do not fit the signature's shapes (`check_shapes`);
    the signature's own errors (tf.errors.InvalidArgumentError) pass."""
    request = decode_request(body, signature_inputs(loaded))
    function = loaded.signatures[request.signature_name]
    check_shapes(request, function.structured_input_signature[1])
    outputs = function(**request.inputs)
    return encode_response(
        {name: value.numpy() for name, value in outputs.items()}, request.columnar
    )


def _from_json(value):
    """A JSON output value -> an array; {"b64": ...} values become bytes (an object
    array: numpy's bytes dtype would drop trailing NUL bytes)."""

    def plain(item):
        if _is_b64(item):
            return base64.b64decode(item[B64])
        return [plain(i) for i in item] if isinstance(item, list) else item

    value = plain(value)
    array = np.asarray(value)
    return np.array(value, dtype=object) if array.dtype.kind == "S" else array


def decode_response(body):
    """A predict response (JSON text, bytes or the parsed object) -> {output name:
    array} (one array when the model has one output, which the response leaves
    unnamed). RequestError with the server's message for an {"error": ...} answer."""
    if isinstance(body, (str, bytes)):
        body = json.loads(body)
    if not isinstance(body, dict) or not {"error", "predictions", "outputs"} & set(body):
        raise RequestError("the response has none of 'predictions', 'outputs' and 'error'.")
    if "error" in body:
        raise RequestError(body["error"])
    if "outputs" in body:
        value = body["outputs"]
        if _is_named(value):
            return {name: _from_json(v) for name, v in value.items()}
        return _from_json(value)
    rows = body["predictions"]
    if rows and all(_is_named(row) for row in rows):
        return {name: _from_json([row[name] for row in rows]) for name in rows[0]}
    return _from_json(rows)
