"""Hand-written context providers for the tests (duck-typed as in spec §6.1, sync and async)."""

from __future__ import annotations

from typing import Any


def content_of(session: Any, label: str) -> str:
    """The content of a loaded block of ``session`` (failing the test if it is not loaded)."""
    block = session.get_context_block(label)
    assert block is not None, f"block {label!r} is not loaded"
    return str(block.content)


class ReadonlyProvider:
    """``get`` only (sync)."""

    def __init__(self, text: str | None) -> None:
        self.text = text

    def get(self) -> str | None:
        return self.text


class MemoryProvider:
    """A writable block kept in memory (sync ``get``/``set``)."""

    def __init__(self, text: str | None = None) -> None:
        self.text = text
        self.writes: list[str] = []

    def get(self) -> str | None:
        return self.text

    def set(self, content: str) -> None:
        self.writes.append(content)
        self.text = content


class AsyncMemoryProvider(MemoryProvider):
    """The same, with ``async`` methods."""

    async def get(self) -> str | None:  # type: ignore[override]
        return self.text

    async def set(self, content: str) -> None:  # type: ignore[override]
        self.writes.append(content)
        self.text = content


class CountingProvider:
    """Returns different content on every ``get`` (to tell renderings apart)."""

    def __init__(self) -> None:
        self.calls = 0

    def get(self) -> str:
        self.calls += 1
        return f"rendering {self.calls}"


class MemorySkills:
    """A skill provider in memory: ``get`` lists ``- key: description``; ``load``; ``set``."""

    def __init__(self, skills: dict[str, tuple[str, str | None]] | None = None) -> None:
        self.skills: dict[str, tuple[str, str | None]] = dict(skills or {})
        self.loads: list[str] = []

    def get(self) -> str | None:
        lines = [f"- {k}: {d}" if d else f"- {k}" for k, (_, d) in self.skills.items()]
        return "\n".join(lines) or None

    def load(self, key: str) -> str | None:
        self.loads.append(key)
        found = self.skills.get(key)
        return None if found is None else found[0]

    def set(self, key: str, content: str, description: str | None = None) -> None:
        self.skills[key] = (content, description)


class ReadonlySkills:
    """A skill provider without ``set`` (async methods)."""

    def __init__(self, skills: dict[str, str]) -> None:
        self.skills = skills

    async def get(self) -> str | None:
        return "\n".join(f"- {k}" for k in self.skills) or None

    async def load(self, key: str) -> str | None:
        return self.skills.get(key)


class MemorySearch:
    """A search provider in memory: ``search`` matches entries containing every query word."""

    def __init__(self, entries: dict[str, str] | None = None) -> None:
        self.entries = dict(entries or {})

    def get(self) -> str | None:
        return f"{len(self.entries)} entries indexed." if self.entries else None

    def search(self, query: str) -> str | None:
        terms = query.lower().split()
        if not terms:
            return None
        hits = [
            f"[{key}]\n{text}"
            for key, text in self.entries.items()
            if all(t in text.lower() for t in terms)
        ]
        return "\n\n".join(hits) or None

    def set(self, key: str, content: str) -> None:
        self.entries[key] = content


class ReadonlySearch(MemorySearch):
    """A search provider without ``set``."""

    set = None  # type: ignore[assignment]


class RecordingProvider:
    """Records ``init(label)`` and ``get()`` calls in a shared journal; optionally writable,
    loadable or searchable. ``get`` returns text that names the label it was given."""

    def __init__(self, journal: list[tuple[str, Any]], kind: str = "readonly") -> None:
        self.journal = journal
        self.kind = kind
        self.label: str | None = None

    def init(self, label: str) -> None:
        self.journal.append(("init", label))
        self.label = label

    def get(self) -> str:
        self.journal.append(("get", self.label))
        return f"content of {self.label}"


class RecordingWritable(RecordingProvider):
    def set(self, content: str) -> None:
        self.journal.append(("set", content))


class RecordingSkills(RecordingProvider):
    def load(self, key: str) -> str | None:
        return f"{self.label}/{key}"


class RecordingSearch(RecordingProvider):
    async def search(self, query: str) -> str | None:
        return f"[{self.label}]\n{query}"
