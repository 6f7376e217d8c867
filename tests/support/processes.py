"""Running memstream in other OS processes for tests: the CLI, workers, and their output."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MEMSTREAM = str(Path(sys.executable).parent / "memstream")


def clean_env(**settings: str) -> dict[str, str]:
    """The test process's environment without MEMSTREAM_* settings, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
    env.update(settings)
    return env


def start_worker(env: dict[str, str], log: Path, *options: str) -> subprocess.Popen[str]:
    """``memstream worker projector OPTIONS`` in the background, its output to ``log``."""
    with log.open("w") as out:
        return subprocess.Popen(
            [MEMSTREAM, "worker", "projector", *options],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def memstream(
    env: dict[str, str], *args: str, expect: int = 0, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI run to its end; ``stdin``: what it reads on standard input (else nothing)."""
    # stdin is never a terminal: a command that would ask a question must refuse, not hang
    feed: dict[str, Any] = {"stdin": subprocess.DEVNULL} if stdin is None else {"input": stdin}
    result = subprocess.run(
        [MEMSTREAM, *args],
        env=env,
        **feed,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == expect, f"{args}: {result.returncode}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result


def json_of(env: dict[str, str], *args: str) -> Any:
    return json.loads(memstream(env, *args, "--json").stdout)


def script_json(
    script: Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> Any:
    """Run a Python script with this interpreter to its end (bounded; in ``env``, else this
    process's environment) and read the JSON of its last output line."""
    done = subprocess.run(
        [sys.executable, str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def wait_for_text(
    path: Path, text: str, process: subprocess.Popen[str], timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        assert process.poll() is None, path.read_text() if path.exists() else "exited"
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in {path} within {timeout} s")


def stop(process: subprocess.Popen[str], sig: int = signal.SIGTERM) -> int:
    process.send_signal(sig)
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


def process_state(pid: int) -> str:
    """The process state letter from /proc (``T`` once a SIGSTOP has taken effect)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def freeze(process: subprocess.Popen[Any], timeout: float = 10) -> None:
    """SIGSTOP ``process`` and return once it has taken effect: ``kill`` only queues the
    signal, and a loaded machine may let the process run (answer a request) before it stops."""
    process.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while not _stopped(process.pid):
        assert time.monotonic() < deadline, f"pid {process.pid} did not stop"
        time.sleep(0.001)


def _stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` has stopped (a Go server runs many: one still running
    can answer a request)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
    return bool(states) and all(state == "T" for state in states)
