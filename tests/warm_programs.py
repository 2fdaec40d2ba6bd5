"""Our programs started as forks of a warm interpreter: the tests' way to start a trainer,
a tool or a benchmark without paying TensorFlow's import in every process.

A fresh `python -m keras_vit_trainers.pretrain ...` spends 4-7 s of CPU importing
TensorFlow, Keras and keras_vit before it reads a flag, and the suite starts a few hundred
such processes. `Popen(cmd, ...)` here starts the same program as a child of a server
process (one per pytest worker, started at its first use) that has imported those
libraries once and forks for each command: the child is a real process with its own pid,
its own file descriptors (the caller's pipes), working folder and environment, that
TensorFlow initialises after the fork (no TensorFlow op runs in the server: no thread
pool, no device, no gRPC exists before the fork). kill -9, SIGTERM, SIGSTOP, exit codes,
pipes, files and multi-worker collectives behave as in a fresh process.

A command is forked only when a fresh process could not tell the difference:
- it is `sys.executable -m MODULE ARGS`, `sys.executable -c CODE ARGS`, `sys.executable
  SCRIPT.py ARGS` (no other interpreter option) or a console script of this Python's (`keras-vit-pretrain ARGS`), with only the
  Popen arguments of `_POPEN_ARGS`;
- every environment variable read while the libraries import (`IMPORT_TIME_ENV`: the Keras
  backend, TensorFlow's oneDNN and C++ logging switches, Python's own, the locale, ...)
  has the server's value.
Anything else starts a fresh process (subprocess.Popen), as does every command when
KERAS_VIT_TEST_FRESH_PROCESSES=1. Tests of what a process prints while it starts (the
console's filter of the libraries' import lines, programs started from any folder) ask for
`fresh=True`.

What differs from a fresh process, and why no test depends on it: the child's stdin is
/dev/null when the caller gives none (our programs read no stdin); its parent is the server,
so the caller reaps it through the server (`wait`, `poll`, `communicate` as Popen's);
NumPy's global generator is reseeded from the OS, as a fresh process seeds it.
"""

import atexit
import contextlib
import io
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

FRESH_ENV = "KERAS_VIT_TEST_FRESH_PROCESSES"
LOG_ENV = "KERAS_VIT_TEST_WARM_LOG"  # a file: one line a command, forked or why fresh
# The environment the server imports under: this process's as it was when this module was
# imported (at collection), not as a test that sets a variable for itself leaves it.
_BASE_ENV = dict(os.environ)
SOCKET, DESCRIPTION = "socket", "server.json"  # in the server's folder
# What the server imports before it forks: the libraries every program imports first.
PRELOAD = ("tensorflow", "keras", "keras_vit")
# Environment variables read at start-up or while PRELOAD imports; a command whose value of
# any of them differs from the server's starts fresh.
IMPORT_TIME_ENV = (
    "KERAS_BACKEND",
    "KERAS_HOME",
    "HOME",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_CPP_MAX_VLOG_LEVEL",
    "TF_CPP_VMODULE",
    "ABSL_MIN_LOG_LEVEL",
    "TF_USE_LEGACY_KERAS",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "GLIBC_TUNABLES",
    "MALLOC_ARENA_MAX",
    "TMPDIR",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
)
_POPEN_ARGS = {"cwd", "env", "stdin", "stdout", "stderr", "text", "universal_newlines"}
READY_S = 120


def _import_time_values(env):
    python = {k: v for k, v in env.items() if k.startswith("PYTHON")}
    return {k: env.get(k) for k in IMPORT_TIME_ENV} | python


def _console_script(path):
    """Whether `path` is a console script that this Python runs (its `#!` line)."""
    try:
        with open(path, "rb") as f:
            return f.readline().strip() == b"#!" + os.fsencode(sys.executable)
    except OSError:
        return False


def _program(cmd):
    """`cmd` as the server's child runs it (`-m MODULE ARGS`, `-c CODE ARGS`, `- ARGS`: the
    code on stdin, or `SCRIPT ARGS`), or None."""
    if isinstance(cmd, (str, bytes)) or not cmd:
        return None
    cmd = [os.fspath(a) for a in cmd]
    if cmd[0] != sys.executable:
        return cmd if _console_script(cmd[0]) else None
    if len(cmd) >= 3 and cmd[1] in ("-m", "-c"):
        return cmd[1:]
    if len(cmd) >= 2 and (cmd[1] == "-" or cmd[1].endswith(".py")):
        return cmd[1:]
    return None


