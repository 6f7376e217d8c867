"""Garbage written into a read-model file, past its schema, for the damaged-read-model tests."""

from __future__ import annotations

import tempfile
from pathlib import Path

from memstream.projections.sqlite.database import open_database

PAGE = 4096


def schema_pages() -> int:
    """How many pages an empty read model takes: the header, the schema and every table's and
    index's root page, all at the start of the file."""
    with tempfile.TemporaryDirectory() as folder:
        empty = Path(folder) / "empty.db"
        open_database(empty).close()
        return empty.stat().st_size // PAGE


def overwrite_middle(path: Path) -> None:
    """Garbage over the middle half of the pages past the schema's (the file's size is
    unchanged): pages of the message rows and of their search index, which grow side by side,
    whatever the number of tables before them."""
    size = path.stat().st_size
    first = schema_pages()
    pages = size // PAGE - first
    assert pages > 64, f"{pages} pages past the schema's {first}"
    with path.open("r+b") as file:
        file.seek((first + pages // 4) * PAGE)
        file.write(bytes((i * 37 + 11) % 256 for i in range(pages // 2 * PAGE)))
    assert path.stat().st_size == size
