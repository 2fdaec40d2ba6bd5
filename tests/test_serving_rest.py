"""TF Serving's REST API (deploy/rest.py, tools/serve_request.py): the JSON bodies
docs/deployment.md shows, decoded as the model server decodes them and run through
the exported SavedModel's signatures, give the Keras model's classes and
probabilities; what the server refuses is refused naming the problem; the client
tool talks to a stand-in server on 127.0.0.1."""

import base64
import http.server
import json
import threading

import export_testing as et
import keras
import numpy as np
import pytest
import tensorflow as tf
from test_export_savedmodel import ATOL  # the SavedModel-vs-Keras bound, one owner

from keras_vit_deploy import rest, serving

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the export builds TensorFlow graphs"
)

NUM_IMAGES = 4
MODEL_NAME = "vit"
TOP_K = 3


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(Keras model, loaded SavedModel): the trained tiny classifier exported with
    the Fashion-MNIST class names."""
    model = et.tiny_classifier()
    directory = str(tmp_path_factory.mktemp("rest") / "vit" / "1")
    serving.export_saved_model(model, directory, et.CLASS_NAMES, TOP_K)
    return model, tf.saved_model.load(directory)


@pytest.fixture(scope="module")
def images():
    pixels, labels = et.fashion_mnist(NUM_IMAGES)
    return pixels, labels, [tf.io.encode_png(image).numpy() for image in pixels]


def _round_trip(loaded, body):
    """Request and answer through JSON text, as they travel over HTTP."""
    answer = rest.predict(loaded, json.dumps(body).encode("utf-8"))
    return rest.decode_response(json.dumps(answer))


# -- the bodies the documentation shows ---------------------------------------------


def test_request_bodies_have_the_documented_form():
    # "YWI=" is the RFC 4648 base64 of b"ab".
    assert rest.predict_request([b"ab"]) == {"instances": [{"b64": "YWI="}]}
    assert rest.predict_request([b"ab"], input_name="images") == {
        "instances": [{"images": {"b64": "YWI="}}]
    }
    assert rest.predict_request([b"ab"], input_name="images", columnar=True) == {
        "inputs": {"images": [{"b64": "YWI="}]}
    }
    assert rest.predict_request([b"ab"], serving.PREDICT_EXAMPLES, columnar=True) == {
        "signature_name": "predict_examples",
        "inputs": [{"b64": "YWI="}],
    }
    pixels = np.arange(6, dtype=np.uint8).reshape(1, 1, 2, 3)
    assert rest.predict_request(pixels, serving.PREDICT_IMAGES) == {
        "signature_name": "predict_images",
        "instances": [[[[0, 1, 2], [3, 4, 5]]]],
    }


def test_rest_requests_give_the_keras_predictions(served, images):
    model, loaded = served
    pixels, labels, pngs = images
    expected = et.keras_probabilities(model, pixels)
    assert len(set(expected.argmax(1))) > 1  # the check below can tell classes apart
    examples = [et.example(png, [int(label)]) for png, label in zip(pngs, labels)]
    calls = {  # signature: (its input, the bodies that send it)
        serving.SERVING_DEFAULT: (
            pngs,
            [
                rest.predict_request(pngs),
                rest.predict_request(pngs, input_name="images"),
                rest.predict_request(pngs, input_name="images", columnar=True),
            ],
        ),
        serving.PREDICT_EXAMPLES: (
            examples,
            [
                rest.predict_request(examples, serving.PREDICT_EXAMPLES),
                rest.predict_request(examples, serving.PREDICT_EXAMPLES, columnar=True),
            ],
        ),
        serving.PREDICT_IMAGES: (pixels, [rest.predict_request(pixels, serving.PREDICT_IMAGES)]),
        serving.PREDICT_IMAGES_FLOAT32: (
            pixels.astype(np.float32),
            [rest.predict_request(pixels.astype(np.float32), serving.PREDICT_IMAGES_FLOAT32)],
        ),
    }
    for signature, (values, bodies) in calls.items():
        argument = "examples" if signature == serving.PREDICT_EXAMPLES else "images"
        direct = loaded.signatures[signature](**{argument: tf.constant(values)})
        for body in bodies:
            outputs = _round_trip(loaded, body)
            # JSON carries every float32 exactly: the answer is the signature's own.
            np.testing.assert_array_equal(
                outputs["probabilities"].astype(np.float32), direct["probabilities"].numpy()
            )
            np.testing.assert_allclose(outputs["probabilities"], expected, atol=ATOL)
            np.testing.assert_array_equal(outputs["top_k_classes"][:, 0], expected.argmax(1))
            np.testing.assert_array_equal(outputs["top_k_classes"], direct["top_k_classes"].numpy())
            np.testing.assert_array_equal(
                outputs["top_k_names"], np.asarray(et.CLASS_NAMES)[outputs["top_k_classes"]]
            )
            if signature == serving.PREDICT_EXAMPLES:
                np.testing.assert_array_equal(outputs["labels"], labels[:, None])


def test_a_bad_image_fails_as_the_signature_says(served, images):
    _, loaded = served
    body = rest.predict_request([images[2][0], b"GIF? no, a text file"])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"batch index\] \[1\] \[is not a"):
        rest.predict(loaded, json.dumps(body))


# -- decoding as TF Serving does ------------------------------------------------------

SIGNATURES = {  # a stand-in model: one bytes input, two named inputs, uint8 pixels
    "serving_default": {"images": np.dtype(object)},
    "two": {"a": np.dtype(np.float32), "b": np.dtype(object)},
    "pixels": {"images": np.dtype(np.uint8)},
}


def test_decoding_follows_tf_serving():
    request = rest.decode_request(
        '{"signature_name": "two", "instances": [{"a": [1, 2.5], "b": {"b64": "AP8="}},'
        ' {"b": "h\\u00e9", "a": [NaN, -Infinity]}]}',
        SIGNATURES,
    )
    assert (request.signature_name, request.columnar) == ("two", False)
    np.testing.assert_array_equal(request.inputs["a"], [[1, 2.5], [np.nan, -np.inf]])
    assert request.inputs["a"].dtype == np.float32
    assert request.inputs["b"].tolist() == [b"\x00\xff", "hé".encode()]
    request = rest.decode_request({"inputs": [{"b64": "YWI"}, "c"]}, SIGNATURES)
    assert (request.signature_name, request.columnar) == ("serving_default", True)
    assert request.inputs["images"].tolist() == [b"ab", b"c"]  # b64 padding optional
    request = rest.decode_request(
        {"signature_name": "pixels", "inputs": {"images": [[[0, 255]]]}}, SIGNATURES
    )
    assert request.inputs["images"].dtype == np.uint8
    assert request.inputs["images"].shape == (1, 1, 2)


@pytest.mark.parametrize(
    "body, match",
    [
        ("{'instances': []}", r"the request body is not JSON"),
        ("[1]", r"must be a JSON object, got list"),
        ({"instances": ["a"], "inputs": ["a"]}, r"exactly one of 'instances' .* it has both"),
        ({"signature_name": "two"}, r"it has neither"),
        ({"signature_name": 3, "instances": ["a"]}, r"'signature_name' must be a string, got 3"),
        (
            {"signature_name": "nope", "instances": ["a"]},
            r"signature 'nope' not found; the model has pixels, serving_default, two",
        ),
        ({"instances": []}, r"'instances' must be a non-empty list"),
        ({"instances": {"images": ["a"]}}, r"'instances' must be a non-empty list"),
        (
            {"instances": [{"images": {"b64": "YWI=", "x": 1}}]},
            r"instances\[0\]\['images'\]: a binary value is .* 'b64' its only key",
        ),
        (
            {"instances": [{"b64": "YWI=", "x": 1}]},  # then an object of named inputs
            r"instances\[0\] has the keys b64, x; signature 'serving_default' takes images",
        ),
        ({"instances": ["a", {"b64": "!!"}]}, r"instances\[1\]: invalid base64 data"),
        ({"instances": [5]}, r"instances\[0\]: 5 is not a string"),
        (
            {"signature_name": "two", "instances": [1.0]},
            r"plain values, but signature 'two' takes several inputs \(a, b\)",
        ),
        (
            {"signature_name": "two", "instances": [{"a": 1.0, "b": "x"}, {"a": 2.0}]},
            r"instances\[1\] has the keys a; signature 'two' takes a, b",
        ),
        (
            {"signature_name": "two", "instances": [{"a": 1.0, "b": "x"}, [1.0]]},
            r"instances\[1\] is not an object of named inputs like instances\[0\]",
        ),
        (
            {"signature_name": "two", "instances": [{"a": [1, 2], "b": "x"}, {"a": [1], "b": "y"}]},
            r"instances\[1\]\['a'\] has shape \(1,\), instances\[0\] \(2,\)",
        ),
        (
            {"signature_name": "two", "inputs": {"a": [1e39], "b": ["x"]}},
            r"inputs\['a'\]\[0\]: 1e\+39 is out of the float32 range",
        ),
        (
            {"signature_name": "two", "inputs": {"a": [16777217], "b": ["x"]}},
            r"16777217 is not exact as float32",
        ),
        (
            {"signature_name": "two", "inputs": {"a": ["1"], "b": ["x"]}},
            r"inputs\['a'\]\[0\]: \"1\" is not a float32 value",
        ),
        (
            {"signature_name": "two", "inputs": {"a": [1.0]}},
            r"'inputs' has the keys a; signature 'two' takes a, b",
        ),
        ({"signature_name": "two", "inputs": [1.0]}, r"'inputs' is a plain value"),
        (
            {"signature_name": "pixels", "inputs": [[1, 2], [3]]},
            r"inputs\[1\]: a list of 1 values where the first items give 2 values",
        ),
        (
            {"signature_name": "pixels", "inputs": [[1, 2], 3]},
            r"inputs\[1\]: a single value where the first items give a list",
        ),
        (
            {"signature_name": "pixels", "instances": [[1.5]]},
            r"instances\[0\]\[0\]: 1.5 is not an integer \(uint8\)",
        ),
        (
            {"signature_name": "pixels", "instances": [[300]]},
            r"instances\[0\]\[0\]: 300 is out of the uint8 range \[0, 255\]",
        ),
        ({"signature_name": "pixels", "instances": [[True]]}, r"true is not a uint8 value"),
    ],
)
def test_what_tf_serving_refuses_is_refused_naming_it(body, match):
    with pytest.raises(rest.RequestError, match=match):
        rest.decode_request(body, SIGNATURES)


def test_responses_have_tf_servings_form():
    awkward = np.array([[0.1, 1 / 3], [1e-30, 3.4e38]], np.float32)
    outputs = {
        "scores": awkward,
        "names": np.array([[b"Bag"], [b"Coat"]], dtype=object),
        "id_bytes": np.array([b"\x00", b"\xff"], dtype=object),
    }
    rows = rest.encode_response(outputs, columnar=False)
    assert rows["predictions"][1]["names"] == ["Coat"]
    assert rows["predictions"][1]["id_bytes"] == {"b64": "/w=="}  # binary: the _bytes suffix
    columns = rest.encode_response(outputs, columnar=True)
    assert columns["outputs"]["names"] == [["Bag"], ["Coat"]]
    for answer in (rows, columns):
        decoded = rest.decode_response(json.dumps(answer))
        np.testing.assert_array_equal(decoded["scores"].astype(np.float32), awkward)
        assert decoded["names"].tolist() == [["Bag"], ["Coat"]]
        assert decoded["id_bytes"].tolist() == [b"\x00", b"\xff"]
    # One output: left unnamed.
    single = {"features": awkward}
    assert rest.encode_response(single, columnar=False) == {"predictions": awkward.tolist()}
    assert rest.encode_response(single, columnar=True) == {"outputs": awkward.tolist()}
    np.testing.assert_array_equal(
        rest.decode_response(rest.encode_response(single, False)).astype(np.float32), awkward
    )
    with pytest.raises(rest.RequestError, match=r"different batch sizes .*; send 'inputs'"):
        rest.encode_response({"a": np.zeros(2), "b": np.zeros(3)}, columnar=False)
    with pytest.raises(rest.RequestError, match=r"^Servable not found$"):
        rest.decode_response('{"error": "Servable not found"}')
    with pytest.raises(rest.RequestError, match=r"none of 'predictions', 'outputs' and 'error'"):
        rest.decode_response("{}")


# -- the client tool against a stand-in server ------------------------------------------


class _StandIn(http.server.BaseHTTPRequestHandler):
    """TF Serving's REST `:predict` for one model, answered by rest.predict."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path != f"/v1/models/{MODEL_NAME}:predict":
            self._answer(404, {"error": f"Servable not found for request: {self.path}"})
            return
        try:
            self._answer(200, rest.predict(self.server.loaded, body))
        except rest.RequestError as e:
            self._answer(400, {"error": str(e)})
        except tf.errors.InvalidArgumentError as e:
            self._answer(400, {"error": e.message})

    def _answer(self, status, answer):
        data = json.dumps(answer).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # no access log in the test output
        pass


