"""One set of generic checks for every layer: `check_layer` (in the manner of keras-hub's
`TestCase.run_layer_test`, smaller). tests/test_layer_conformance.py runs it on every
registered layer, under the TensorFlow backend and, in one subprocess, under JAX.

What `check_layer` asserts, each failure naming the layer and the check:

1. build: `layer.build(input_shape)` alone creates every weight; the numbers of trainable
   and non-trainable weights and of seed generators are what the test expects, and stay so
   after a symbolic and an eager call.
2. shapes: the eager output has `expected_output_shape` (a nested structure of shapes,
   the output's own structure); `compute_output_shape` on the input shape (for a call
   without `call_kwargs`) and a symbolic call on KerasTensors give the same shapes, also
   with an unknown batch size (None).
3. config: `get_config` holds every argument the test passes, and survives JSON and
   `from_config` (directly and through Keras' serialisation) unchanged; the clone, with
   the same weights, has the same weight paths and gives bitwise the same output.
4. `.keras`: a functional model around the layer saved and loaded with safe_mode=True
   holds a layer of the same class and config, the same weight paths, and gives bitwise
   the same output.
5. training: where `call` takes `training`, training=False gives the default (inference)
   output bitwise and training=True runs and keeps the shapes.
6. dtype policies: under "float32" and "mixed_bfloat16" every floating output (eager and
   symbolic) is in the policy's compute dtype, every floating weight in its variable dtype
   (float32), every sub-layer carries the same policy, and the policy survives get_config.

Outputs are compared bitwise: the clone and the loaded model run the same operations on
the same backend, so any difference is a lost weight, argument or state.
"""

import inspect
import json
import os
import tempfile

import keras
import numpy as np

from keras_vit.sublayers import sublayers

POLICIES = ("float32", "mixed_bfloat16")