def _different_imports(env, server):
    """The import-time variables whose value in `env` is not the server's (its
    `server.json`): [] when a process with `env` imports what the server imported."""
    verbosity = server["verbosity_env"]
    if env.get(verbosity, "").strip().lower() == "library":
        return [verbosity]  # the libraries' own logging, which the server silenced
    values = _import_time_values(env)
    values["KERAS_BACKEND"] = values["KERAS_BACKEND"] or server["backend"]
    for key, value in server["quiet"].items():  # what every program sets when unset
        if key in values:
            values[key] = values[key] or value
    theirs = server["import_time_values"]
    added = _added_paths(values.get("PYTHONPATH"), theirs.get("PYTHONPATH"))
    if added is not None and not _shadowing(added, server["modules"]):
        values["PYTHONPATH"] = theirs.get("PYTHONPATH")  # the child puts `added` on its path
    return sorted(k for k in set(values) | set(theirs) if values.get(k) != theirs.get(k))


def _added_paths(ours, theirs):
    """The folders of PYTHONPATH `ours` that `theirs` lacks, or None if it drops one."""
    ours, theirs = (value.split(os.pathsep) if value else [] for value in (ours, theirs))
    return [p for p in ours if p not in theirs] if set(theirs) <= set(ours) else None


def _shadowing(paths, modules):
    """Whether a folder of `paths` holds a top-level module the server imported (a fresh
    process would import that one instead)."""
    for path in paths:
        with contextlib.suppress(OSError):
            if {name.split(".")[0] for name in os.listdir(path or ".")} & set(modules):
                return True
    return False


def base_env(**extra):
    """The environment the server imported under, with `extra`: what a test of the
    forking itself gives its commands (other tests may have left variables set)."""
    return {**_BASE_ENV, **extra}


def _why_fresh(cmd, kwargs, env):
    """Why `cmd` starts fresh, or None: it forks."""
    if os.environ.get(FRESH_ENV) == "1":
        return FRESH_ENV
    if set(kwargs) - _POPEN_ARGS:
        return f"Popen arguments {sorted(set(kwargs) - _POPEN_ARGS)}"
    if _program(cmd) is None or cmd[1] == "-":  # code on stdin: for the relay only
        return "not a program of this Python's"
    if kwargs.get("stdin") not in (None, subprocess.DEVNULL):
        return "stdin"
    different = _different_imports(env, _server().description())
    return f"import-time variables {different}" if different else None


def Popen(cmd, *, fresh=False, **kwargs):
    """subprocess.Popen(cmd, **kwargs), forked from the warm server when it can be."""
    env = kwargs.get("env")
    env = dict(os.environ if env is None else env)
    why = "fresh=True" if fresh else _why_fresh(cmd, kwargs, env)
    if os.environ.get(LOG_ENV):
        with open(os.environ[LOG_ENV], "a") as f:
            f.write(f"{why or 'forked'}\t{' '.join(map(str, cmd))[:200]!r}\n")
    if why:
        return subprocess.Popen(cmd, **kwargs)
    return ForkedProcess(cmd, **{**kwargs, "env": env})


def run(cmd, *, timeout=None, capture_output=False, check=False, fresh=False, **kwargs):
    """subprocess.run through `Popen` (its arguments: capture_output, timeout, check)."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with Popen(cmd, fresh=fresh, **kwargs) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
    result = subprocess.CompletedProcess(cmd, process.returncode, out, err)
    if check:
        result.check_returncode()
    return result


# --- the caller's side ------------------------------------------------------------------


def _connect(folder):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.path.join(folder, SOCKET))
    return conn


class _Server:
    """The server process of this (pytest worker) process, in its own folder (its socket and
    `server.json`: its Keras backend and the import-time variables it started with)."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="keras_vit_warm_")
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(os.getpid())],
            cwd=self.folder,  # nothing of the repository's folders on its path
            env=_BASE_ENV,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._description = None

    def description(self):
        """server.json, once the server is ready."""
        if self._description is None:
            line = self.process.stdout.readline()  # "ready" once PRELOAD is imported
            if line.strip() != "ready":
                raise RuntimeError(f"tests/warm_programs.py: the server did not start: {line!r}")
            with open(os.path.join(self.folder, DESCRIPTION)) as f:
                self._description = json.load(f)
        return self._description

    def connect(self):
        self.description()
        return _connect(self.folder)

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def relay_folder():
    """The server's folder, for `relay_bin`'s `python` (started now if it was not)."""
    server = _server()
    server.description()
    return server.folder


