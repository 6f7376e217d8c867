"""Stable keys for keyed context entries (skills, search entries), as in the reference."""

from __future__ import annotations

import re

_NON_ALNUM = re.compile(r"[^a-z0-9]+")
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data), 2)]


def fnv1a_base36(text: str) -> str:
    """32-bit FNV-1a over UTF-16 code units, in lower-case base 36."""
    value = 0x811C9DC5
    for unit in _utf16_units(text):
        value ^= unit
        value = (value * 0x01000193) & 0xFFFFFFFF
    if value == 0:
        return "0"
    digits = []
    while value:
        value, digit = divmod(value, 36)
        digits.append(_BASE36[digit])
    return "".join(reversed(digits))


def slug(text: str) -> str:
    """First 60 UTF-16 units, lower-cased, runs of ``[^a-z0-9]`` → ``-``, one edge dash trimmed."""
    head = text.encode("utf-16-le", "surrogatepass")[:120].decode("utf-16-le", "surrogatepass")
    out = _NON_ALNUM.sub("-", head.lower())
    if out.startswith("-"):
        out = out[1:]
    if out.endswith("-"):
        out = out[:-1]
    return out


def entry_key(title: str | None, content: str) -> str:
    """The key of an entry: from its title when it has one, else from its content plus a hash."""
    if title is not None and title.strip():
        return slug(title) or "entry-" + fnv1a_base36(title)
    return (slug(content) or "entry") + "-" + fnv1a_base36(content)
