"""Deployment of keras_vit models: a SavedModel for TF Serving, TFLite files and ONNX
files (`deploy.onnx_export`), each checked against the Keras model.

    from keras_vit_deploy import serving, tflite
    serving.export_saved_model(model, "exported/vit", class_names=names)
    content = tflite.convert_saved_model("exported/vit", "float16")

Unlike `keras_vit` (backend-agnostic, keras.ops only) this package builds
TensorFlow graphs, so it needs the TensorFlow backend of Keras. The command-line
tools are tools/export_savedmodel.py and tools/export_tflite.py.
"""

import keras


def require_tensorflow_backend():
    """Raises a clear error unless Keras runs on TensorFlow (the export traces
    the model into TF graphs with in-graph image decoding)."""
    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(
            f"deploy needs the TensorFlow backend of Keras, got {keras.backend.backend()!r}; "
            "run with KERAS_BACKEND=tensorflow (the weights are backend-independent)."
        )
