#!/usr/bin/env bash
# The GPU speed run: keras_vit vs keras-hub (JAX) vs timm (PyTorch) on one GPU,
# ViT-B/16 224 px, batch 256, mixed_bfloat16, training step then inference.
#
# The target machine has JAX with CUDA, PyTorch and timm but no TensorFlow, no
# Keras and no network: Keras and its light dependencies travel as wheels.
#
#   bash benchmarks/gpu_run.sh wheels      # here, with network: fill .whl/
#   bash benchmarks/gpu_run.sh             # there (Python 3.12): install, run
#
# Environment: WHEEL_DIR (default .whl), OUT (results folder, default
# /tmp/speed_gpu), BATCH (256), ROUNDS (3), STEPS (10), MATMUL_N (8192),
# VARIANT (ViT_B16), MODES ("train inference"), PYTHON (python3).
# Each run writes $OUT/<mode>.json and .log; the tables go to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL_DIR=${WHEEL_DIR:-.whl}
PYTHON=${PYTHON:-python3}
# Versions this repo was tested with; optree is compiled, for CPython 3.12.
WHEELS="keras==3.15.1 namex==0.1.0 optree==0.20.0 keras-hub==0.32.0 kagglehub==1.0.3 kagglesdk==0.1.28"

if [[ "${1:-}" == "wheels" ]]; then
  mkdir -p "$WHEEL_DIR"
  # shellcheck disable=SC2086
  "$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHEEL_DIR" $WHEELS
  exit 0
fi

OUT=${OUT:-/tmp/speed_gpu}
SITE=${SITE:-/tmp/site}
mkdir -p "$OUT"
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" "$WHEEL_DIR"/*.whl
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export KERAS_BACKEND=jax
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # timm shares the GPU with JAX
"$PYTHON" - <<'EOF'
import importlib.util, sys
import jax, keras
print("jax", jax.__version__, jax.devices(), "keras", keras.__version__, keras.backend.backend())
if importlib.util.find_spec("tensorflow"):
    print("note: tensorflow is importable here; keras_vit does not use it")
import keras_vit  # must import without TensorFlow
assert "tensorflow" not in sys.modules, "keras_vit imported tensorflow"
EOF
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu \
  --format=csv,noheader || true

for mode in ${MODES:-train inference}; do
  "$PYTHON" benchmarks/speed.py --variant="${VARIANT:-ViT_B16}" --batch="${BATCH:-256}" \
    --dtype=mixed_bfloat16 --mode="$mode" --compile=xla \
    --libraries=keras_vit,keras_vit_padded,keras_hub,timm,matmul --timm_compile \
    --rounds="${ROUNDS:-3}" --steps="${STEPS:-10}" --matmul_n="${MATMUL_N:-8192}" \
    --json="$OUT/$mode.json" 2>&1 | tee "$OUT/$mode.log" | grep -v -E "^(WARNING|I0000|W0000)"
done
