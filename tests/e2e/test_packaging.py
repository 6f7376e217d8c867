"""The wheel: built from the source folders, installed into a fresh venv, its CLI runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md")
FOLDERS = ("memstream", "domain", "projections", "workers", "cli")
COMMAND_GROUPS = ("up", "worker", "status", "append", "sessions", "events", "projections", "memory")


def run(*command: str | Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    # The fresh venv must not see this test's environment (PYTHONPATH, the checkout as cwd).
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    result = subprocess.run(
        [str(c) for c in command],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
        check=False,
    )
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def copy_sources(target: Path) -> Path:
    """A copy of what the wheel is built from, so the build writes nothing into the checkout."""
    target.mkdir()
    for name in SOURCES:
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, target / name)
    for folder in FOLDERS:
        shutil.copytree(
            ROOT / folder, target / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    return target


def test_wheel_installs_into_a_fresh_venv_and_runs_the_cli(tmp_path: Path) -> None:
    # Given a wheel built from the source folders
    source = copy_sources(tmp_path / "src")
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--wheel", "--outdir", dist, source, cwd=tmp_path)
    (wheel,) = dist.glob("memstream-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in (
        "memstream/cli/app.py",
        "memstream/context/blocks.py",
        "memstream/workers/apps.py",
        "memstream/domain/session.py",
    ):
        assert module in names
    for folder in FOLDERS:
        package = "memstream" if folder == "memstream" else f"memstream/{folder}"
        assert f"{package}/py.typed" in names

    # When it is installed into a new venv (no system site-packages; dependencies from the index)
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    # (the CPU build of torch first, as the Makefile does: a bare "torch" is a CUDA build of
    # several GB)
    # (--no-compile: byte-compiling every installed module, torch's thousands among them, is
    # most of an install's time here and nothing this test looks at)
    pip = (venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-compile")
    run(*pip, "torch==2.13.0", cwd=tmp_path)
    run(*pip, wheel, cwd=tmp_path)

    # Then its console script runs and lists the command groups
    result = run(venv / "bin" / "memstream", "--help", cwd=tmp_path, timeout=60)
    for group in COMMAND_GROUPS:
        assert group in result.stdout
    # And it runs the installed copy, not the checkout
    code = "import memstream.cli.app as m; print(m.__file__)"
    where = run(venv / "bin" / "python", "-c", code, cwd=tmp_path)
    assert where.stdout.strip().startswith(str(venv))
