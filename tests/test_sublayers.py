"""`keras_vit.sublayers`: every layer within a layer or model, through public attributes."""

import keras

from keras_vit.sublayers import sublayers


class _Holder(keras.layers.Layer):
    """Sub-layers held alone, in a list, in a dict, and one under a private name."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.alone = keras.layers.Dense(2, name="alone")
        self.listed = [keras.layers.Dense(2, name="first"), keras.layers.Dense(2, name="second")]
        self.named = {"a": keras.layers.Dense(2, name="in_dict")}
        self.shared = self.alone  # the same layer twice: listed once
        self._hidden = keras.layers.Dense(2, name="hidden")

    def build(self, input_shape):
        self.alone.build(input_shape)

    def call(self, x):
        return self.alone(x)


def _names(layers):
    return [layer.name for layer in layers]


def test_attributes_lists_and_dicts_each_layer_once_not_private_names():
    found = _names(sublayers(_Holder()))
    assert sorted(found) == ["alone", "first", "in_dict", "second"]


def test_nested_models_and_layers_at_any_depth_parents_first():
    inputs = keras.Input((3,))
    holder = _Holder(name="holder")
    inner = keras.Model(inputs, holder(inputs), name="inner")
    outer_inputs = keras.Input((3,))
    outer = keras.Model(outer_inputs, inner(outer_inputs), name="outer")
    found = _names(sublayers(outer))
    assert "outer" not in found
    assert set(found) >= {"inner", "holder", "alone", "first", "second", "in_dict"}
    assert found.index("inner") < found.index("holder") < found.index("alone")
    assert len(found) == len(set(found))
