r"""Sends images to a model that TF Serving serves (its REST API, `:predict`) and
prints the answer, one line per image: a classifier's top classes and scores, or
the shape of a headless model's output.

  python tools/serve_request.py --url=http://localhost:8501/v1/models/vit:predict \
      shoe.png bag.jpg
  python tools/serve_request.py --url=URL --signature=predict_examples --columnar shoe.png
  python tools/serve_request.py --signature=predict_images --request=body.json shoe.png

--signature picks how the images travel (see deploy/serving.py): `serving_default`
(the default) sends each file's bytes as {"b64": ...}; `<prefix>_examples` wraps
them in a tf.train.Example (`image/encoded`) first; `<prefix>_images` and
`<prefix>_images_float32` send the decoded pixels, which must already be the
model's H x W x C (the alpha of an RGBA or grey + alpha image is dropped, with a
line saying so, as the other signatures drop it: deploy/preprocessing.py). --columnar sends "inputs" (the batch as one tensor) instead of
"instances" (one item per image). --request=FILE writes the body there and sends
nothing (then `curl -d @FILE URL`). The bodies are deploy/rest.py's.
"""

import json
import sys
import urllib.error
import urllib.request

from keras_vit_cli import console

if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported (by keras_vit_deploy): our lines only

import numpy as np
from absl import app, flags

from keras_vit_data import records
from keras_vit_deploy import preprocessing, rest, serving

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "url",
    None,
    "The model's predict URL, http://HOST:8501/v1/models/NAME:predict (NAME: the "
    "server's MODEL_NAME).",
)
flags.DEFINE_string(
    "signature",
    serving.SERVING_DEFAULT,
    "serving_default, or <prefix>_examples, <prefix>_images, <prefix>_images_float32 "
    "(prefix: predict, features or feature_map).",
)
flags.DEFINE_boolean("columnar", False, 'Send "inputs" (columnar) rather than "instances".')
flags.DEFINE_string("request", None, "Write the request body to this file; send nothing.")
flags.DEFINE_float("timeout", 60.0, "Seconds to wait for the answer.")

ENCODED, PIXELS, PIXELS_FLOAT32, EXAMPLES = range(4)  # serving.signature_names' order


def signature_form(signature):
    """How `signature` takes images: ENCODED, PIXELS, PIXELS_FLOAT32 or EXAMPLES."""
    known = []
    for kind in serving.PREFIXES:
        names = serving.signature_names(kind)
        if signature in names:
            return names.index(signature)
        known += [name for name in names if name not in known]
    raise ValueError(f"--signature={signature}: not an exported signature ({', '.join(known)}).")


def _pixels(paths, contents, dtype):
    import tensorflow as tf

    images = []
    for path, content in zip(paths, contents):
        try:
            images.append(tf.io.decode_image(content, expand_animations=False).numpy())
        except tf.errors.InvalidArgumentError as e:
            raise ValueError(f"{path}: not a decodable image ({e.message.splitlines()[0]})") from e
        if images[-1].shape[-1] in (2, 4):  # the serving signatures' rule for alpha
            print(f"{path}: alpha dropped (docs/deployment.md)", file=sys.stderr)
            images[-1] = preprocessing.without_alpha(images[-1], 3)
        if images[-1].shape != images[0].shape:
            raise ValueError(
                f"{path}: {images[-1].shape} pixels, {paths[0]} {images[0].shape}: pixel "
                "signatures take images of one size (the model's)."
            )
    return np.stack(images).astype(dtype)


def request_body(paths, signature=serving.SERVING_DEFAULT, columnar=False):
    """The predict body that sends the image files `paths` to `signature`."""
    form = signature_form(signature)
    contents = []
    for path in paths:
        with open(path, "rb") as f:
            contents.append(f.read())
    if form == ENCODED:
        values = contents
    elif form == EXAMPLES:
        values = [records.serialize_example(content, []) for content in contents]
    else:
        values = _pixels(paths, contents, np.uint8 if form == PIXELS else np.float32)
    return rest.predict_request(values, signature, columnar=columnar)


def send(url, body, timeout=60.0):
    """POSTs `body` to `url`; returns the decoded answer (rest.decode_response).
    RequestError with the server's message when it answers an error; OSError
    (urllib.error.URLError) when it cannot be reached."""
    request = urllib.request.Request(
        url, json.dumps(body).encode("utf-8"), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return rest.decode_response(response.read())
    except urllib.error.HTTPError as e:
        answer = e.read()
        try:
            rest.decode_response(answer)
        except rest.RequestError as error:
            raise rest.RequestError(f"HTTP {e.code}: {error}") from None
        except ValueError:  # not JSON: a proxy's page, a wrong URL
            pass
        raise rest.RequestError(f"HTTP {e.code} {e.reason} from {url}") from None


def summary_lines(paths, outputs):
    """One line per image: `path: name score, ...` (best first) for a classifier,
    `path: output (shape)` for a headless model."""
    if not isinstance(outputs, dict):  # a single output, left unnamed by the server
        outputs = {"output": outputs}
    if "top_k_scores" in outputs:
        labels = outputs.get("top_k_names", outputs["top_k_classes"])
        return [
            f"{path}: " + ", ".join(f"{label} {score:.4f}" for label, score in zip(names, scores))
            for path, names, scores in zip(paths, labels, outputs["top_k_scores"])
        ]
    name, values = next((k, v) for k, v in outputs.items() if k != "labels")
    return [f"{path}: {name} {tuple(value.shape)}" for path, value in zip(paths, values)]


def main(argv):
    paths = argv[1:]
    if not paths:
        raise app.UsageError("give image files to send: serve_request.py --url=URL IMAGE...")
    if not FLAGS.url and not FLAGS.request:
        raise app.UsageError("--url=http://HOST:8501/v1/models/NAME:predict is required")
    try:
        body = request_body(paths, FLAGS.signature, FLAGS.columnar)
    except (ValueError, OSError) as e:  # unknown signature, unreadable or odd files
        raise console.UserError.of(e) from e
    if FLAGS.request:
        with open(FLAGS.request, "w") as f:
            json.dump(body, f)
        print(f"Wrote {FLAGS.request}: {len(paths)} images for {FLAGS.signature}")
        return
    try:
        outputs = send(FLAGS.url, body, FLAGS.timeout)
    except ValueError as e:  # the server's error answer, or an answer that is not JSON
        raise console.UserError(console.error_line(e), console.RUNTIME) from e
    except OSError as e:
        raise console.UserError(
            f"cannot reach {FLAGS.url}: {console.error_line(e)}", console.RUNTIME
        ) from e
    print("\n".join(summary_lines(paths, outputs)))


if __name__ == "__main__":
    console.run_app(main)