@pytest.fixture(scope="module")
def server_url(served):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    server.loaded = served[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1/models/{MODEL_NAME}"
    server.shutdown()
    server.server_close()


def test_serve_request_prints_the_served_classes(served, images, server_url, tmp_path):
    from keras_vit_tools import serve_request

    model, loaded = served
    pixels, _, pngs = images
    paths = []
    for i, png in enumerate(pngs):
        paths.append(str(tmp_path / f"image{i}.png"))
        with open(paths[-1], "wb") as f:
            f.write(png)
    result = et.run_tool(["tools/serve_request.py", f"--url={server_url}:predict", *paths])
    assert result.returncode == 0, result.stderr[-3000:]
    direct = loaded.signatures[serving.SERVING_DEFAULT](images=tf.constant(pngs))
    direct = {name: value.numpy() for name, value in direct.items()}
    direct["top_k_names"] = direct["top_k_names"].astype(bytes).astype(str)
    assert result.stdout.splitlines() == serve_request.summary_lines(paths, direct)
    keras_names = np.asarray(et.CLASS_NAMES)[et.keras_probabilities(model, pixels).argmax(1)]
    for line, path, name in zip(result.stdout.splitlines(), paths, keras_names):
        assert line.startswith(f"{path}: {name} ")

    # Columnar and the other signatures, in process; the answers are the signature's.
    for signature, columnar in [(serving.PREDICT_EXAMPLES, True), (serving.PREDICT_IMAGES, False)]:
        body = serve_request.request_body(paths, signature, columnar)
        outputs = serve_request.send(f"{server_url}:predict", body)
        np.testing.assert_array_equal(
            outputs["probabilities"].astype(np.float32), direct["probabilities"]
        )
    text = tmp_path / "notes.txt"
    text.write_text("not an image")
    body = serve_request.request_body([paths[0], str(text)])
    assert body["instances"][1] == {"b64": base64.b64encode(b"not an image").decode()}
    with pytest.raises(rest.RequestError, match=r"(?s)HTTP 400: .*batch index\] \[1\] \[is not a"):
        serve_request.send(f"{server_url}:predict", body)
    with pytest.raises(rest.RequestError, match=r"HTTP 404: Servable not found"):
        serve_request.send(f"{server_url}x:predict", body)
    with pytest.raises(ValueError, match=r"--signature=predict: not an exported signature"):
        serve_request.request_body(paths, "predict")


def _documented_client():
    """The standard-library client of docs/deployment.md, "Serving with TF Serving"."""
    with open(f"{et.ROOT}/docs/deployment.md", encoding="utf-8") as f:
        page = f.read()
    assert "\n## Serving with TF Serving\n" in page, "docs/deployment.md lost its section"
    section = page.split("\n## Serving with TF Serving\n", 1)[1].split("\n## ", 1)[0]
    assert "```python\n" in section, "the section has no Python client"
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_documented_python_client_runs(served, images, server_url, tmp_path, monkeypatch):
    _, loaded = served
    png = images[2][0]
    code = _documented_client()
    documented_url = f"http://localhost:8501/v1/models/{MODEL_NAME}"
    assert documented_url in code
    (tmp_path / "shoe.png").write_bytes(png)
    monkeypatch.chdir(tmp_path)
    printed = []
    exec(  # the page's own code, run against the stand-in server
        compile(code.replace(documented_url, server_url), "docs/deployment.md", "exec"),
        {"print": lambda *args: printed.append(args)},
    )
    direct = loaded.signatures[serving.SERVING_DEFAULT](images=tf.constant([png]))
    names = direct["top_k_names"].numpy()[0].astype(bytes).astype(str).tolist()
    assert printed == [(names, direct["top_k_scores"].numpy()[0].tolist())]


def test_an_image_of_other_channels_is_one_line_naming_both(served, images, server_url, tmp_path):
    """A grey image sent as pixels to an RGB model: RequestError naming both channel
    counts, in process and as the stand-in server's answer to tools/serve_request.py
    (one line, exit 1: the server refused it), never a TypeError printing the tensor."""
    _, loaded = served
    grey = images[0][:1, :, :, :1]
    for columnar in (False, True):
        body = rest.predict_request(grey, serving.PREDICT_IMAGES, columnar=columnar)
        with pytest.raises(
            rest.RequestError,
            match=r"^(instances|inputs): 1-channel images for signature 'predict_images', "
            r"whose input 'images' takes 3-channel 28x28x3 pixels \(convert",
        ):
            rest.predict(loaded, json.dumps(body))
    body = rest.predict_request(images[0][:1, :20], serving.PREDICT_IMAGES)
    with pytest.raises(rest.RequestError, match=r"of shape 1x20x28x3; .* takes \?x28x28x3"):
        rest.predict(loaded, json.dumps(body))

    path = str(tmp_path / "grey.png")
    with open(path, "wb") as f:
        f.write(tf.io.encode_png(grey[0]).numpy())
    signature = f"--signature={serving.PREDICT_IMAGES}"
    result = et.run_tool(["tools/serve_request.py", f"--url={server_url}:predict", signature, path])
    assert result.returncode == 1, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[-1].startswith("error: HTTP 400: instances: 1-channel images for signature")
    assert sum(line.startswith("error: ") for line in lines) == 1, result.stderr[-3000:]
