"""Which embedding model a setting names, without loading anything (no torch, no numpy)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from memstream.domain.errors import InvalidInputError

BUNDLED_MODEL: Final = "all-MiniLM-L6-v2"
SETTING: Final = "MEMSTREAM_EMBEDDING_MODEL"


def model_key(model: str | None) -> str:
    """:data:`BUNDLED_MODEL` for ``None`` or that name; else the real path of a local
    sentence-transformers model directory.

    Raises:
        InvalidInputError: ``model`` is not an existing directory.
    """
    if model is None or model == BUNDLED_MODEL:
        return BUNDLED_MODEL
    path = Path(model).expanduser()
    if not path.is_dir():
        raise InvalidInputError(
            f"{SETTING} is {model!r}: no such model directory "
            f"(use {BUNDLED_MODEL!r} or the path of a local sentence-transformers model)"
        )
    return str(path.resolve())