def check_layer(
    layer_cls,
    init_kwargs,
    input_data=None,
    input_shape=None,
    *,
    expected_output_shape,
    expected_num_trainable_weights,
    expected_num_non_trainable_weights=0,
    expected_num_seed_generators=0,
    call_kwargs=None,
    defines_compute_output_shape=True,
    seed=0,
):
    """Runs the generic checks (module docstring) on `layer_cls(**init_kwargs)`.

    Args:
        layer_cls: the layer class, or a factory returning a layer that accepts `dtype=`
            (e.g. `group_norm`); the clones are made from the returned layer's class.
        init_kwargs: keyword arguments of `layer_cls`.
        input_data: the first call argument: an array (batch, ...) or a tuple of them
            (e.g. (tokens, patch_map)); for a layer with several call arguments, a dict
            {argument name: array}. Or give `input_shape` instead.
        input_shape: shapes structured as `input_data`: standard normal float32 data.
        expected_output_shape: the eager output's shapes, e.g. (2, 7, 8) or
            ((2, 7, 8), (2, 2, 7, 7)) for a layer returning a tuple.
        expected_num_trainable_weights, expected_num_non_trainable_weights,
        expected_num_seed_generators: counts once the layer is built.
        call_kwargs: keyword arguments of every call (e.g. return_attention_weights=True).
        defines_compute_output_shape: False for a layer still without one: then the check
            is that it raises NotImplementedError (so the entry fails once it has one).
        seed: of the input data and of the random weights.
    """
    if (input_data is None) == (input_shape is None):
        raise ValueError("check_layer: give exactly one of input_data and input_shape.")
    rng = np.random.default_rng(seed)
    if input_data is None:
        input_data = _map_shapes(
            lambda shape: rng.standard_normal(shape).astype("float32"), input_shape
        )
    call_kwargs = dict(call_kwargs or {})
    name = getattr(layer_cls, "__name__", repr(layer_cls))
    counts = (
        expected_num_trainable_weights,
        expected_num_non_trainable_weights,
        expected_num_seed_generators,
    )

    # 1. build alone creates every weight.
    layer = layer_cls(**init_kwargs)
    _build(layer, input_data)
    assert layer.built, f"{name}: not built by build()"
    _assert_counts(layer, counts, f"{name} after build()")

    # 2. shapes: symbolic calls and compute_output_shape, with the batch size unknown
    # (None) and known; compute_output_shape sees no call_kwargs, so only the plain call.
    expected = _shape_tuples(expected_output_shape)
    unknown_batch = keras.tree.map_shape_structure(lambda s: (None, *s[1:]), expected)
    for known_batch, want in ((False, unknown_batch), (True, expected)):
        symbolic_layer = layer_cls(**init_kwargs)
        specs = _call(symbolic_layer, _symbolic_inputs(input_data, known_batch), call_kwargs)
        got = _shapes_of(specs)
        assert got == want, f"{name}: symbolic call gives {got}, expected {want}"
        _assert_counts(symbolic_layer, counts, f"{name} after a symbolic call")
        shapes = _input_shapes(input_data, known_batch)
        if not defines_compute_output_shape:
            _assert_no_compute_output_shape(layer, shapes, name)
        elif not call_kwargs:
            got = _shape_tuples(_compute_output_shape(layer, shapes))
            assert got == want, f"{name}: compute_output_shape({shapes}) = {got}, expected {want}"

    _randomize_weights(layer, rng)
    output = _call(layer, input_data, call_kwargs)
    got = _shapes_of(output)
    assert got == expected, f"{name}: eager output shapes {got}, expected {expected}"
    _assert_counts(layer, counts, f"{name} after an eager call")

    # 3. get_config / from_config, then the same output with the same weights.
    config = layer.get_config()
    if isinstance(layer_cls, type):  # a factory's arguments are its own
        missing = sorted(set(init_kwargs) - set(config))
        assert not missing, f"{name}: get_config lacks the arguments {missing}"
    config_json = json.dumps(config, sort_keys=True)
    revived = [
        type(layer).from_config(json.loads(config_json)),
        keras.saving.deserialize_keras_object(
            json.loads(json.dumps(keras.saving.serialize_keras_object(layer)))
        ),
    ]
    for clone in revived:
        assert type(clone) is type(layer), f"{name}: revived as {type(clone).__name__}"
        assert json.dumps(clone.get_config(), sort_keys=True) == config_json, (
            f"{name}: config changed in the round trip:\n{clone.get_config()}\n!=\n{config}"
        )
    clone = revived[0]
    _build(clone, input_data)
    clone.set_weights(layer.get_weights())
    _assert_same_paths(clone, layer, f"{name} from_config")
    _assert_same_output(_call(clone, input_data, call_kwargs), output, f"{name} from_config")

    # 4. A .keras file of a functional model around the layer, safe_mode=True.
    _check_keras_file(layer_cls, init_kwargs, input_data, call_kwargs, rng, name)

    # 5. training=False is the default; training=True runs.
    if "training" in inspect.signature(layer.call).parameters:
        inference = _call(layer, input_data, {**call_kwargs, "training": False})
        _assert_same_output(inference, output, f"{name}(training=False)")
        trained = _call(layer, input_data, {**call_kwargs, "training": True})
        got = _shapes_of(trained)
        assert got == expected, f"{name}(training=True) gives shapes {got}, expected {expected}"

    # 6. dtype policies.
    for policy_name in POLICIES:
        _check_policy(layer_cls, init_kwargs, input_data, call_kwargs, policy_name, name)


def _check_keras_file(layer_cls, init_kwargs, input_data, call_kwargs, rng, name):
    layer = layer_cls(**init_kwargs)
    if isinstance(input_data, dict):
        inputs = {key: keras.Input(x.shape[1:], name=key) for key, x in input_data.items()}
    else:
        inputs = _map_inputs(lambda x: keras.Input(x.shape[1:]), input_data)
    model = keras.Model(inputs, _call(layer, inputs, call_kwargs))
    _randomize_weights(layer, rng)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "layer.keras")
        model.save(path)  # before any call: a layer's random state is saved as it starts
        loaded = keras.saving.load_model(path, safe_mode=True)
    loaded_layer = loaded.get_layer(layer.name)
    assert type(loaded_layer) is type(layer), f"{name}: loaded as {type(loaded_layer).__name__}"
    assert loaded_layer.get_config() == layer.get_config(), f"{name}: .keras changed its config"
    _assert_same_paths(loaded_layer, layer, f"{name} .keras")
    _assert_same_output(loaded(input_data), model(input_data), f"{name} .keras")