def relay_bin(folder):
    """A folder holding a `python` that forks what it can from the server in `folder` and
    runs the rest as this Python (for the shell scripts of the tests: a page's blocks)."""
    bin_dir = os.path.join(folder, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    python = os.path.join(bin_dir, "python")
    if not os.path.exists(python):
        with open(python, "w") as f:
            f.write(
                f'#!/bin/sh\nexec "{sys.executable}" -S -E "{os.path.abspath(__file__)}" '
                f'--relay "{folder}" "$@"\n'
            )
        os.chmod(python, 0o755)
    return bin_dir


_server_instance = None
_server_lock = threading.Lock()


def _server():
    global _server_instance
    with _server_lock:
        if _server_instance is None:
            _server_instance = _Server()
            atexit.register(_server_instance.close)
        return _server_instance


def _send(conn, message, fds=()):
    data = json.dumps(message).encode() + b"\n"
    if fds:
        socket.send_fds(conn, [data], list(fds))
    else:
        conn.sendall(data)


class _Lines:
    """Newline-separated JSON messages from a socket."""

    def __init__(self, conn):
        self.conn, self.buffer = conn, b""

    def next(self, timeout):
        """The next message, None on a timeout (0: do not wait); EOFError at the end."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            self.conn.settimeout(left)
            try:
                chunk = self.conn.recv(4096)
            except (TimeoutError, BlockingIOError):
                return None
            if not chunk:
                raise EOFError("the warm server closed the connection")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


class ForkedProcess:
    """subprocess.Popen's interface (pid, returncode, stdout/stderr, poll, wait,
    communicate, send_signal, terminate, kill, a context manager) for a child of the server.
    """

    def __init__(self, cmd, *, env, cwd=None, stdin=None, stdout=None, stderr=None, **text):
        self.args = cmd
        self.returncode = None
        text_mode = bool(text.get("text") or text.get("universal_newlines"))
        ours, to_close = {}, []

        def target(spec, fd_if_none):
            if spec is None:
                return fd_if_none
            if spec == subprocess.DEVNULL:
                fd = os.open(os.devnull, os.O_RDWR)
                to_close.append(fd)
                return fd
            if spec == subprocess.PIPE:
                read, write = os.pipe()
                to_close.append(write)
                return read, write
            return spec if isinstance(spec, int) else spec.fileno()

        stdin_fd = target(subprocess.DEVNULL if stdin is None else stdin, 0)
        out = target(stdout, 1)
        if isinstance(out, tuple):
            ours["stdout"], out = out
        err = out if stderr == subprocess.STDOUT else target(stderr, 2)
        if isinstance(err, tuple):
            ours["stderr"], err = err
        theirs = [stdin_fd, out, err]
        self.stdin = None
        for name in ("stdout", "stderr"):
            stream = None
            if name in ours:
                stream = io.open(ours[name], "rb")
                if text_mode:
                    stream = io.TextIOWrapper(stream)
            setattr(self, name, stream)
        self._text = text_mode
        self._conn = _server().connect()
        try:
            request = {"argv": _program(cmd), "env": env, "cwd": os.path.abspath(cwd or ".")}
            _send(self._conn, request, theirs)
        finally:
            for fd in to_close:
                os.close(fd)
        self._messages = _Lines(self._conn)
        reply = self._messages.next(READY_S)
        if not reply or "pid" not in reply:
            raise RuntimeError(f"tests/warm_programs.py: no child for {cmd}: {reply}")
        self.pid = reply["pid"]
        self._readers = None
        self._output = {}

    def poll(self):
        if self.returncode is None:
            with contextlib.suppress(EOFError):
                message = self._messages.next(0)
                if message is not None:
                    self._ended(message)
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            message = self._messages.next(timeout)
            if message is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._ended(message)
        return self.returncode

    def _ended(self, message):
        self.returncode = message["returncode"]
        self._conn.close()

    def communicate(self, input=None, timeout=None):
        if input is not None:
            raise ValueError("tests/warm_programs.py: the forked programs read no stdin")
        if self._readers is None:
            self._readers = []
            for name in ("stdout", "stderr"):
                stream = getattr(self, name)
                if stream is not None:
                    self._output[name] = []
                    reader = threading.Thread(
                        target=lambda s=stream, o=self._output[name]: o.append(s.read()),
                        daemon=True,
                    )
                    reader.start()
                    self._readers.append(reader)
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in self._readers:
            reader.join(None if deadline is None else max(deadline - time.monotonic(), 0))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0))
        result = []
        for name in ("stdout", "stderr"):
            if name in self._output:
                getattr(self, name).close()
                result.append(self._output[name][0] if self._output[name] else "")
            else:
                result.append(None)
        return tuple(result)

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for stream in (self.stdout, self.stderr):
            if stream is not None and not stream.closed and self._readers is None:
                stream.close()
        self.wait()


# --- the server's side --------------------------------------------------------------------


def _serve(parent_pid, quiet):
    """Accepts requests until the caller goes; returns (request, fds) in a forked child."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(SOCKET)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    children = {}  # pid -> the connection that asked for it
    description = {
        "backend": sys.modules["keras"].backend.backend(),
        "modules": sorted({name.split(".")[0] for name in sys.modules}),
        "quiet": quiet,
        "verbosity_env": sys.modules["keras_vit_cli.console"].VERBOSITY_ENV,
    }
    description["import_time_values"] = _import_time_values(os.environ)
    description["import_time_values"]["KERAS_BACKEND"] = description["backend"]
    with open(DESCRIPTION, "w") as f:
        json.dump(description, f)
    print("ready", flush=True)
    while os.getppid() == parent_pid:
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is wake_read:
                os.read(wake_read, 4096)
                continue
            conn, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            while not message.endswith(b"\n"):
                message += conn.recv(1 << 20)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                selector.close()
                for fd in (wake_read, wake_write):
                    os.close(fd)
                listener.close()
                conn.close()
                for other in children.values():
                    other.close()
                return json.loads(message), fds
            for fd in fds:
                os.close(fd)
            _send(conn, {"pid": pid})
            children[pid] = conn
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    _send(conn, {"returncode": os.waitstatus_to_exitcode(status)})
                conn.close()
    sys.exit(0)


