"""Text as PostgreSQL stores it. A ``text`` value cannot hold NUL (U+0000) nor a lone UTF-16
surrogate, which memstream accepts: NUL in free text and ids, surrogates in what a reader looks
up (nothing stored has one, so such a lookup simply finds nothing).

Every connection of the adapter (:func:`adapt`) passes each ``str`` parameter through
:func:`stored` and each ``text`` result through :func:`loaded`: NUL, lone surrogates and the
escape marker itself (U+E000, private use) become the marker followed by a code point that
names them; text without any of them (nearly all) is passed through untouched. Equal strings
stay equal, so lookups by id match what was stored. Search text only loses its NULs
(:func:`searchable`): they are not words.
"""

from __future__ import annotations

import re
from typing import Any, overload

import psycopg
from psycopg.types.string import StrBinaryDumper, StrDumperUnknown, TextBinaryLoader, TextLoader

_MARK = "\ue000"
_SPECIAL = re.compile("[\x00\ue000\ud800-\udfff]")
_ESCAPED = re.compile("\ue000(?:([\ue001\ue002])|\ue003([\U000f0000-\U000f07ff]))")
_SURROGATES = 0xF0000  # a lone surrogate U+D800 + n is stored as the marker, U+E003, U+F0000 + n


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    if char == _MARK:
        return _MARK + "\ue001"
    if char == "\x00":
        return _MARK + "\ue002"
    return _MARK + "\ue003" + chr(_SURROGATES + ord(char) - 0xD800)


def _unescape(match: re.Match[str]) -> str:
    simple, surrogate = match.group(1), match.group(2)
    if simple is not None:
        return _MARK if simple == "\ue001" else "\x00"
    return chr(0xD800 + ord(surrogate) - _SURROGATES)


@overload
def stored(text: str) -> str: ...
@overload
def stored(text: None) -> None: ...
def stored(text: str | None) -> str | None:
    """``text`` as a ``text`` column holds it."""
    if text is None or _SPECIAL.search(text) is None:
        return text
    return _SPECIAL.sub(_escape, text)


@overload
def loaded(text: str) -> str: ...
@overload
def loaded(text: None) -> None: ...
def loaded(text: str | None) -> str | None:
    """The text :func:`stored` was given."""
    if text is None or _MARK not in text:
        return text
    return _ESCAPED.sub(_unescape, text)


def searchable(text: str) -> str:
    """``text`` for ``to_tsvector`` (no NUL)."""
    return text.replace("\x00", " ") if "\x00" in text else text


class _StoredStr(StrDumperUnknown):
    def dump(self, obj: str) -> Any:
        return super().dump(stored(obj))


class _StoredStrBinary(StrBinaryDumper):
    def dump(self, obj: str) -> Any:
        return super().dump(stored(obj))


class _LoadedText(TextLoader):
    def load(self, data: Any) -> Any:
        value = super().load(data)
        return loaded(value) if isinstance(value, str) else value


class _LoadedTextBinary(TextBinaryLoader):
    def load(self, data: Any) -> Any:
        value = super().load(data)
        return loaded(value) if isinstance(value, str) else value


def adapt(connection: psycopg.Connection[Any]) -> None:
    """Make ``connection`` store and load text as this module says."""
    adapters = connection.adapters
    # The binary dumper first: the last one registered is also the one %s picks, and the
    # text one sends "unknown" (PostgreSQL infers the type), as psycopg's own default does.
    adapters.register_dumper(str, _StoredStrBinary)
    adapters.register_dumper(str, _StoredStr)
    for name in ("text", "varchar", "bpchar"):
        adapters.register_loader(name, _LoadedText)
        adapters.register_loader(name, _LoadedTextBinary)


# PostgreSQL's longest lexeme (MAXSTRLEN): a longer word is left out of a tsvector or tsquery.
MAX_LEXEME_BYTES = 2047


def indexable(phrase: str) -> bool:
    """Whether every word of ``phrase`` fits a ``tsvector`` lexeme (longer words are never
    indexed by PostgreSQL, so a phrase holding one cannot match)."""
    return all(len(word.encode()) <= MAX_LEXEME_BYTES for word in phrase.split())
