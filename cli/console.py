"""What our long-running commands print: our own lines, a progress bar, no library noise.

Every command that runs longer than a few seconds (the trainers, the export tools,
tools/visualize.py, tools/fewshot.py, tools/demo.py) calls `setup()` before it
imports TensorFlow. By default that leaves only this project's log lines (loggers
`trainers`, `keras_vit`, `deploy`, `tools`, `data`, at INFO) and silences what TensorFlow,
XLA, absl and Keras print about themselves: C++ INFO/WARNING lines (oneDNN banner,
XLA service lines), TensorFlow's Python INFO lines ("Reduce to /device:CPU:0 then
broadcast to ..."), SavedModel's warnings about generated input names, and Python
warnings raised outside this project. Errors still show.

`KERAS_VIT_VERBOSITY=library` (or an explicit absl `--verbosity=N` on the command
line) brings the libraries' output back; `KERAS_VIT_VERBOSITY=quiet` keeps only
warnings and errors of ours too.

`Progress` is the bar: tqdm (steps, rate, ETA, the metrics given) on a terminal,
and without one (CI logs, a pipe) a plain line every `every_seconds` instead of
carriage-return updates.
"""

import atexit
import logging
import os
import re
import subprocess
import sys
import time
import warnings

VERBOSITY_ENV = "KERAS_VIT_VERBOSITY"
OUR_LOGGERS = ("trainers", "keras_vit", "deploy", "tools", "data")
# The modules whose Python warnings show: the library and the programs as installed
# (keras_vit_trainers, keras_vit_data, ...; docs/design.md#layout) or run from the folders.
OUR_MODULES = r"(keras_vit(_\w+)?|" + "|".join(OUR_LOGGERS) + r")(\.|$)"
# C++ logging: 2 hides INFO and WARNING (oneDNN banner, XLA/cpu_feature lines), keeps ERROR.
_TF_CPP_LEVEL = "2"


def verbosity():
    """'quiet', 'info' (the default) or 'library', from $KERAS_VIT_VERBOSITY."""
    value = os.environ.get(VERBOSITY_ENV, "info").strip().lower() or "info"
    if value not in ("quiet", "info", "library"):
        raise ValueError(f"{VERBOSITY_ENV}={value!r}: use quiet, info or library")
    return value


# TensorFlow's C++ side logs through absl before absl::InitializeLog() runs, and such
# lines ignore TF_CPP_MIN_LOG_LEVEL (TF 2.21: the oneDNN banner, twice per process, one
# copy per shared library). The only place to drop them is the file descriptor:
# `setup()` sends fd 2 through a small filter process that drops absl/glog INFO and
# WARNING lines ("I1201 09:00:00.123 4567 port.cc:153] ...") and the pre-init notice,
# and passes everything else (ERROR/FATAL lines, Python tracebacks, our lines) on at
# once. A process of its own, so that whatever a crash writes last is still passed on.
_DROP = (
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are "
    r"written to STDERR|[IW]\d{4} [0-9:.]+ +\d+ [^ ]+:\d+\] .*"
    # An ERROR-level line that only reports a kernel fallback (TF 2.21, int64 ops in
    # tf.data on some CPUs): nothing for the user to act on.
    r"|E\d{4} [0-9:.]+ +\d+ util\.cc:\d+\] oneDNN supports DT_INT64 only on platforms "
    r"with AVX-512\. Falling back to the default Eigen-based implementation if present\."
    # The TFLite calibrator's own line, printed by each int8 conversion.
    r"|fully_quantize: \d+, inference_type: \d+, input_inference_type: \w+, "
    r"output_inference_type: \w+"
    r"|INFO: .*)$"
)  # TFLite's own INFO lines ("Created TensorFlow Lite XNNPACK ...")
_FILTER = f"""
import re, sys
drop = re.compile({_DROP!r})
out = sys.stdout.buffer
for line in sys.stdin.buffer:
  if not drop.match(line.decode("utf-8", "replace").rstrip("\\r\\n")):
    out.write(line)
    out.flush()
"""
_FILTERED_ENV = "KERAS_VIT_STDERR_FILTERED"
_terminal = None  # the original stderr, for the progress bar, once fd 2 is filtered


