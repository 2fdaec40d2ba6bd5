r"""Converts a checkpoint between the formats keras_vit reads and writes.

    python tools/convert_checkpoint.py --model=ViT_B16 --weights=ViT-B_16.npz \
        --output=vit_b16.keras
    python tools/convert_checkpoint.py --model=ViT_L16 --weights=imagenet21k \
        --num_classes=10 --image_size=384 --output=vit_l16.weights.h5
    python tools/convert_checkpoint.py --model=ViT_B16 --weights=hf_vit_dir \
        --output=timm_dir --format=timm

--model is a builder name (ViT_B16, ...) or a JSON object of
`keras_vit.VisionTransformer` arguments. --weights is anything `weights=` takes:
an official `.npz` or registry name, a `.keras` or `.weights.h5` file, a run
directory, a timm state dict or directory, a transformers directory
(docs/checkpoints.md). The output kind follows its suffix: `.keras` (whole
model), `.weights.h5` (weights, with `<stem>.config.json`, the model's config,
beside it), `.npz` (the official layout, published names) or `.safetensors` (a
timm state dict); with --format=timm or --format=transformers, --output is a
directory in that family's layout (config.json + model.safetensors).
"""

import json

from absl import flags

from keras_vit_cli import console

if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported: our lines only

import keras_vit  # noqa: E402
from keras_vit.checkpoint import keras_files  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "model",
    None,
    "Builder name (e.g. ViT_B16) or a JSON dict of VisionTransformer arguments.",
    required=True,
)
flags.DEFINE_string(
    "weights",
    None,
    "Official .npz path, registry name, .keras or .weights.h5, run directory, timm or "
    "transformers file or directory.",
    required=True,
)
flags.DEFINE_integer("num_classes", None, "Head width (default: the checkpoint's).")
flags.DEFINE_integer("image_size", None, "Input resolution (default: the checkpoint's).")
flags.DEFINE_bool("include_top", True, "Keep the classification head.")
flags.DEFINE_string(
    "output", None, "Output .keras, .weights.h5, .npz or .safetensors path.", required=True
)
flags.DEFINE_enum(
    "format",
    None,
    ["timm", "transformers"],
    "Write --output as a directory in timm's or transformers' layout.",
)


def model_spec(text):
    """A builder name, or the dict decoded from a JSON object."""
    text = text.strip()
    return json.loads(text) if text.startswith("{") else text


def convert(spec, weights, output, output_format=None, **overrides):
    """Builds `spec` with `weights` and writes `output` (`output_format` 'timm' or
    'transformers': a directory of that family); returns the model."""
    overrides = {k: v for k, v in overrides.items() if v is not None}
    model = keras_vit.build_model(spec, weights=weights, **overrides)
    if output_format == "timm" or (not output_format and output.endswith(".safetensors")):
        keras_vit.checkpoint.save_timm(model, output)
    elif output_format == "transformers":
        keras_vit.checkpoint.save_transformers(model, output)
    elif output_format is not None:
        raise ValueError(f"--format must be timm or transformers, got {output_format!r}.")
    elif output.endswith(".keras"):
        model.save(output)
    elif output.endswith(keras_files.WEIGHTS_SUFFIX):
        model.save_weights(output)
        with open(keras_files.config_path(output), "w") as f:
            json.dump(model.get_config(), f, indent=2)
    elif output.endswith(".npz"):
        keras_vit.save_checkpoint(model, output)
    else:
        raise ValueError(
            f"--output must end in .keras, .weights.h5 or .npz (or .safetensors, a timm "
            f"state dict; --format=timm|transformers writes a directory): {output}"
        )
    return model


def main(argv):
    del argv
    model = convert(
        model_spec(FLAGS.model),
        FLAGS.weights,
        FLAGS.output,
        FLAGS.format,
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
