"""Property: for random session command sequences, the live read model equals a replay of the
log, and reads equal a simple reference model of the Session rules (spec/session.md Part A)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from support.examples import run_on_fresh_stream
from support.read_models import EMBEDDED_VERIFIED

from memstream.client import Memstream
from memstream.domain.errors import InvalidInputError, MessageNotFoundError
from memstream.projections.sqlite.store import SqliteCopy
from memstream.workers.admin.rebuild import verify
from memstream.workers.runtime.nats_server import NatsServerProcess

SESSIONS = ("s1", "s2")
IDS = tuple(f"m{i}" for i in range(7))
UNKNOWN = "nope"

Message = dict[str, Any]
_OMIT = object()


@dataclass
class ReferenceSession:
    """A dict-based Session: insertion-ordered messages with parents, and overlays."""

    messages: dict[str, tuple[str | None, Message]] = field(default_factory=dict)
    overlays: list[tuple[str, str, str, str]] = field(default_factory=list)  # id, summary, from, to

    def latest_leaf(self) -> str | None:
        parents = {parent for parent, _ in self.messages.values()}
        leaves = [m for m in self.messages if m not in parents]
        return leaves[-1] if leaves else None

    def append(self, message: Message, parent: object) -> None:
        message_id = message["id"]
        if message_id in self.messages:
            return  # idempotent: the first content wins
        if parent is _OMIT:
            parent = self.latest_leaf()
        elif parent is not None and parent not in self.messages:
            raise MessageNotFoundError(parent)
        ancestor = parent
        while isinstance(ancestor, str) and ancestor in self.messages:
            if ancestor == message_id:
                raise InvalidInputError("cycle")
            ancestor = self.messages[ancestor][0]
        if ancestor == message_id:
            raise InvalidInputError("cycle")
        self.messages[message_id] = (parent, message)  # type: ignore[assignment]

    def update(self, message: Message) -> None:
        if message["id"] not in self.messages:
            raise MessageNotFoundError(message["id"])
        parent, _ = self.messages[message["id"]]
        self.messages[message["id"]] = (parent, message)

    def delete(self, ids: list[str]) -> None:
        for message_id in ids:
            self.messages.pop(message_id, None)

    def clear(self) -> None:
        self.messages.clear()
        self.overlays.clear()

    def children(self, message_id: str) -> list[str]:
        return [m for m, (parent, _) in self.messages.items() if parent == message_id]

    def path(self, leaf: str | None = None) -> list[Message]:
        leaf = leaf or self.latest_leaf()
        path: list[Message] = []
        while leaf is not None and leaf in self.messages:
            parent, message = self.messages[leaf]
            path.append(message)
            leaf = parent
        return path[::-1]

    def history(self, leaf: str | None = None) -> list[Message]:
        """The path with overlays applied as in spec §8.1."""
        path = self.path(leaf)
        ids = [m["id"] for m in path]
        out: list[Message] = []
        i = 0
        while i < len(path):
            candidates = [o for o in self.overlays if o[2] == ids[i] and o[3] in ids[i:]]
            if candidates:
                overlay_id, summary, _, to_id = candidates[-1]
                out.append(
                    {
                        "id": "compaction_" + overlay_id,
                        "role": "assistant",
                        "parts": [{"type": "text", "text": summary}],
                    }
                )
                i = ids.index(to_id, i) + 1
            else:
                out.append(path[i])
                i += 1
        return out


# -- commands ----------------------------------------------------------------------------------

session_index = st.integers(0, len(SESSIONS) - 1)
message_id = st.sampled_from(IDS)
words = st.sampled_from(["tea", "deploy production", "Berlin", "python typing", "x"])
parent = st.one_of(
    st.just(("omit",)),
    st.just(("none",)),
    st.tuples(st.just("existing"), st.integers(0, 50)),
    st.just(("unknown",)),
)
commands = st.one_of(
    st.tuples(st.just("append"), session_index, message_id, parent, words),
    st.tuples(st.just("append"), session_index, message_id, st.just(("omit",)), words),
    st.tuples(st.just("update"), session_index, st.one_of(message_id, st.just(UNKNOWN)), words),
    st.tuples(st.just("delete"), session_index, st.lists(message_id, max_size=3)),
    st.tuples(st.just("clear"), session_index),
    st.tuples(st.just("compact"), session_index, message_id, message_id, words),
    # an overlay over a range of the active path (endpoints picked when it runs)
    st.tuples(st.just("compact"), session_index, st.integers(0, 50), st.integers(0, 50), words),
)


def _message(message_id: str, role: str, text: str) -> Message:
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text}]}


async def _run(ms: Memstream, program: list[tuple[Any, ...]]) -> dict[str, ReferenceSession]:
    models = {name: ReferenceSession() for name in SESSIONS}
    for step, command in enumerate(program):
        kind, name = command[0], SESSIONS[command[1]]
        model, session = models[name], ms.session(name)
        live_error: type[Exception] | None = None
        model_error: type[Exception] | None = None
        try:
            if kind == "append":
                _, _, mid, (mode, *arg), text = command
                message = _message(mid, "user" if step % 2 else "assistant", f"{text} {step}")
                existing = list(model.messages)
                target: Any = {"omit": _OMIT, "none": None, "unknown": UNKNOWN}.get(mode, _OMIT)
                if mode == "existing" and existing:
                    target = existing[arg[0] % len(existing)]
                try:
                    model.append(message, target)
                except (MessageNotFoundError, InvalidInputError) as error:
                    model_error = type(error)
                if target is _OMIT:
                    await session.append_message(message)
                else:
                    await session.append_message(message, target)
            elif kind == "update":
                _, _, mid, text = command
                message = _message(mid, "tool", f"{text} updated {step}")
                try:
                    model.update(message)
                except MessageNotFoundError as error:
                    model_error = type(error)
                await session.update_message(message)
            elif kind == "delete":
                model.delete(command[2])
                await session.delete_messages(command[2])
            elif kind == "clear":
                model.clear()
                await session.clear_messages()
            else:
                _, _, from_id, to_id, text = command
                path = [m["id"] for m in model.path()]
                if isinstance(from_id, int):  # a range of the active path, or two pool ids
                    if path:
                        first, last = sorted((from_id % len(path), to_id % len(path)))
                        from_id, to_id = path[first], path[last]
                    else:
                        from_id, to_id = IDS[0], IDS[1]
                added = await session.add_compaction(f"summary {text} {step}", from_id, to_id)
                model.overlays.append((added["id"], added["summary"], from_id, to_id))
                assert (added["from_message_id"], added["to_message_id"]) == (from_id, to_id)
        except (MessageNotFoundError, InvalidInputError) as error:
            live_error = type(error)
        assert live_error is model_error, f"step {step} {command}: {live_error} vs {model_error}"
        if model_error is not None:
            event(f"refused: {model_error.__name__}")
    return models


async def _check(ms: Memstream, models: dict[str, ReferenceSession], database: Path) -> None:
    for name, model in models.items():
        session = ms.session(name)
        history = await session.get_history()
        assert history == model.history(), name
        if any(m["id"].startswith("compaction_") for m in history):
            event("an overlay applies to the active path")
        for mid in IDS:
            assert await session.get_history(mid) == model.history(mid), (name, mid)
            assert [m["id"] for m in await session.get_branches(mid)] == model.children(mid)
        leaf = await session.get_latest_leaf()
        assert (leaf["id"] if leaf else None) == model.latest_leaf(), name
        assert await session.get_path_length() == len(model.path()), name
        # And recent history's total (read from the leaf's row) is that of the walked path
        stats = await session.get_history_row_stats()
        recent = await session.get_recent_history(0)
        assert recent.total_content_bytes == sum(s["bytes"] for s in stats), name
        assert recent.truncated is (len(stats) > 1), name
        assert [c["id"] for c in await session.get_compactions()] == [o[0] for o in model.overlays]
    # And the live read model equals the read model replayed from the log into a scratch DB
    results = await verify(ms.core.log, SqliteCopy(database))
    assert [r.projection for r in results] == [*EMBEDDED_VERIFIED]
    assert all(r.ok for r in results), results


_counter = itertools.count()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=st.lists(commands, min_size=10, max_size=80))
@example(  # re-appending a deleted message under its former child would close a loop
    program=[
        ("append", 0, "m0", ("omit",), "tea"),
        ("append", 0, "m1", ("omit",), "tea"),
        ("compact", 0, "m0", "m1", "x"),
        ("delete", 0, ["m0"]),
        ("append", 0, "m0", ("omit",), "tea"),
        ("append", 0, "m0", ("existing", 0), "tea"),
        ("append", 0, "m2", ("none",), "tea"),
        ("append", 0, "m0", ("existing", 1), "tea"),
        ("compact", 0, "m1", "m0", "x"),
        ("update", 0, "m0", "x"),
        ("append", 1, "m0", ("unknown",), "tea"),
        ("clear", 0),
        ("update", 0, "m0", "x"),
    ]
)
def test_live_read_model_equals_replay_and_reference_model(
    nats_server: NatsServerProcess, tmp_path: Path, program: list[tuple[Any, ...]]
) -> None:
    event(f"program length {len(program) // 10 * 10}+")
    # Given one nats-server for the whole run and a fresh stream and data dir per example
    example = tmp_path / f"example-{next(_counter)}"

    async def body(ms: Memstream) -> None:
        # When a random program of session commands runs against it and the reference model
        models = await _run(ms, program)
        # Then reads equal the reference model's, and the read model equals a replay
        await _check(ms, models, example / "memstream.db")

    run_on_fresh_stream(nats_server, example, "P", body)