def dropped_line(line):
    """Whether the stderr filter drops `line` (tested against real TF output)."""
    return re.match(_DROP, line.rstrip("\r\n")) is not None


def _filter_stderr():
    """Routes fd 2 through the filter process (once per process tree)."""
    global _terminal
    if os.environ.get(_FILTERED_ENV) or _terminal is not None:
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
        proc = subprocess.Popen(
            [sys.executable, "-u", "-c", _FILTER],
            stdin=subprocess.PIPE,
            stdout=saved,
            stderr=saved,
            close_fds=True,
        )
    except OSError:
        return
    _terminal = os.fdopen(os.dup(saved), "w", buffering=1)
    os.dup2(proc.stdin.fileno(), 2)
    proc.stdin.close()
    os.environ[_FILTERED_ENV] = "1"

    def restore():
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, 2)  # the filter sees EOF once our children are done too
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    atexit.register(restore)


def terminal():
    """The stream the user sees (stderr before filtering)."""
    return _terminal or sys.stderr


def _explicit_absl_verbosity(argv):
    return any(a.startswith(("--verbosity", "-v=", "--v=")) for a in argv)


def quiet_environment(env=None):
    """`env` (default os.environ) with the variables that silence TensorFlow's C++
    side set, for this process (before TensorFlow is imported) and for children."""
    env = os.environ if env is None else env
    if verbosity() != "library":
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", _TF_CPP_LEVEL)
        # absl's C++ logging (used by XLA and TSL) reads its own threshold.
        env.setdefault("TF_CPP_MAX_VLOG_LEVEL", "-1")
        env.setdefault("ABSL_MIN_LOG_LEVEL", _TF_CPP_LEVEL)
        env.setdefault("GRPC_VERBOSITY", "ERROR")
    return env


class _OurFormatter(logging.Formatter):
    def format(self, record):
        prefix = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        return f"{time.strftime('%H:%M:%S')} {prefix}{record.getMessage()}"


def setup(argv=None):
    """Sets up this process's output as the module docstring says. Call it first
    thing (before TensorFlow is imported) and again after absl parsed its flags
    (absl then raises its own verbosity to INFO): it is idempotent."""
    argv = sys.argv if argv is None else argv
    level = verbosity()
    if level == "library" or _explicit_absl_verbosity(argv):
        return
    quiet_environment()
    _filter_stderr()
    ours = logging.INFO if level == "info" else logging.WARNING
    handler = None
    for name in OUR_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(ours)
        if not any(getattr(h, "_keras_vit", False) for h in logger.handlers):
            handler = handler or logging.StreamHandler(terminal())
            handler._keras_vit = True
            handler.setFormatter(_OurFormatter())
            logger.addHandler(handler)
        logger.propagate = False
    for name in ("tensorflow", "absl", "jax", "h5py", "matplotlib", "PIL"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)
        absl_logging.set_stderrthreshold(absl_logging.ERROR)
    except ImportError:
        pass
    show_only_our_warnings()


def show_only_our_warnings():
    """Python warnings from the libraries (Keras, TF, numpy) hidden; ours still show."""
    warnings.filterwarnings("ignore")
    warnings.filterwarnings("default", module=OUR_MODULES)


def _plural(unit):
    return unit + ("es" if unit.endswith(("s", "x", "ch", "sh")) else "s")


