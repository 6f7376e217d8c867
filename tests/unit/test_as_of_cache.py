"""Cached ``--as-of`` copies and purges (``workers/admin/time_travel.py``): a copy built under
another purge count than the stream's may hold what a purge erased, and is deleted."""

from __future__ import annotations

from pathlib import Path

from memstream.workers.admin.time_travel import CACHE_DIR, PURGES_FILE, forget_purged_copies
from memstream.workers.log.subjects import encode_token


def _copy(root: Path, name: str, purges: str | None) -> Path:
    folder = root / CACHE_DIR / name
    folder.mkdir(parents=True)
    (folder / "memstream.db").write_bytes(b"rows")
    if purges is not None:
        (folder / PURGES_FILE).write_text(purges)
    return folder


def test_copies_built_under_another_purge_count_are_deleted(tmp_path: Path) -> None:
    stream = encode_token("MEMSTREAM")
    current = _copy(tmp_path, f"{stream}-12", "2")
    before_purge = _copy(tmp_path, f"{stream}-7", "1")
    unmarked = _copy(tmp_path, f"{stream}-3", None)  # built by an older memstream
    other_stream = _copy(tmp_path, f"{encode_token('OTHER')}-7", "0")
    not_a_copy = _copy(tmp_path, f"{stream}-notes", "0")

    deleted = forget_purged_copies(tmp_path, "MEMSTREAM", 2)

    assert sorted(deleted) == sorted([before_purge, unmarked])
    assert not before_purge.exists()
    assert not unmarked.exists()
    assert (current / "memstream.db").exists()
    assert (other_stream / "memstream.db").exists()  # another stream's purges are its own
    assert (not_a_copy / "memstream.db").exists()


def test_a_data_dir_without_cached_copies_has_nothing_to_forget(tmp_path: Path) -> None:
    assert forget_purged_copies(tmp_path, "MEMSTREAM", 0) == []


def test_a_symlinked_copy_is_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "memstream.db").write_bytes(b"not ours to delete")
    root = tmp_path / "data" / CACHE_DIR
    root.mkdir(parents=True)
    (root / f"{encode_token('MEMSTREAM')}-5").symlink_to(target)

    assert forget_purged_copies(tmp_path / "data", "MEMSTREAM", 1) == []
    assert (target / "memstream.db").read_bytes() == b"not ours to delete"
