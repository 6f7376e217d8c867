"""Property: for random sequences of context commands (block writes and appends, search entries,
prompt freezes and refreshes, skill loads and unloads, clears, restarts), the context read model
equals a simple reference model, and equals a replay of the log into a scratch database."""

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
from memstream.context.providers import SearchBlock, StaticContext
from memstream.domain.context import joined_content
from memstream.domain.errors import InvalidInputError
from memstream.domain.system_prompt import ContextBlock, render_system_prompt
from memstream.domain.tokens import estimate_string_tokens
from memstream.projections.sqlite.store import SqliteCopy
from memstream.session import Session
from memstream.workers.admin.rebuild import verify
from memstream.workers.runtime.nats_server import NatsServerProcess

SESSIONS = ("", "s1")  # the default session stores under bare keys
LABELS = ("a", "b")
B_MAX_TOKENS = 12
ENTRIES = ("e1", "e2", "e3")
SKILLS = {"pirate": "Talk like a pirate.", "tax": "File taxes early."}
SKILL_KEYS = (*SKILLS, "missing")
SOUL = "You are helpful."


class DictSkills:
    """A read-only skill provider over a fixed dict."""

    def get(self) -> str:
        return "\n".join(f"- {key}" for key in SKILLS)

    def load(self, key: str) -> str | None:
        return SKILLS.get(key)


@dataclass
class ReferenceContext:
    """What one session's context should hold."""

    blocks: dict[str, str] = field(default_factory=dict)
    entries: dict[str, str] = field(default_factory=dict)
    prompt: str | None = None
    loaded: dict[str, None] = field(default_factory=dict)

    def render(self) -> str:
        count = len(self.entries)
        return render_system_prompt(
            [
                ContextBlock("soul", SOUL),
                ContextBlock("a", self.blocks.get("a", ""), writable=True),
                ContextBlock("b", self.blocks.get("b", ""), max_tokens=B_MAX_TOKENS, writable=True),
                ContextBlock(
                    "kb",
                    f"{count} entries indexed." if count else "",
                    writable=True,
                    is_searchable=True,
                ),
                ContextBlock("skills", DictSkills().get(), is_skill=True),
            ]
        )

    def write(self, label: str, text: str) -> None:
        if label == "b" and estimate_string_tokens(text) > B_MAX_TOKENS:
            raise InvalidInputError("over max tokens")
        self.blocks[label] = text


def build(ms: Memstream, name: str) -> Session:
    return (
        ms.session(name)
        .with_context("soul", provider=StaticContext(SOUL))
        .with_context("a")
        .with_context("b", max_tokens=B_MAX_TOKENS)
        .with_context("kb", provider=SearchBlock(f"kb-{name or 'default'}"))
        .with_context("skills", provider=DictSkills())
        .with_cached_prompt()
    )


session_index = st.integers(0, len(SESSIONS) - 1)
label = st.sampled_from(LABELS)
words = st.sampled_from(["likes tea", "moved to Berlin", "deploy on Fridays", "x", ""])
commands = st.one_of(
    st.tuples(st.just("write"), session_index, label, words),
    st.tuples(st.just("append"), session_index, label, words),
    st.tuples(st.just("index"), session_index, st.sampled_from(ENTRIES), words),
    st.tuples(st.just("freeze"), session_index),
    st.tuples(st.just("refresh"), session_index),
    st.tuples(st.just("load"), session_index, st.sampled_from(SKILL_KEYS)),
    st.tuples(st.just("unload"), session_index, st.sampled_from(SKILL_KEYS)),
    st.tuples(st.just("clear"), session_index),
    st.tuples(st.just("restart"), session_index),
)


