import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tiny_models


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def tiny_vit():
    """tests/tiny_models.tiny_vit: `tiny_vit(**overrides)` -> a tiny VisionTransformer."""
    return tiny_models.tiny_vit


@pytest.fixture
def tiny_hybrid():
    """tests/tiny_models.tiny_hybrid: `tiny_hybrid(**overrides)` -> a tiny ResNet + ViT."""
    return tiny_models.tiny_hybrid


@pytest.fixture(autouse=True)
def _op_determinism_off_after():
    """A test that runs a trainer in this process (train_lib.run with deterministic_ops)
    turns TensorFlow's op determinism on for the whole process, and Keras then compiles
    no XLA in any later test of that worker (test_compilation's rule fails after
    test_controller): turned off after each test. No test turns it on otherwise.

    A workaround, fenced here: TensorFlow's public API can turn op determinism on
    (tf.config.experimental.enable_op_determinism) but neither off nor ask; its module
    tensorflow.python.framework.config can (Keras' own trainer tests use it so)."""
    import sys

    yield
    if "tensorflow" in sys.modules:
        from tensorflow.python.framework import config

        if config.is_op_determinism_enabled():
            config.disable_op_determinism()


def pytest_configure(config):
    import keras

    keras.utils.set_random_seed(0)


# The modules that take longest (trainers, converters and other backends in child
# processes), first, longest first: with `make test`'s two workers (one module each at a
# time), the long ones then overlap the many short ones instead of ending the run on one
# worker (the order of their durations in a first pass on the 2-core AMD EPYC Zen 5,
# 2026-12-07; a module left out runs in file order after these). The Makefile passes
# `--no-loadscope-reorder`: pytest-xdist would otherwise sort the modules by their number
# of tests, and a one-test module of 90 s would end the run alone.
LONG_MODULES = (
    "test_train_faults",
    "test_all_configs",
    "test_export_tflite",
    "test_walkthrough",
    "test_export_openvino",
    "test_layer_conformance",
    "test_export_onnx",
    "test_train_strategies",
    "test_export_savedmodel",
    "test_data_service",
    "test_console",
    "test_fidelity",
    "test_dynamic_resolution",
    "test_augment",
    "test_decoded_cache",
    "test_finetune_families",
    "test_train_datasets",
    "test_tfds_prepare",
    "test_train_resume",
    "test_mistakes",
    "test_remote_paths",
    "test_serving_rest",
    "test_train_tpu_shaped",
    "test_fewshot_subset",
)


# The slow tier (`-m slow`; `make test-fast` runs `-m "not slow"`): tests over ~5 s on a
# 2-core machine (trainers and converters in child processes, other backends, exports
# of trained models; docs/testing.md). Whole modules, then single tests (every parameter).
SLOW_MODULES = (
    "test_all_configs",
    "test_console",
    "test_export_onnx",
    "test_export_openvino",
    "test_export_savedmodel",
    "test_export_tflite",
    "test_fewshot_subset",
    "test_hybrid_backends",
    "test_serving_rest",
    "test_train_faults",
    "test_train_fewshot",
    "test_train_resume",
    "test_train_strategies",
    "test_train_datasets",
    "test_train_tpu_shaped",
    "test_data_service",
    "test_mistakes",
    "test_walkthrough",
    "test_tfds_prepare",
    "test_programs_anywhere",
)
SLOW_TESTS = {
    "test_augment": (
        "test_a_pipeline_feeding_two_replicas_resumes_on_the_same_batches",
        "test_augmented_stream_is_deterministic_and_resumable",
        "test_mixing_needs_class_labels",
        "test_no_augmentation_is_todays_stream",
        "test_pipeline_randaugments_each_example_with_its_own_seed",
        "test_randaug_works_on_any_size_in_graph_mode",
    ),
    "test_checkpoint": (
        "test_loader_and_model_import_without_a_cycle",
        "test_run_directory_and_weights_h5_with_config",
    ),
    "test_convert_checkpoint": ("test_npz_to_keras_and_weights_h5",),
    "test_data_pipeline": (
        "test_pipelines_split_each_global_batch_exactly",
        "test_resume_past_records_that_do_not_decode_sees_the_uninterrupted_batches",
        "test_stream_is_deterministic_and_resumable",
    ),
    "test_dynamic_resolution": (
        "test_jax_backend_at_any_size",
        "test_plain_model_at_any_size_equals_a_model_built_at_that_size",
    ),
    "test_feature_extractor": ("test_inside_a_functional_graph_trained_and_saved",),
    "test_fidelity": (
        "test_gap_model_resized_and_non_square",
        "test_new_num_classes_gives_zero_head_and_keeps_body",
        "test_position_embedding_resize_224_to_288",
        "test_token_model_named_builder",
    ),
    "test_finetune_controls": ("test_frozen_backbone_is_bitwise_unchanged_and_the_head_trains",),
    "test_grad_accum": ("test_accumulated_micro_batches_equal_one_big_batch",),
    "test_hybrid": ("test_named_builder_through_the_registry",),
    "test_inspect_tools": (
        "test_visualize_writes_the_four_figures",
        "test_fewshot_tool_reports_every_shot_count",
        "test_fewshot_evaluator_records_each_step_it_runs",
    ),
    "test_interop": (
        "test_savedmodel_export_of_a_timm_file",
        "test_savedmodel_uses_the_recorded_normalisation",
    ),
    "test_layer_conformance": ("test_every_entry_passes_under_the_other_backend",),
    "test_make_tfrecords": ("test_undecodable_image_is_skipped_counted_and_named",),
    "test_masked_patch": ("test_a_few_steps_reduce_the_loss", "test_runs_on_the_jax_backend"),
    "test_masked_patch_trainer": (
        "test_pretrain_exports_the_plain_vit_and_finetune_loads_it",
        "test_train_examples_limits_the_training_set_to_its_first_records",
    ),
    "test_pixel_limit": ("test_the_limit_is_recorded_in_the_saved_model",),
    "test_decoded_cache": ("test_the_demo_config_trains_on_a_folder_of_mixed_sizes",),
    "test_train_errors": ("test_nan_loss_stops_and_keeps_last_good_checkpoint",),
    "test_shape_mistakes": (
        "test_the_trainer_exits_2_with_one_line_and_writes_nothing",
        "test_every_program_shows_the_traceback_when_asked",
    ),
    "test_finetune_families": (
        "test_dinov2_with_registers_keeps_the_files_options_and_frozen_backbone",
        "test_siglip_fine_tunes_its_attention_pooling_under_layer_decay",
        "test_a_family_config_takes_the_sizes_of_a_smaller_file",
    ),
    "test_remote_paths": ("test_records_pretrain_kill_resume_evaluate_export_on_ram",),
    "test_serialization": ("test_jax_backend_matches_tensorflow",),
    "test_train_config": (
        "test_config_flag_accepts_a_builder_name_for_a_dict_model",
        "test_finetune_with_an_init_of_another_model_exits_2_naming_the_builder",
    ),
}


def _module_name(item):
    return item.module.__name__.rsplit(".", 1)[-1]


def _is_slow(item):
    module = _module_name(item)
    if module in SLOW_MODULES:
        return True
    names = SLOW_TESTS.get(module, ())
    for name in names:
        if not hasattr(item.module, name):
            raise pytest.UsageError(f"tests/conftest.py SLOW_TESTS: {module} has no test {name!r}")
    return item.originalname in names


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(_module_name(item), len(rank)))
