"""TensorBoard scalars through core TensorFlow.

`tf.summary.scalar` needs the `tensorboard` package, which tensorflow-cpu does not
pull in; `write_scalar` writes the same event with core ops only.
"""

import tensorflow as tf


def write_scalar(tag, value, step):
    """Writes a scalar summary to the default writer (inside `writer.as_default()`)."""
    from tensorflow.core.framework import summary_pb2

    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    )
    tf.summary.write(tag, tf.constant(float(value), tf.float32), step=step, metadata=metadata)