async def _step(
    session: Session, model: ReferenceContext, command: tuple[Any, ...], step: int
) -> None:
    kind = command[0]
    if kind in ("write", "append"):
        _, _, block, text = command
        text = f"{text} {step}"
        joined = joined_content(model.blocks.get(block, ""), text) if kind == "append" else text
        model_error: type[Exception] | None = None
        try:
            model.write(block, joined)
        except InvalidInputError as error:
            model_error = type(error)
        live_error: type[Exception] | None = None
        try:
            if kind == "append":
                await session.append_context_block(block, text)
            else:
                await session.replace_context_block(block, text)
        except InvalidInputError as error:
            live_error = type(error)
        assert live_error is model_error, (step, command)
        if model_error is not None:
            event("over max_tokens refused")
    elif kind == "index":
        _, _, entry, text = command
        reply = await session.execute_tool(
            "set_context",
            {"label": "kb", "content": f"{text} {step}", "metadata": {"title": entry}},
        )
        assert reply == f'Indexed "{entry}" in kb.', reply
        model.entries[entry] = f"{text} {step}"
    elif kind == "freeze":
        if model.prompt is None:
            model.prompt = model.render()
        assert await session.freeze_system_prompt() == model.prompt, step
    elif kind == "refresh":
        model.prompt = model.render()
        assert await session.refresh_system_prompt() == model.prompt, step
    elif kind == "load":
        key = command[2]
        reply = await session.execute_tool("load_context", {"label": "skills", "key": key})
        if key in SKILLS:
            assert reply == SKILLS[key]
            model.loaded[f"skills:{key}"] = None
        else:
            assert reply == f"Not found: {key}"
    elif kind == "unload":
        key = command[2]
        reply = await session.execute_tool("unload_context", {"label": "skills", "key": key})
        if model.loaded.pop(f"skills:{key}", "absent") == "absent":
            assert reply == f'Skill "{key}" is not currently loaded in "skills".'
        else:
            assert reply == f'Unloaded "{key}" from skills. Context reclaimed.'
    elif kind == "clear":
        await session.clear_messages()
        model.loaded.clear()
        model.prompt = model.render()


async def _run(ms: Memstream, program: list[tuple[Any, ...]]) -> dict[str, ReferenceContext]:
    models = {name: ReferenceContext() for name in SESSIONS}
    sessions = {name: build(ms, name) for name in SESSIONS}
    for step, command in enumerate(program):
        name = SESSIONS[command[1]]
        if command[0] == "restart":  # a new session object: state comes from the log only
            sessions[name] = build(ms, name)
            continue
        await _step(sessions[name], models[name], command, step)
    return models


async def _check(ms: Memstream, models: dict[str, ReferenceContext], database: Path) -> None:
    await ms.wait_for("context")
    queries = ms.core.reads.context_queries
    for name, model in models.items():
        for block in LABELS:
            assert queries.block_content(ms.namespace, block, name) == model.blocks.get(block)
        assert queries.cached_prompt(ms.namespace, name) == model.prompt, name
        assert queries.loaded_skills(ms.namespace, name) == list(model.loaded), name
        kb = f"kb-{name or 'default'}"
        assert queries.entry_count(ms.namespace, kb) == len(model.entries)
        for entry, text in model.entries.items():
            if text.split()[:-1]:  # a searchable word besides the step number
                hits = queries.search_entries(ms.namespace, kb, f'"{text}"', 10)
                assert (entry, text) in hits, (entry, text, hits)
        # And a fresh session object sees the same loaded skills and, if frozen, the prompt
        fresh = build(ms, name)
        tools = await fresh.tools()
        loaded = ", ".join(model.loaded)
        assert tools["unload_context"].description.endswith(
            f" Currently loaded: {loaded}." if loaded else " No skills currently loaded."
        )
        if model.prompt is not None:
            assert await fresh.freeze_system_prompt() == model.prompt
    # And the live read models equal a replay of the log into a scratch database
    results = await verify(ms.core.log, SqliteCopy(database))
    assert [r.projection for r in results] == [*EMBEDDED_VERIFIED]
    assert all(r.ok for r in results), results


_counter = itertools.count()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=st.lists(commands, min_size=5, max_size=40))
@example(  # a freeze survives writes and a restart; clear refreshes; skills come back
    program=[
        ("write", 1, "a", "likes tea"),
        ("freeze", 1),
        ("write", 1, "a", "moved to Berlin"),
        ("load", 1, "pirate"),
        ("index", 1, "e1", "deploy on Fridays"),
        ("restart", 1),
        ("freeze", 1),
        ("unload", 1, "tax"),
        ("load", 1, "tax"),
        ("unload", 1, "pirate"),
        ("load", 1, "pirate"),
        ("append", 1, "b", "deploy on Fridays"),
        ("append", 1, "b", "deploy on Fridays"),
        ("clear", 1),
        ("freeze", 0),
        ("restart", 0),
        ("refresh", 0),
    ]
)
def test_context_read_model_equals_reference_and_replay(
    nats_server: NatsServerProcess, tmp_path: Path, program: list[tuple[Any, ...]]
) -> None:
    # Given one nats-server for the whole run and a fresh stream and data dir per example
    example = tmp_path / f"example-{next(_counter)}"

    async def body(ms: Memstream) -> None:
        # When a random program of context commands runs against it and the reference model
        models = await _run(ms, program)
        # Then the read model equals the reference model and a replay of the log
        await _check(ms, models, example / "memstream.db")

    run_on_fresh_stream(nats_server, example, "C", body)
