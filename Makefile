# The README's commands. `make demo` sets everything up and runs the main job;
# `make test` sets everything up and runs the test suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
FMNIST := /usr/share/datasets/fashion-mnist

.PHONY: setup data lint format test test-fast wheel-check demo clean

setup: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[tensorflow-cpu,train,tflite,test]'
	touch $@

# Fashion-MNIST IDX files from Debian's package `dataset-fashion-mnist`.
data:
	@if [ ! -f $(FMNIST)/t10k-labels-idx1-ubyte.gz ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -q dataset-fashion-mnist \
	    || ( $$SUDO apt-get update -q && $$SUDO apt-get install -y -q dataset-fashion-mnist ); \
	fi

# The numeric tests again with TensorFlow's other CPU kernels (Eigen instead of oneDNN):
# another summation order on any machine, so that no tolerance is fitted to one. XLA has its
# own CPU code, which the variable does not change (the same bits either way), so the `xla`
# cases of test_fidelity run once, in the first pass.
NUMERIC_TESTS := tests/test_fidelity.py tests/test_layers.py tests/test_hybrid_layers.py \
	tests/test_hybrid.py tests/test_fused_attention.py

# One style (pyproject.toml [tool.ruff]): `make format` applies it.
lint: setup
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/ruff check --quiet .

format: setup
	$(VENV)/bin/ruff format --quiet .
	$(VENV)/bin/ruff check --quiet --fix .

# The suite on two worker processes (pytest-xdist), each module on one of them (its module
# fixtures are built once): most tests are bound by one thread (tracing, converters, child
# processes), so two workers keep both cores busy (665 s -> 398-517 s on the 2-core Xeon;
# three workers gave 473 s against two's 452 s, no gain). PYTEST_WORKERS=0 runs the suite
# in this process. Then four short stages, side by side (each its output when it ends):
# the numeric tests with oneDNN off, the core tests on the oldest Keras, keras_vit on the
# torch backend (fidelity, serialisation, attention, layers, the interop references:
# tests/torch_stage.txt; torch's CPU wheel from the package index, installed first), and
# the wheel check. Each is one process (starting two pytest workers costs a short stage
# more than it gives), so run one after another they left a core idle at times: about
# 215 s in a row on the 2-core AMD EPYC Zen 5 (2026-12-07, a fresh clone's `make test`),
# 189 s side by side (they are CPU-bound: about 300 s of CPU between them).
PYTEST_WORKERS ?= 2
test: setup data lint
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder tests
	$(PY) -m pip install -q -e '.[torch,interop-test]'
	$(MAKE) --no-print-directory -j3 --output-sync=target \
	  test-numeric test-oldest-keras test-torch wheel-check

.PHONY: test-numeric test-torch
test-numeric: setup
	TF_ENABLE_ONEDNN_OPTS=0 $(PY) -m pytest -q -k "not xla or no_xla" $(NUMERIC_TESTS)

test-torch: setup
	KERAS_BACKEND=torch $(PY) -m pytest -q $$(cat tests/torch_stage.txt)

# The library's core tests (fidelity, layers, serialisation) on the oldest Keras that
# setup.cfg's install_requires allows (`keras>=X`): a user's pip may pick any Keras in the
# range, and the venv has the newest. That Keras alone goes first on PYTHONPATH (TensorFlow
# and the rest stay the venv's), installed once under the venv; the version is checked.
OLDEST_KERAS := $(shell sed -n 's/^ *keras>=\([0-9.]*\),.*/\1/p' setup.cfg)
OLDEST_KERAS_DIR := $(abspath $(VENV)/keras-$(OLDEST_KERAS))
CORE_TESTS := tests/test_fidelity.py tests/test_layers.py tests/test_serialization.py
.PHONY: test-oldest-keras
test-oldest-keras: setup
	test -f $(OLDEST_KERAS_DIR)/.installed || ( rm -rf $(OLDEST_KERAS_DIR) && \
	  $(PY) -m pip install -q --no-deps --target $(OLDEST_KERAS_DIR) keras==$(OLDEST_KERAS) && \
	  touch $(OLDEST_KERAS_DIR)/.installed )
	PYTHONPATH=$(OLDEST_KERAS_DIR) $(PY) -c "import keras; from packaging.version import Version; \
	  assert Version(keras.__version__) == Version('$(OLDEST_KERAS)'), keras.__file__"
	PYTHONPATH=$(OLDEST_KERAS_DIR) $(PY) -m pytest -q $(CORE_TESTS)

# The inner loop (docs/testing.md): the suite without the tests marked slow (tests/conftest.py
# SLOW_MODULES, SLOW_TESTS), on the same two workers; no lint, no other stages.
test-fast: setup data
	$(PY) -m pytest -q -m "not slow" -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder tests

# keras_vit as a library (docs/testing.md): the sdist and the wheel built from a copy of the
# tree, twine-checked, the wheel installed into a fresh venv (no TensorFlow) and a tiny model
# run there under KERAS_BACKEND=numpy, outside the repository.
wheel-check: setup
	$(PY) .ci/wheel_check.py

# DEMO_STARTED: when make began (read as the Makefile is read, before the set-up), so that
# the demo's 15 minutes count the set-up too (tools/demo_budget.py).
demo: DEMO_STARTED := $(shell date +%s)
demo: setup data
	$(PY) tools/demo.py --started=$(DEMO_STARTED)

clean:
	rm -rf $(VENV) build *.egg-info

# Speed side by side (docs/speed.md): keras_vit, keras-hub and timm, interleaved.
.PHONY: bench-speed
bench-speed: setup
	# keras-hub without tensorflow-text, which would pull the full tensorflow over tensorflow-cpu.
	$(PY) -m pip install -q timm torch==2.13.0 kagglehub regex rich sentencepiece tokenizers
	$(PY) -m pip install -q --no-deps keras-hub
	$(PY) benchmarks/speed.py --variant=ViT_B16 --batch=8 --compile=default,xla \
	  --json=/tmp/keras_vit_speed.json
