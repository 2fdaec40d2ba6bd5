"""tests/warm_programs.py: a forked program behaves as a fresh process where the tests look
(exit codes, signals, pipes, folder, environment, arguments, timeouts), and what it cannot
fork starts fresh."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import warm_programs

# Prints what a test compares, then exits with the code its first argument gives.
_REPORT = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    print(json.dumps([os.getpid(), os.getcwd(), os.environ.get("WARM_TEST"), sys.argv[1:],
                      "tensorflow" in sys.modules, np.random.randint(1 << 30)]))
    print("to stderr", file=sys.stderr)
    sys.exit(int(sys.argv[1]))
    """
)


def _report(tmp_path, *args, **kwargs):
    result = warm_programs.run(
        [sys.executable, "-c", _REPORT, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=warm_programs.base_env(WARM_TEST="yes"),
        timeout=120,
        **kwargs,
    )
    return result, *json.loads(result.stdout)


def test_a_forked_program_has_its_own_pid_folder_environment_arguments_and_exit_code(tmp_path):
    (result, pid, cwd, value, argv, tensorflow, draw) = _report(tmp_path, "3", "a b")
    assert result.returncode == 3
    assert result.stderr == "to stderr\n"
    assert pid != os.getpid()
    assert (cwd, value, argv) == (str(tmp_path), "yes", ["3", "a b"])
    assert tensorflow  # the server's import, which a fresh `-c` would not have
    # NumPy's global generator is seeded in each child, as in a fresh process.
    assert len({draw, *(_report(tmp_path, "0")[-1] for _ in range(2))}) == 3


def _imports(env):
    """(whether the process had TensorFlow before its code ran, what `import extra` gave)."""
    code = "import sys; t = 'tensorflow' in sys.modules; import extra; print(t, extra.X)"
    result = warm_programs.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.split()


def test_what_a_fresh_process_would_import_otherwise_starts_fresh(tmp_path):
    """Another Keras backend, or a PYTHONPATH folder holding a module the server imported,
    starts fresh; a PYTHONPATH folder of other modules is on the forked child's path."""
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "extra.py").write_text("X = 'own'")
    (tmp_path / "shadow").mkdir()
    (tmp_path / "shadow" / "extra.py").write_text("X = 'shadow'")
    (tmp_path / "shadow" / "keras").mkdir()

    def path(folder):  # the folder before the server's own PYTHONPATH, if it has one
        base = warm_programs.base_env().get("PYTHONPATH")
        return os.pathsep.join([str(tmp_path / folder), *([base] if base else [])])

    env = warm_programs.base_env(PYTHONPATH=path("own"))
    assert _imports(env) == ["True", "own"]
    assert _imports(dict(env, KERAS_BACKEND="numpy")) == ["False", "own"]
    assert _imports(dict(env, PYTHONPATH=path("shadow"))) == ["False", "shadow"]
    process = warm_programs.Popen(
        [sys.executable, "-c", "0"], env=warm_programs.base_env(LANG="C.x")
    )
    assert isinstance(process, subprocess.Popen)
    process.wait()


def test_kill_stop_and_timeout_act_on_the_forked_process(tmp_path):
    marker = tmp_path / "started"
    loop = f"import time; open({str(marker)!r}, 'w').close(); time.sleep(600)"
    process = warm_programs.Popen(
        [sys.executable, "-c", loop],
        env=warm_programs.base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert isinstance(process, warm_programs.ForkedProcess)
    with pytest.raises(subprocess.TimeoutExpired):
        process.communicate(timeout=0.5)
    assert process.poll() is None
    process.send_signal(signal.SIGSTOP)
    process.send_signal(signal.SIGCONT)
    process.kill()
    assert process.wait(timeout=60) == -signal.SIGKILL
    assert process.communicate() == (b"", b"")
    with pytest.raises(subprocess.TimeoutExpired):
        warm_programs.run([sys.executable, "-c", loop], env=warm_programs.base_env(), timeout=1)


def test_the_relay_python_of_a_shell_script(tmp_path):
    """A script's `python` forks (exit code, pipes, stdin code, SIGTERM passed on); what it
    cannot fork (an interpreter option) runs as this Python."""
    bin_dir = warm_programs.relay_bin(warm_programs.relay_folder())
    script = textwrap.dedent(
        """
        python -c 'import sys; print("tensorflow" in sys.modules); sys.exit(4)' || echo "code $?"
        python - x <<'EOF'
        import sys; print(sys.argv, "tensorflow" in sys.modules)
        EOF
        python -I -c 'import sys; print("tensorflow" in sys.modules)'
        python -c 'import os, time; print(os.getpid(), flush=True); time.sleep(600)' > "$T" &
        relay=$!
        until [ -s "$T" ]; do sleep 0.1; done
        kill -TERM $relay; wait $relay || echo "code $?"
        sleep 0.5; kill -0 "$(cat "$T")" 2>/dev/null && echo alive || echo gone
        """
    )
    result = subprocess.run(
        ["bash", "-c", script],
        env=warm_programs.base_env(
            PATH=bin_dir + os.pathsep + os.environ["PATH"], T=str(tmp_path / "pid")
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = result.stdout.splitlines()
    assert lines[:4] == ["True", "code 4", "['-', 'x'] True", "False"], result.stderr
    assert lines[4:] == [f"code {128 + signal.SIGTERM}", "gone"], result.stdout + result.stderr
