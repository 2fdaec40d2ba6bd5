r"""A tf.data service dispatcher or worker, for `config.input.data_service`: the
training stream's decoding, augmentation and batching then run on CPU hosts
(docs/training.md, "Input on tf.data service workers").

  python tools/data_service.py --role=dispatcher --port=5050
  python tools/data_service.py --role=worker --dispatcher=HOST:5050 [--port=P]

then train with --config.input.data_service=grpc://HOST:5050. Prints one line when
the server is ready (with the port it listens on: --port=0 picks a free one) and runs
until SIGTERM or SIGINT, then exits with 0 (a dispatcher stops its server first; a
worker exits at once: `main`).

A worker tells the dispatcher (and through it the trainers) that it is reached at
--host (default: this machine's name); give an address the trainers can resolve. The
workers read the data files themselves (the paths the trainer's reader names), so
they need the same --data_dir (a shared file system or a bucket). --work_dir (a
dispatcher's) keeps its state there, so a restarted dispatcher resumes its jobs
(tf.data's fault-tolerant mode).
"""

import os
import signal
import socket
import threading

from absl import app, flags

from keras_vit_cli import console

if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported: our lines only

FLAGS = flags.FLAGS
flags.DEFINE_enum("role", None, ["dispatcher", "worker"], "Which server to run.")
flags.DEFINE_integer(
    "port", None, "The port to listen on (0: a free one; default 5050 dispatcher, 0 worker)."
)
flags.DEFINE_string("dispatcher", None, "HOST:PORT of the dispatcher (--role=worker).")
flags.DEFINE_string(
    "host", None, "The name the trainers reach this worker by (default: this machine's name)."
)
flags.DEFINE_string(
    "work_dir", None, "Dispatcher state directory (fault-tolerant mode); None: in memory."
)

DISPATCHER_PORT = 5050


def _strip_scheme(address):
    return address.split("://", 1)[-1]


def start(role, port=None, dispatcher=None, host=None, work_dir=None):
    """The started server and its ready line."""
    import tensorflow as tf

    service = tf.data.experimental.service
    host = host or socket.gethostname()
    if role == "dispatcher":
        port = DISPATCHER_PORT if port is None else port
        config = service.DispatcherConfig(
            port=port, work_dir=work_dir, fault_tolerant_mode=bool(work_dir)
        )
        server = service.DispatchServer(config)
        port = int(server.target.rsplit(":", 1)[1])
        return server, f"data_service: dispatcher ready at grpc://{host}:{port}"
    if not dispatcher:
        raise app.UsageError("--role=worker needs --dispatcher=HOST:PORT")
    config = service.WorkerConfig(
        dispatcher_address=_strip_scheme(dispatcher),
        worker_address=f"{host}:%port%",
        port=port or 0,
    )
    server = service.WorkerServer(config)
    port = int(server._address.rsplit(":", 1)[1])  # the port it bound (--port=0)
    return server, f"data_service: worker ready at {host}:{port} for dispatcher {dispatcher}"


def main(argv):
    del argv
    if not FLAGS.role:
        raise app.UsageError("--role=dispatcher or --role=worker is required")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server, ready = start(FLAGS.role, FLAGS.port, FLAGS.dispatcher, FLAGS.host, FLAGS.work_dir)
    print(ready, flush=True)
    while not stop.wait(1.0):
        pass
    print(f"data_service: {FLAGS.role} stopped", flush=True)
    if FLAGS.role == "dispatcher":
        server._stop()  # tf.data's servers have no public stop
    else:
        # A worker's stop can wait on the tasks of jobs whose trainers still hold them,
        # and waits holding the GIL: the process exits instead (its tasks end with it;
        # the dispatcher drops the worker when its heartbeats stop).
        os._exit(0)


if __name__ == "__main__":
    console.run_app(main)
