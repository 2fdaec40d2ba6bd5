"""The console entry points (setup.cfg `console_scripts`): `keras-vit-pretrain`,
`keras-vit-finetune`, `keras-vit-demo` and one per tool, the same programs as
`python trainers/pretrain.py ...` and `python tools/<tool>.py ...`.

Each sets up the console (our lines only, cli/console.py) before TensorFlow is
imported, then runs the program's absl main. It lives in tools/, the floor above the
trainers: it starts both.
"""

import importlib
import sys

from keras_vit_cli import console


def _trainer(mode):
    console.setup()
    from keras_vit_trainers import app

    app.main(mode)


def pretrain():
    _trainer("pretrain")


def finetune():
    _trainer("finetune")


def _tool(name):
    console.setup()
    console.run_app(importlib.import_module(f"keras_vit_tools.{name}").main)


def demo():
    console.setup()
    from keras_vit_tools import demo as demo_tool

    demo_tool.main(sys.argv[1:])


def make_tfrecords():
    _tool("make_tfrecords")


def export_savedmodel():
    _tool("export_savedmodel")


def export_tflite():
    _tool("export_tflite")


def export_onnx():
    _tool("export_onnx")


def export_openvino():
    _tool("export_openvino")


def fewshot():
    _tool("fewshot")


def visualize():
    _tool("visualize")


def convert_checkpoint():
    _tool("convert_checkpoint")


def data_service():
    _tool("data_service")