def _check_policy(layer_cls, init_kwargs, input_data, call_kwargs, policy_name, name):
    policy = keras.dtype_policies.get(policy_name)
    what = f"{name}(dtype={policy_name!r})"
    layer = layer_cls(**init_kwargs, dtype=policy_name)
    outputs = keras.tree.flatten(_call(layer, input_data, call_kwargs))
    specs = keras.tree.flatten(
        _call_spec(layer, _symbolic_inputs(input_data, False, policy.compute_dtype), call_kwargs)
    )
    for kind, tensors in (("output", outputs), ("symbolic output", specs)):
        dtypes = [keras.backend.standardize_dtype(t.dtype) for t in tensors]
        assert all(d == policy.compute_dtype for d in dtypes if _is_float(d)), (
            f"{what}: {kind} dtypes {dtypes}, expected {policy.compute_dtype}"
        )
    for weight in layer.weights:
        dtype = keras.backend.standardize_dtype(weight.dtype)
        if _is_float(dtype):
            assert dtype == policy.variable_dtype, f"{what}: weight {weight.path} is {dtype}"
    for sublayer in [layer, *sublayers(layer)]:
        assert sublayer.dtype_policy.name == policy_name, (
            f"{what}: sub-layer {sublayer.name} has the policy {sublayer.dtype_policy.name!r}"
        )
    revived = type(layer).from_config(layer.get_config())
    assert revived.dtype_policy.name == policy_name, f"{what}: get_config loses the policy"


# -- Helpers ----------------------------------------------------------------------------


def _map_inputs(fn, inputs):
    """`fn` on every array of `inputs`: an array, a tuple or list of them (one call
    argument), or a dict {call argument name: either}."""
    if isinstance(inputs, dict):
        return {key: keras.tree.map_structure(fn, value) for key, value in inputs.items()}
    return keras.tree.map_structure(fn, inputs)


def _map_shapes(fn, shapes):
    """`fn` on every shape of `shapes`, structured as `_map_inputs`' inputs."""
    if isinstance(shapes, dict):
        return {key: keras.tree.map_shape_structure(fn, value) for key, value in shapes.items()}
    return keras.tree.map_shape_structure(fn, shapes)


def _call(layer, inputs, call_kwargs):
    if isinstance(inputs, dict):
        return layer(**inputs, **call_kwargs)
    return layer(inputs, **call_kwargs)


def _call_spec(layer, specs, call_kwargs):
    if isinstance(specs, dict):
        return layer.compute_output_spec(**specs, **call_kwargs)
    return layer.compute_output_spec(specs, **call_kwargs)


def _build(layer, inputs):
    shapes = _input_shapes(inputs, known_batch=True)
    if isinstance(shapes, dict):
        layer.build(**{f"{key}_shape": shape for key, shape in shapes.items()})
    else:
        layer.build(shapes)


def _compute_output_shape(layer, shapes):
    if isinstance(shapes, dict):
        return layer.compute_output_shape(**{f"{key}_shape": s for key, s in shapes.items()})
    return layer.compute_output_shape(shapes)


def _input_shapes(inputs, known_batch):
    """The shapes of `inputs`, with the batch size None unless `known_batch`."""
    return _map_inputs(lambda x: tuple(x.shape) if known_batch else (None, *x.shape[1:]), inputs)


def _symbolic_inputs(inputs, known_batch, dtype="float32"):
    """KerasTensors like `inputs`, with the batch size None unless `known_batch`."""
    shapes = _input_shapes(inputs, known_batch)
    return _map_shapes(lambda shape: keras.KerasTensor(shape, dtype=dtype), shapes)


def _assert_no_compute_output_shape(layer, shapes, name):
    try:
        _compute_output_shape(layer, shapes)
    except NotImplementedError:
        return
    raise AssertionError(
        f"{name} now defines compute_output_shape: drop defines_compute_output_shape=False "
        "from its entry"
    )


def _shape_tuples(shapes):
    return keras.tree.map_shape_structure(lambda s: tuple(s), shapes)


def _shapes_of(tensors):
    return keras.tree.map_structure(lambda t: tuple(t.shape), tensors)


def _is_float(dtype):
    return "float" in dtype


def _assert_counts(layer, counts, what):
    seed_states = len(layer.non_trainable_variables) - len(layer.non_trainable_weights)
    got = (len(layer.trainable_weights), len(layer.non_trainable_weights), seed_states)
    assert got == counts, (
        f"{what}: (trainable weights, non-trainable weights, seed generators) = {got}, "
        f"expected {counts}"
    )


def _randomize_weights(layer, rng):
    """Random values in every weight, so that a weight lost on the way shows (zeros and
    ones initialisers would hide it)."""
    for weight in layer.weights:
        weight.assign((0.5 * rng.standard_normal(weight.shape)).astype(weight.dtype))


def _assert_same_paths(clone, layer, what):
    got, want = [w.path for w in clone.weights], [w.path for w in layer.weights]
    assert got == want, f"{what}: weight paths {got}, expected {want}"


def _assert_same_output(actual, expected, what):
    actual, expected = keras.tree.flatten(actual), keras.tree.flatten(expected)
    assert len(actual) == len(expected), f"{what}: {len(actual)} outputs, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(e), f"{what}: output {i}"
        )
