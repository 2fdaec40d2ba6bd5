r"""Converts a checkpoint between the formats keras_vit reads and writes.

    python tools/convert_checkpoint.py --model=ViT_B16 --weights=ViT-B_16.npz \
        --output=vit_b16.keras
    python tools/convert_checkpoint.py --model=ViT_L16 --weights=imagenet21k \
        --num_classes=10 --image_size=384 --output=vit_l16.weights.h5
    python tools/convert_checkpoint.py --model=ViT_B16 --weights=hf_vit_dir \
        --output=timm_dir --format=timm
    python tools/convert_checkpoint.py --weights=RUN --output=timm_dir --format=timm

--model is a builder name (ViT_B16, ...) or a JSON object of
`keras_vit.VisionTransformer` arguments; it may be left out when --weights is a
training run directory (its model_config.json names the model). --weights is anything `weights=` takes:
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
    "Builder name (e.g. ViT_B16) or a JSON dict of VisionTransformer arguments "
    "(default with a run directory as --weights: its model_config.json).",
)
flags.DEFINE_string(
    "weights",
    None,
    "Official .npz path, registry name, .keras or .weights.h5, run directory, timm or "
    "transformers file or directory (required).",
)
flags.DEFINE_integer("num_classes", None, "Head width (default: the checkpoint's).")
flags.DEFINE_integer("image_size", None, "Input resolution (default: the checkpoint's).")
flags.DEFINE_bool("include_top", True, "Keep the classification head.")
flags.DEFINE_string(
    "output", None, "Output .keras, .weights.h5, .npz or .safetensors path (required)."
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
    if not text.startswith("{"):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise console.UserError(f"--model={text}: not a JSON object ({e})") from e


def source_spec(model, weights, output):
    """The model to build (`model_spec` of --model; without it, the run directory
    --weights names: its model_config.json), after the usage checks: a
    console.UserError naming the flag for a missing --weights or --output, or a
    missing --model whose --weights is not a run directory."""
    from keras_vit import run_directory

    if not weights:
        raise console.UserError("--weights is required (a checkpoint, registry name or run).")
    if not output:
        raise console.UserError("--output is required (a file, or a directory with --format).")
    if model:
        return model_spec(model)
    if not run_directory.is_run(weights):
        raise console.UserError(
            f"--weights={weights} is not a run directory (no model_config.json): "
            "give --model=NAME_OR_JSON too."
        )
    return run_directory.RunDirectory(weights).read_model_config()


def parse_flags(argv):
    """absl's parse of `argv`; a flag mistake (an unknown flag, a bad value) ends in
    one 'error:' line and exit code 2 instead of absl's usage text."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        console.fail(f"{e} (python tools/convert_checkpoint.py --help)", console.USAGE)


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
    if len(argv) > 1:
        raise console.UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    model = convert(
        source_spec(FLAGS.model, FLAGS.weights, FLAGS.output),
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
    console.run_app(main, flags_parser=parse_flags)
