r"""Training time blocked by one checkpoint of a model's whole training state.

  python benchmarks/checkpoint_save.py --variant=ViT_B16 --image_size=224 \
      --directory=/tmp/checkpoint_save [--repeats=3] [--json=PATH]

The state is what the trainers save: the model's variables and AdamW's (step, first
and second moments), built by the trainers' step (trainers/train_step.py) on this machine's
default strategy. Three ways of saving it, interleaved, --repeats times each:

  keras_weights_h5   `model.save_weights(...weights.h5)` of the compiled model: what
                     the trainer before this release wrote at each checkpoint
                     (Keras' BackupAndRestore), on every worker;
  tf_train_sync      `tf.train.CheckpointManager.save`, synchronous: the chief's;
  tf_train_async     the same with CheckpointOptions(experimental_enable_async_checkpoint
                     =True): `save` returns once the state is copied off the devices and
                     the writing goes on in TensorFlow's thread (`written_seconds`: until
                     `sync()` returns, which training does not wait for).

The figure is the seconds `save` blocks the training loop (median of the repeats), and
the state's size on disk. Each save goes to a fresh folder under --directory, removed
after. Measurements, not pass/fail; names the machine (cli/machine.py).
"""

import os
import shutil
import statistics
import time

from absl import app, flags

from keras_vit_cli.machine import describe, machine_info, report, source_commit

flags.DEFINE_string("variant", "ViT_B16", "keras_vit builder name.")
flags.DEFINE_integer("image_size", 224, "Image size.")
flags.DEFINE_integer("num_classes", 1000, "Classes of the head.")
flags.DEFINE_string("directory", "/tmp/keras_vit_checkpoint_save", "Where the saves go.")
flags.DEFINE_integer("repeats", 3, "Saves per way, interleaved.")
flags.DEFINE_string("json", None, "Results file.")
FLAGS = flags.FLAGS

WAYS = ("keras_weights_h5", "tf_train_sync", "tf_train_async")


def _size(folder):
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(folder)
        for name in names
    )


def main(argv):
    del argv
    import keras
    import tensorflow as tf

    import keras_vit
    from keras_vit_trainers import checkpointing, train_step

    keras.utils.set_random_seed(0)
    strategy = tf.distribute.get_strategy()
    model = keras_vit.build_model(
        FLAGS.variant, image_size=FLAGS.image_size, num_classes=FLAGS.num_classes
    )
    optimizer = keras.optimizers.AdamW(1e-4)
    loss = keras.losses.CategoricalCrossentropy(from_logits=True)
    train_step.TrainStep(model, optimizer, loss, {}, strategy).build()
    model.compile(optimizer=optimizer, loss=loss)
    state = checkpointing.training_state(model, optimizer)
    print(describe(machine_info()))
    blocked = {way: [] for way in WAYS}
    written, sizes = [], {}
    for repeat in range(FLAGS.repeats):
        for way in WAYS:
            folder = os.path.join(FLAGS.directory, f"{way}_{repeat}")
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            start = time.perf_counter()
            if way == "keras_weights_h5":
                model.save_weights(os.path.join(folder, "latest.weights.h5"))
                blocked[way].append(time.perf_counter() - start)
            else:
                options = tf.train.CheckpointOptions(
                    experimental_enable_async_checkpoint=way == "tf_train_async"
                )
                manager = tf.train.CheckpointManager(state, folder, max_to_keep=1)
                manager.save(checkpoint_number=repeat, options=options)
                blocked[way].append(time.perf_counter() - start)
                if way == "tf_train_async":
                    state.sync()
                    written.append(time.perf_counter() - start)
            sizes[way] = _size(folder)
            shutil.rmtree(folder, ignore_errors=True)
            print(f"  {way:18s} repeat {repeat}: blocked {blocked[way][-1]:.2f} s", flush=True)
    result = {
        "variant": FLAGS.variant,
        "image_size": FLAGS.image_size,
        "parameters": int(model.count_params()),
        "commit": source_commit(),
        "machine": machine_info(),
        "ways": {
            way: {
                "blocked_seconds": statistics.median(blocked[way]),
                "runs_blocked_seconds": blocked[way],
                "bytes": sizes[way],
            }
            for way in WAYS
        },
    }
    result["ways"]["tf_train_async"]["written_seconds"] = statistics.median(written)
    report(result, FLAGS.json)


if __name__ == "__main__":
    app.run(main)
