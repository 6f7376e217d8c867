"""Preparing a data dir while other processes start on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memstream.workers.runtime import data_dir as data_dir_module
from memstream.workers.runtime.data_dir import prepare_data_dir


def test_a_file_renamed_away_during_the_scan_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a data dir whose listing names a temporary file that another process starting on
    # the same dir renames away before it is tightened (seen with six processes at once)
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    kept = data_dir / "memstream.db"
    kept.write_text("")
    kept.chmod(0o644)
    gone = data_dir / ".nats-server.conf.12123.tmp"
    gone.write_text("")
    gone.chmod(0o644)
    listing = [gone, kept]
    tighten = data_dir_module._tighten

    def racing(path: Path, mode: int) -> None:
        if path == gone:
            path.unlink()  # renamed by the other process between the listing and the chmod
        tighten(path, mode)

    def listed(self: Path) -> Iterator[Path]:
        return iter(listing)

    monkeypatch.setattr(data_dir_module, "_tighten", racing)
    monkeypatch.setattr(Path, "iterdir", listed)
    # When it is prepared, Then it is, and its own file is still tightened
    assert prepare_data_dir(data_dir) == data_dir
    assert kept.stat().st_mode & 0o777 == 0o600
