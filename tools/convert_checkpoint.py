r"""Converts an official `.npz` checkpoint (or a registry name) into Keras files.

    python tools/convert_checkpoint.py --model=ViT_B16 --weights=ViT-B_16.npz \
        --output=vit_b16.keras
    python tools/convert_checkpoint.py --model=ViT_L16 --weights=imagenet21k \
        --num_classes=10 --image_size=384 --output=vit_l16.weights.h5

--model is a builder name (ViT_B16, ...) or a JSON object of
`keras_vit.VisionTransformer` arguments. The output kind follows its suffix:
`.keras` (whole model), `.weights.h5` (weights, with `<stem>.config.json`, the
model's config, beside it) or `.npz` (the official layout, published names).
"""

import json

from absl import flags
from keras_vit_trainers import console

if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported: our lines only

import keras_vit  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "model",
    None,
    "Builder name (e.g. ViT_B16) or a JSON dict of VisionTransformer arguments.",
    required=True,
)
flags.DEFINE_string(
    "weights", None, "Official .npz path, registry name, .keras or .weights.h5.", required=True
)
flags.DEFINE_integer("num_classes", None, "Head width (default: the checkpoint's).")
flags.DEFINE_integer("image_size", None, "Input resolution (default: the checkpoint's).")
flags.DEFINE_bool("include_top", True, "Keep the classification head.")
flags.DEFINE_string("output", None, "Output .keras, .weights.h5 or .npz path.", required=True)


def model_spec(text):
    """A builder name, or the dict decoded from a JSON object."""
    text = text.strip()
    return json.loads(text) if text.startswith("{") else text


def convert(spec, weights, output, **overrides):
    """Builds `spec` with `weights` and writes `output`; returns the model."""
    overrides = {k: v for k, v in overrides.items() if v is not None}
    model = keras_vit.build_model(spec, weights=weights, **overrides)
    if output.endswith(".keras"):
        model.save(output)
    elif output.endswith(".weights.h5"):
        model.save_weights(output)
        with open(output[: -len(".weights.h5")] + ".config.json", "w") as f:
            json.dump(model.get_config(), f, indent=2)
    elif output.endswith(".npz"):
        keras_vit.save_checkpoint(model, output)
    else:
        raise ValueError(f"--output must end in .keras, .weights.h5 or .npz: {output}")
    return model


def main(argv):
    del argv
    model = convert(
        model_spec(FLAGS.model),
        FLAGS.weights,
        FLAGS.output,
        num_classes=FLAGS.num_classes,
        image_size=FLAGS.image_size,
        include_top=FLAGS.include_top,
    )
    print(
        f"Wrote {FLAGS.output}: {model.name}, {model.count_params():,} parameters, "
        f"{model.image_size[0]}x{model.image_size[1]} px."
    )


if __name__ == "__main__":
    console.run_app(main)
