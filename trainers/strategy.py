"""`--strategy` → a `tf.distribute.Strategy`.

auto          TPU if one is reachable, else all GPUs (mirrored when >1), else the CPU
              (mirrored over `--cpu_replicas` logical devices when >1).
default       the default (no-op) strategy: one device.
mirrored      MirroredStrategy over the local GPUs, or over `--cpu_replicas` logical CPUs.
multi_worker  MultiWorkerMirroredStrategy; the cluster comes from the TF_CONFIG env var.
tpu           TPUStrategy via TPUClusterResolver(--tpu); `--tpu=local` on a TPU VM.

Call `make_strategy` before any other TensorFlow op: logical devices and collective
ops can only be configured before the runtime starts.
"""

import json
import logging
import os

import tensorflow as tf

STRATEGIES = ("auto", "default", "mirrored", "multi_worker", "tpu")


class NoTPUError(RuntimeError):
    """--strategy=tpu but no TPU can be reached."""


def split_cpu(num_replicas):
    """Splits the host CPU into `num_replicas` logical devices (before TF starts)."""
    if num_replicas <= 1:
        return
    cpus = tf.config.list_physical_devices("CPU")
    current = tf.config.get_logical_device_configuration(cpus[0])
    if current and len(current) == num_replicas:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_replicas
        )
    except RuntimeError as e:
        raise RuntimeError(
            f"--cpu_replicas={num_replicas} must be applied before TensorFlow starts "
            f"its runtime; call make_strategy first ({e})"
        ) from e


def _tpu_strategy(tpu):
    hint = (
        "pass --tpu=NAME (a Cloud TPU name or grpc:// address) or run on a TPU VM "
        "with --tpu=local; use --strategy=auto to fall back to GPUs/CPU"
    )
    if not tpu and not (
        os.environ.get("TPU_NAME") or os.environ.get("KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS")
    ):
        raise NoTPUError(f"--strategy=tpu but no TPU was given or found: {hint}.")
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or None)
        if tpu not in (None, "", "local"):
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except Exception as e:  # the resolver raises many types; the user needs one message
        raise NoTPUError(
            f"--strategy=tpu: cannot reach TPU {tpu or os.environ.get('TPU_NAME')!r} "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}): {hint}."
        ) from e
    if not tf.config.list_logical_devices("TPU"):
        raise NoTPUError(f"--strategy=tpu: TPU {tpu!r} initialised but has no cores: {hint}.")
    return tf.distribute.TPUStrategy(resolver)


def _tpu_available():
    if os.environ.get("TPU_NAME") or os.path.exists("/dev/accel0") or os.path.exists("/dev/vfio/0"):
        try:
            return _tpu_strategy(os.environ.get("TPU_NAME") or "local")
        except NoTPUError as e:
            logging.info("auto strategy: no usable TPU (%s)", e)
    return None


def make_strategy(name="auto", tpu=None, cpu_replicas=1, collective_timeout=None):
    """Returns the tf.distribute.Strategy for `--strategy=name`. A lost worker ends a
    multi-worker run through TensorFlow's coordination service (trainers/faults.py);
    `collective_timeout` (seconds, None: off) adds TensorFlow's per-collective timeout,
    which it documents as a debugging aid."""
    if name not in STRATEGIES:
        raise ValueError(f"--strategy={name!r}: expected one of {', '.join(STRATEGIES)}")
    if name == "tpu" or (name == "auto" and tpu):
        return _tpu_strategy(tpu)
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            logging.warning(
                "--strategy=multi_worker without TF_CONFIG: running as a single-worker cluster"
            )
        else:
            json.loads(os.environ["TF_CONFIG"])  # fail early on malformed JSON
        options = tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=float(collective_timeout) if collective_timeout else None
        )
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if name == "auto":
        strategy = _tpu_available()
        if strategy is not None:
            return strategy
    gpus = tf.config.list_physical_devices("GPU")
    if name == "mirrored" or (name == "auto" and (len(gpus) > 1 or cpu_replicas > 1)):
        if gpus:
            return tf.distribute.MirroredStrategy()
        split_cpu(cpu_replicas)
        devices = [d.name for d in tf.config.list_logical_devices("CPU")][: max(cpu_replicas, 1)]
        return tf.distribute.MirroredStrategy(
            devices=devices,
            cross_device_ops=tf.distribute.ReductionToOneDevice(reduce_to_device=devices[0]),
        )
    return tf.distribute.get_strategy()


def kind(strategy):
    """The `--strategy` name of a strategy object: 'tpu', 'multi_worker', 'mirrored' or
    'default'."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "tpu"
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "multi_worker"
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        return "mirrored"
    return "default"


def device_type(strategy):
    """The type of the devices `strategy`'s replicas run on: 'TPU', 'GPU' or 'CPU'. The
    default strategy runs where TensorFlow places ops: a GPU when there is one."""
    if kind(strategy) == "default":
        return "GPU" if tf.config.list_logical_devices("GPU") else "CPU"
    return tf.DeviceSpec.from_string(strategy.extended.worker_devices[0]).device_type


def dtype_policy(strategy, mixed_precision):
    """The Keras dtype policy a run trains in: float32, or with `mixed_precision`
    mixed_bfloat16 on every device (TPUs, GPUs from Ampere on, CPUs with AVX-512-BF16
    or AMX). bfloat16 has float32's range, so the training step (trainers/train_step.py)
    needs no loss scaling; on a GPU without bfloat16 train in float32."""
    del strategy  # the same on every device
    return "mixed_bfloat16" if mixed_precision else "float32"


def is_chief(strategy):
    """True on the worker that writes the run directory (always, outside multi-worker)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "cluster_spec", None):
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if not resolver.cluster_spec().as_dict():
        return True
    return task_type in (None, "chief") or (
        task_type == "worker" and task_id == 0 and "chief" not in resolver.cluster_spec().as_dict()
    )


def worker_index(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    return int(getattr(resolver, "task_id", 0) or 0) if resolver is not None else 0


def this_task():
    """(job, index) of this process in TF_CONFIG's cluster, or None without one."""
    try:
        task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {}
    except (ValueError, AttributeError):
        return None
    return (task["type"], int(task.get("index", 0))) if task.get("type") else None