def _run(request, fds):
    """In the child: the caller's descriptors, folder and environment, then the program as
    `python -m MODULE` or `python SCRIPT` runs it."""
    import runpy

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    added = _added_paths(request["env"].get("PYTHONPATH"), os.environ.get("PYTHONPATH")) or []
    os.environ.clear()
    os.environ.update(request["env"])
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    argv = request["argv"]
    if argv[0] in ("-c", "-"):
        first = ""
    elif argv[0] == "-m":
        first = os.getcwd()
    else:
        first = os.path.dirname(os.path.abspath(argv[0]))
    sys.path[0:0] = [first, *added]  # where Python puts them: its first entry, PYTHONPATH
    if argv[0] in ("-c", "-"):
        code, name = (argv[1], "<string>") if argv[0] == "-c" else (sys.stdin.read(), "<stdin>")
        sys.argv = [argv[0], *argv[1 + (argv[0] == "-c") :]]
        exec(compile(code, name, "exec"), {"__name__": "__main__"})
    elif argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        runpy.run_path(argv[0], run_name="__main__")


def _relay(folder, args):
    """`python ARGS` (the `python` of `relay_bin`): forked by the server in `folder` with this
    process's descriptors, folder and environment when it can be, this process ending as
    the child ends (its exit code, or the signal that ended it; SIGTERM, SIGINT and SIGHUP
    passed on); else this Python itself, in this process."""
    cmd = [sys.executable, *args]
    with open(os.path.join(folder, DESCRIPTION)) as f:
        server = json.load(f)
    if (
        os.environ.get(FRESH_ENV) == "1"
        or not _program(cmd)
        or _different_imports(os.environ, server)
    ):
        os.execv(sys.executable, cmd)
    conn = _connect(folder)
    _send(conn, {"argv": _program(cmd), "env": dict(os.environ), "cwd": os.getcwd()}, (0, 1, 2))
    messages = _Lines(conn)
    pid = messages.next(READY_S)["pid"]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda sig, _: os.kill(pid, sig))
    code = messages.next(None)["returncode"]
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    if sys.argv[1] == "--relay":
        _relay(sys.argv[2], sys.argv[3:])
    import importlib

    sys.path.pop(0)  # tests/: the child puts its program's folder first, as Python does
    # What each program's console.setup() sets before it imports TensorFlow, set here too.
    from keras_vit_cli import console

    before = dict(os.environ)
    quiet = {k: v for k, v in console.quiet_environment().items() if before.get(k) != v}
    for name in PRELOAD:
        importlib.import_module(name)
    request, fds = _serve(int(sys.argv[1]), quiet)
    del importlib, name
    _run(request, fds)
