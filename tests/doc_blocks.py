"""Runs a Markdown page's fenced code blocks as written, in order, as one shell script:
the test of a walkthrough is that its commands work.

A block whose info string is `bash` or `python` is run; any other (`text`, `json`,
`console`, or `bash no-run` for what needs a network, a GPU or a server) is shown only.
Bash blocks are copied into the script verbatim; a Python block becomes
`python - <<'EOF' ... EOF`, so that every block sees the variables the earlier ones
exported. The script runs with `set -euo pipefail` from the repository root with the
test's environment (the page's own defaults, `${VAR:-value}`, yield to it).
"""

import os
import re
import subprocess
import sys

import warm_programs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = ("bash", "python")
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
_HEREDOC = "KERAS_VIT_DOC_BLOCK"


def blocks(path):
    """[(info string, code)] of the page's fenced blocks, in order."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return [(m.group(1).strip(), m.group(2)) for m in _FENCE.finditer(text)]


def runnable(path):
    """[(language, code)] of the blocks that run (module docstring)."""
    return [(info, code) for info, code in blocks(path) if info in RUN]


def script(path):
    """The page's runnable blocks as one bash script."""
    parts = ["set -euo pipefail"]
    for number, (language, code) in enumerate(runnable(path), 1):
        parts.append(f"echo '--- block {number} ({language})' >&2")
        if language == "bash":
            parts.append(code)
        else:
            if _HEREDOC in code:
                raise ValueError(f"{path}: block {number} contains {_HEREDOC}")
            parts.append(f"python - <<'{_HEREDOC}'\n{code}{_HEREDOC}")
    return "\n".join(parts) + "\n"


def run(path, env=None, timeout=600):
    """Runs `script(path)` from the repository root with `python` the running
    interpreter (its programs forked from a warm one where they can be:
    tests/warm_programs.py); returns the CompletedProcess (stdout and stderr captured as
    text)."""
    bin_dir = os.path.dirname(sys.executable)
    environment = {**os.environ, **(env or {})}
    environment["PATH"] = bin_dir + os.pathsep + environment.get("PATH", "")
    text = script(path)
    if os.environ.get(warm_programs.FRESH_ENV) != "1":
        # A shell function, so that it stays `python` after a block activates a venv.
        relay = os.path.join(warm_programs.relay_bin(warm_programs.relay_folder()), "python")
        text = f'python() {{ "{relay}" "$@"; }}\n' + text
    return subprocess.run(
        ["bash", "-c", text],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
