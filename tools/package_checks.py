"""Run mypy --strict and import-linter on the installed package layout.

setup.py maps the top-level folders onto ``memstream.*``; neither mypy nor import-linter can
follow setuptools' editable import hook, so this lays out a symlink tree of the package under
``build/typecheck`` (always fresh, so new modules are seen) and runs both there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "memstream": "memstream",
    "domain": "memstream/domain",
    "projections": "memstream/projections",
    "workers": "memstream/workers",
    "cli": "memstream/cli",
}


def build_tree(target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    for source_name, package_path in FOLDERS.items():
        source = ROOT / source_name
        for path in source.rglob("*"):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            if path.suffix not in {".py", ".typed"}:
                continue
            link = target / package_path / path.relative_to(source)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path)


def main() -> int:
    tree = ROOT / "build" / "typecheck"
    build_tree(tree)
    config = str(ROOT / "pyproject.toml")
    mypy = [sys.executable, "-m", "mypy", "--config-file", config, "-p", "memstream"]
    imports = [str(Path(sys.executable).parent / "lint-imports"), config]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    failed = subprocess.call(mypy, cwd=tree, env=env)
    failed |= subprocess.call(imports, cwd=tree, env=env)
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
