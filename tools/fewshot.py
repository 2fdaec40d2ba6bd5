r"""Few-shot linear evaluation of a frozen model (paper §4.1; big_vision fewshot_lsr):
ridge regression (l2 = 2**10) on whitened features plus a bias feature, targets
2*onehot - 1, fit on k examples per class of the train split, accuracy on the
test split, mean ± std over seeds.

  python tools/fewshot.py --run_dir=RUN --data_dir=DATA --shots=1,5,10,25
  python tools/fewshot.py --model=ViT_B16 --weights=imagenet21k --data_dir=DATA

Only the k-shot images are read through the model on the train side: the train
labels are read first (no image decoding), the k-shot sets of every seed drawn from
them, and features computed for their union only, at most max(shots) x classes x
seeds images (25 x 10 x 3 = 750 of Fashion-MNIST's 60,000); the test split is
extracted in full (up to --max_test_examples). See trainers/fewshot_evaluator.py.

Prints our lines only (cli/console.py; KERAS_VIT_VERBOSITY=library for the
libraries' output), a progress bar per feature extraction on stderr, one line per
shot count, and writes --output_json when given.
"""

import json
import time

from keras_vit_cli import console

if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported

from absl import flags

from keras_vit_configs import common
from keras_vit_tools import inspect_io

inspect_io.define_model_flags()
DEFAULTS = common.fewshot_eval()  # the trainers' few-shot evaluator's defaults

flags.DEFINE_string("data_dir", None, "A tools/make_tfrecords.py directory.")
flags.DEFINE_string("train_split", DEFAULTS.train_split, "Split the k-shot sets are drawn from.")
flags.DEFINE_string("test_split", DEFAULTS.test_split, "Split the accuracy is measured on.")
flags.DEFINE_list("shots", [str(k) for k in DEFAULTS.shots], "Examples per class.")
flags.DEFINE_integer("num_seeds", DEFAULTS.num_seeds, "Random k-shot draws (seeds 0..N-1).")
flags.DEFINE_float("l2", DEFAULTS.l2, "Ridge strength.")
flags.DEFINE_enum(
    "representation",
    DEFAULTS.representation,
    ["pre_logits", "token", "gap"],
    "Frozen features: what feeds the head, the class token or the mean "
    "of the patch tokens after the final LayerNorm.",
)
flags.DEFINE_integer("max_train_examples", None, "Use the first N train examples (all).")
flags.DEFINE_integer("max_test_examples", None, "Use the first N test examples.")
flags.DEFINE_integer("batch_size", DEFAULTS.batch_size, "Feature extraction batch size.")
flags.DEFINE_string("output_json", None, "Write the results here too.")

FLAGS = flags.FLAGS


# What `results` hold, said in the JSON and the printed line: their unit and split.
METRIC = "accuracy on test_split, a fraction (mean and std over the seeds)"


def run(model, data_dir, batch_size=256, **options):
    """Few-shot results of `model` on `data_dir` (keras_vit.fewshot.evaluate) and a
    dict describing the run. `options`: trainers.fewshot_evaluator.DEFAULTS."""
    from keras_vit_trainers import fewshot_evaluator, input_spec

    start = time.perf_counter()
    evaluator = fewshot_evaluator.FewShotEvaluator(
        data_dir,
        # the model's own input normalisation (a timm / transformers checkpoint's mean/std)
        input_spec.InputSpec(image_size=model.image_size, preprocessing=model.preprocessing),
        batch_size=batch_size,
        **options,
    )
    results = evaluator.evaluate(model)
    info = {
        "representation": evaluator.options["representation"],
        "num_classes": evaluator.num_classes,
        "l2": evaluator.options["l2"],
        "num_seeds": evaluator.options["num_seeds"],
        "max_train_examples": evaluator.options["max_train_examples"],
        "max_test_examples": evaluator.options["max_test_examples"],
        "train_split": evaluator.options["train_split"],
        "test_split": evaluator.options["test_split"],
        "metric": METRIC,
        "examples_extracted": dict(evaluator.examples_extracted),
        "seconds": round(time.perf_counter() - start, 1),
    }
    return results, info


def main(argv):
    del argv
    try:
        if FLAGS.output_json:
            console.check_output(FLAGS.output_json, "--output_json")  # before the work
        model = inspect_io.load_model_from_flags()
        if not FLAGS.data_dir:
            raise ValueError("--data_dir=DATA is required")
        test_split = inspect_io.data_split(
            FLAGS.data_dir, FLAGS.test_split, "--test_split", FLAGS["test_split"].present
        )
        shots = [int(k) for k in FLAGS.shots]
        results, info = run(
            model,
            FLAGS.data_dir,
            FLAGS.batch_size,
            shots=shots,
            num_seeds=FLAGS.num_seeds,
            l2=FLAGS.l2,
            representation=FLAGS.representation,
            train_split=FLAGS.train_split,
            test_split=test_split,
            max_train_examples=FLAGS.max_train_examples,
            max_test_examples=FLAGS.max_test_examples,
        )
    except (ValueError, FileNotFoundError) as e:
        raise console.UserError.of(e) from e
    from keras_vit import fewshot

    images = " + ".join(f"{n} {split}" for split, n in info["examples_extracted"].items())
    print(
        f"few-shot accuracy on the {info['test_split']} split (k-shot sets from "
        f"{info['train_split']}), {info['representation']} features, {info['num_classes']} "
        f"classes, l2 {info['l2']:g}, {images} images, {info['seconds']} s:"
    )
    print(fewshot.format_results(results))
    if FLAGS.output_json:
        with open(FLAGS.output_json, "w") as f:
            json.dump({"results": {str(k): v for k, v in results.items()}, **info}, f, indent=1)


if __name__ == "__main__":
    console.run_app(main)