def _format_seconds(seconds):
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """A progress bar over `total` units.

    Args:
      total: units to do (steps, images, batches).
      desc: what is being done, printed before the bar.
      unit: the units' name.
      initial: units already done (a resumed run).
      scale: items per unit for the rate shown (e.g. the global batch: images/s).
      scale_unit: the name of those items.
      stream: default sys.stderr; tqdm on a terminal, plain lines otherwise.
      every_seconds: without a terminal, one line at most this often (and the last).
    """

    def __init__(
        self,
        total,
        desc,
        unit="step",
        initial=0,
        scale=1,
        scale_unit=None,
        stream=None,
        every_seconds=30.0,
    ):
        self.total, self.desc, self.unit = int(total), desc, unit
        self.n = self._start = int(initial)
        self.scale, self.scale_unit = scale, scale_unit or unit
        self.stream = stream or terminal()
        self.every_seconds = float(every_seconds)
        self.postfix = {}
        self._t0 = self._last_print = time.perf_counter()
        self._first = None  # (time, n) of the first update: rate and ETA leave out the start-up
        self._bar = None
        self._closed = False
        if verbosity() == "quiet":
            self.stream = None
        elif getattr(self.stream, "isatty", lambda: False)():
            import tqdm

            self._bar = tqdm.tqdm(
                total=self.total,
                initial=self.n,
                desc=desc,
                unit=unit,
                file=self.stream,
                dynamic_ncols=True,
                leave=True,
            )

    def _since_first(self):
        """(units, seconds) since the first update: the time to it (tracing, compilation)
        says nothing about the rate."""
        if self._first is None:
            return 0, 0.0
        return self.n - self._first[1], time.perf_counter() - self._first[0]

    def rate(self):
        """Items (units x scale) per second since the first update."""
        done, seconds = self._since_first()
        return done * self.scale / seconds if done and seconds > 0 else 0.0

    def _postfix_text(self):
        return ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in self.postfix.items()
        )

    def line(self):
        """The plain-text state: 'desc: 500/2000 steps (25%), 1116 images/s, ETA 1:20, ...'."""
        done, since = self._since_first()
        seconds = time.perf_counter() - self._t0
        left = self.total - self.n
        eta = left * since / done if done else (0.0 if not left else None)
        parts = [
            f"{self.desc}: {self.n}/{self.total} {_plural(self.unit)} "
            f"({100 * self.n / max(self.total, 1):.0f}%)",
            f"{self.rate():.0f} {_plural(self.scale_unit)}/s" if done else "starting",
            f"elapsed {_format_seconds(seconds)}",
            f"ETA {_format_seconds(eta) if eta is not None else '?'}",
        ]
        if self.postfix:
            parts.append(self._postfix_text())
        return ", ".join(parts)

    def update(self, n=1, **postfix):
        """Advances by `n` units; keyword arguments are shown beside the bar."""
        if self._first is None:
            self._first = (time.perf_counter(), self.n + int(n))
        self.n = min(self.n + int(n), self.total)
        self.postfix.update(
            {
                k: (float(v) if hasattr(v, "__float__") and not isinstance(v, int) else v)
                for k, v in postfix.items()
            }
        )
        if self._bar is not None:
            self._bar.update(int(n))
            if postfix:
                extra = (
                    {"rate": f"{self.rate():.0f} {_plural(self.scale_unit)}/s"}
                    if self.scale != 1
                    else {}
                )
                self._bar.set_postfix_str(
                    ", ".join(filter(None, [self._postfix_text(), *extra.values()])), refresh=False
                )
        elif self.stream is not None:
            now = time.perf_counter()
            if now - self._last_print >= self.every_seconds or self.n >= self.total:
                self._last_print = now
                print(self.line(), file=self.stream, flush=True)

    def set_total(self, total):
        """Changes the units to do (a schedule shortened during training)."""
        self.total = int(total)
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()

    def close(self):
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif self.stream is not None and self.n < self.total and self.n > self._start:
            print(self.line(), file=self.stream, flush=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress_batches(iterable, total, desc, unit="batch", **kwargs):
    """Yields from `iterable`, advancing a `Progress` of `total` units by one each."""
    bar = Progress(total, desc, unit=unit, **kwargs)
    try:
        for item in iterable:
            yield item
            bar.update(1)
    finally:
        bar.close()


def start_program(module_name, keras_backend=None):
    """The first lines of a program module, before anything imports TensorFlow or
    Keras: pins the Keras backend the program needs (`keras_backend`, e.g. the export
    tools' "tensorflow": they build TF graphs) and, when the module runs as a program
    (`module_name == "__main__"`), sets up the console (`setup`)."""
    if module_name == "__main__":
        setup()
    if keras_backend:
        os.environ["KERAS_BACKEND"] = keras_backend


# --- a user's mistake: one line --------------------------------------------------------

TRACEBACK_ENV = "KERAS_VIT_TRACEBACK"
USAGE, RUNTIME = 2, 1  # exit codes: a flag or config value; a failure while running
# The exceptions that are a user's mistake, not a bug: (module, class, exit code), the
# first that matches wins. Only classes whose module is already imported are looked up
# (an exception of a class never imported cannot be raised), so that this list
# imports nothing.
USER_ERRORS = (
    ("keras_vit_trainers.config_checks", "ConfigError", USAGE),
    ("keras_vit_trainers.train_lib", "PlanError", USAGE),
    ("keras_vit_trainers.strategy", "NoTPUError", USAGE),
    ("keras_vit.compilation", "JitCompileError", USAGE),
    ("keras_vit_deploy.sources", "SourceError", USAGE),
    ("keras_vit_deploy.preprocessing", "ChannelError", USAGE),
    ("keras_vit_data.records", "DataError", USAGE),
    ("keras_vit.checkpoint.errors", "CheckpointError", USAGE),
    ("keras_vit.run_directory", "RunDirectoryError", USAGE),
    ("keras_vit.checkpoint.download", "DownloadError", RUNTIME),
    ("keras_vit_deploy.rest", "RequestError", RUNTIME),
    ("keras_vit_deploy.onnx_packages", "ExportError", RUNTIME),
    ("keras_vit_deploy.tflite", "ConversionError", RUNTIME),
)


class UserError(Exception):
    """A mistake a program found itself: `message` is the one line ('<what> (<the fix>)'),
    `code` the exit code (USAGE or RUNTIME)."""

    def __init__(self, message, code=USAGE):
        super().__init__(message)
        self.code = code

    @classmethod
    def of(cls, error, code=None):
        """`error` (a ValueError or OSError a program caught around what the user gave)
        as a UserError: its one line, and its exit code (`user_error`, else USAGE)."""
        return cls(error_line(error), code or user_error(error) or USAGE)


def show_tracebacks():
    """Whether $KERAS_VIT_TRACEBACK asks for the traceback of a user's mistake too (every
    program's one line goes through `fail`, which prints it)."""
    return os.environ.get(TRACEBACK_ENV, "").strip().lower() not in ("", "0", "false", "no")


def user_error(error):
    """The exit code of `error` when it is a user's mistake (USER_ERRORS, UserError, a
    FileNotFoundError or other OSError naming a file, an unreachable host), else None
    (a bug: its traceback shows)."""
    if isinstance(error, UserError):
        return error.code
    for module, name, code in USER_ERRORS:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(error, cls):
            return code
    if isinstance(error, (FileNotFoundError, NotADirectoryError, IsADirectoryError)):
        return USAGE
    if isinstance(error, (PermissionError, ConnectionError, TimeoutError)):
        return RUNTIME
    import urllib.error

    if isinstance(error, urllib.error.URLError):
        return RUNTIME
    return None


def check_output(path, flag):
    """Creates the folder of the output file `path` (given as `flag`, e.g. "--json") and
    checks a file can be written there, so that a program fails before its work, not
    after it (a UserError naming the flag otherwise)."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        if os.path.isdir(path) or not os.access(folder, os.W_OK):
            raise PermissionError(f"not a writable file in {folder}")
    except OSError as e:
        raise UserError(
            f"{flag}={path}: cannot write there ({error_line(e)}; give another {flag}=FILE)"
        ) from e


def error_line(error):
    """The one line a user's mistake prints (without 'error: '): the message's last
    non-empty line where it has several (a download's cause comes last), the path an
    OSError names where its message leaves it out."""
    if isinstance(error, OSError) and error.filename and str(error.filename) not in str(error):
        message = f"{error.filename}: {error.strerror or error}"
    elif isinstance(error, OSError) and error.filename and error.strerror:
        message = f"{error.filename}: {error.strerror}"
    else:
        message = str(error)
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return lines[0] if len(lines) == 1 else " ".join(lines)


def fail(message, code=USAGE, error=None, immediately=False):
    """Exits with `code` after one line on stderr: 'error: <message>'. With
    $KERAS_VIT_TRACEBACK set, the traceback comes first: that of `error`, else of the
    exception being handled, else the stack of the caller (a check that found the
    mistake itself). `immediately`: without the interpreter's teardown (after flushing
    the streams and logging), for a process whose cluster is gone: TensorFlow's
    teardown would wait on the lost peer and log its gRPC errors after our line."""
    sys.stdout.flush()
    if show_tracebacks():
        import traceback

        error = error if error is not None else sys.exc_info()[1]
        if error is not None:
            traceback.print_exception(error, file=sys.stderr)
        else:
            traceback.print_stack(sys._getframe(1), file=sys.stderr)
        sys.stderr.flush()
    print(f"error: {message}", file=sys.stderr, flush=True)
    if immediately:
        logging.shutdown()
        sys.stdout.flush()
        os._exit(code)
    sys.exit(code)


def exit_on_user_error(error, cleanup=None):
    """For an `except BaseException` clause of a program's main: a user's mistake ends in
    its one line and exit code (after `cleanup()`, which removes what a failed start
    wrote); anything else (a bug) returns for the caller to re-raise. With
    $KERAS_VIT_TRACEBACK set, the traceback shows too."""
    code = user_error(error)
    if code is None:
        return
    if cleanup is not None:
        cleanup()
    fail(error_line(error), code, error)


# The flags that ask a program for its usage (absl's own --help exits 1 after the main
# module's docstring, which a console script's wrapper does not have).
HELP_FLAGS = ("-h", "-help", "--help", "--helpshort", "-?")


def help_asked(argv):
    """Whether the command line `argv` (with the program's name first) asks for help."""
    return any(arg in HELP_FLAGS for arg in argv[1:])


def print_help(doc, flag_modules=()):
    """Prints a program's usage on stdout: its docstring (`doc`, which gives an example)
    and the flags its modules (`flag_modules`, names) define."""
    from absl import flags

    parts = [(doc or "").strip()]
    for module in flag_modules:
        text = flags.FLAGS.module_help(module)
        if text.strip():
            parts.append(text.rstrip())
    parts.append(
        "--helpfull lists absl's flags too. Exit codes, and KERAS_VIT_TRACEBACK=1 for the "
        "traceback of an error: docs/install.md."
    )
    print("\n\n".join(filter(None, parts)), flush=True)


def exit_with_help(argv, doc, flag_modules=()):
    """Where `argv` asks for help (`help_asked`): prints it (`print_help`) and exits 0."""
    if help_asked(argv):
        print_help(doc, flag_modules)
        sys.exit(0)


def run_app(main, flags_parser=None):
    """`absl.app.run(main)` with `setup()` again once the flags are parsed (absl raises
    its own verbosity to INFO while parsing them), and a user's mistake (`user_error`)
    ended in one line 'error: ...': exit code 2 for a flag or config value, 1 for a
    failure while running (a download, a server). absl's usage text shows for
    `app.UsageError` alone; a bug keeps its traceback. `--help` prints the program's
    module docstring and flags and exits 0 (`exit_with_help`)."""
    from absl import app

    module = getattr(main, "__module__", "__main__")
    doc = getattr(sys.modules.get(module), "__doc__", None)
    if module.startswith("keras_vit_"):  # installed: the same program from any folder
        doc = f"{(doc or '').strip()}\n\nFrom any folder: python -m {module} [flags]"

    def _parse(argv):
        exit_with_help(argv, doc, [module])
        return (flags_parser or app.parse_flags_with_usage)(argv)

    def _main(argv):
        setup()
        try:
            return main(argv)
        except (app.UsageError, SystemExit, KeyboardInterrupt):
            raise
        except Exception as e:
            exit_on_user_error(e)
            raise

    app.run(_main, flags_parser=_parse)
