"""Context blocks: ``tools()`` + ``freeze_system_prompt()`` latency with 10 blocks, and a
``set_context`` round trip (execute → block visible) against an ``append_message`` round trip
(append → message visible), interleaved in the same run."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.harness import Row, bench_env, median, ms, percentile
from bench.payloads import MessageFactory
from memstream.client import Memstream
from memstream.context.providers import DirectorySkillProvider, SearchBlock, StaticContext
from memstream.session import Session

NAME = "context"
TITLE = "set_context round trip (execute → block visible)"
TARGET = 1.5
SESSIONS = 20
ROUND_TRIPS = 300
ENTRIES = 50
SKILLS = 20


def _skill_folder(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir()
    for i in range(SKILLS):
        body = f"How to handle case {i} of {name}. " * 20
        (folder / f"skill-{i:02d}.md").write_text(
            f"---\ndescription: {name} skill number {i}\n---\n{body}", encoding="utf-8"
        )
    return folder


def _session(memstream: Memstream, session_id: str, skills: list[Path]) -> Session:
    session = memstream.session(session_id).with_cached_prompt()
    session.with_context("soul", provider=StaticContext("You are a careful assistant."))
    for i in range(5):
        session.with_context(f"notes{i}", description=f"Notes {i}", max_tokens=4000)
    for i in range(2):
        session.with_context(f"kb{i}", description=f"Knowledge {i}", provider=SearchBlock())
    for i, folder in enumerate(skills):
        session.with_context(f"skills{i}", provider=DirectorySkillProvider(folder))
    return session


async def _prepare(memstream: Memstream, factory: MessageFactory, skills: list[Path]) -> None:
    """Write the blocks of every session and the entries of the shared search blocks."""
    texts = factory.messages("note", 5)
    for s in range(SESSIONS):
        session = _session(memstream, f"ctx-{s}", skills)
        for i in range(5):
            text = texts[i]["parts"][0]["text"]
            await session.execute_tool("set_context", {"label": f"notes{i}", "content": text})
        if s == 0:
            for kb in range(2):
                for e in range(ENTRIES):
                    text = factory.messages(f"kb{kb}-{e}", 1)[0]["parts"][0]["text"]
                    await session.execute_tool(
                        "set_context",
                        {"label": f"kb{kb}", "content": text, "metadata": {"title": f"e{e}"}},
                    )
    await memstream.wait_for("context")


async def run() -> Row:
    factory = MessageFactory(seed=7)
    with tempfile.TemporaryDirectory(prefix="memstream-bench-skills-") as tmp:
        skills = [_skill_folder(Path(tmp), f"skills{i}") for i in range(2)]
        async with bench_env(NAME) as env:
            memstream = await env.memstream()
            try:
                await _prepare(memstream, factory, skills)
                first: list[float] = []
                warm: list[float] = []
                for s in range(SESSIONS):
                    session = _session(memstream, f"ctx-{s}", skills)
                    for sink in (first, warm, warm):
                        start = time.perf_counter()
                        tools = await session.tools()
                        prompt = await session.freeze_system_prompt()
                        sink.append(time.perf_counter() - start)
                    assert len(tools) == 4, list(tools)
                    assert prompt.count("═" * 46) == 20, "10 blocks render"

                session = _session(memstream, "ctx-0", skills)
                chat = memstream.session("ctx-chat")
                ours: list[float] = []
                baseline: list[float] = []
                messages = factory.messages("rt", ROUND_TRIPS + 20)
                for index, message in enumerate(messages):
                    content = message["parts"][0]["text"]
                    start = time.perf_counter()
                    reply = await session.execute_tool(
                        "set_context", {"label": "notes0", "content": content}
                    )
                    await memstream.wait_for("context")
                    seen = memstream.core.reads.context_queries.block_content(
                        memstream.namespace, "notes0", "ctx-0"
                    )
                    elapsed = time.perf_counter() - start
                    assert reply.startswith("Written to notes0."), reply
                    assert seen == content, "the write is not visible"
                    start = time.perf_counter()
                    await chat.append_message(message)
                    stored = await chat.get_message(message["id"])
                    base = time.perf_counter() - start
                    assert stored is not None
                    if index >= 20:  # warm-up: aggregates load on first use
                        ours.append(elapsed)
                        baseline.append(base)
            finally:
                await memstream.close()
    ratio = median(ours) / median(baseline)
    return Row(
        TITLE,
        f"p50 {ms(median(ours))}, p99 {ms(percentile(ours, 0.99))}",
        f"append_message → get_message p50 {ms(median(baseline))}, "
        f"p99 {ms(percentile(baseline, 0.99))}",
        f"{ratio:.2f}×",
        f"≤ {TARGET}×",
        ratio <= TARGET,
        f"{ROUND_TRIPS} round trips interleaved, medians; projector in-process. tools() + "
        f"freeze_system_prompt() with 10 blocks (5 writable, 2 search with {ENTRIES} entries, "
        f"2 skill folders with {SKILLS} files, 1 static): first call on a new session object "
        f"p50 {ms(median(first))} (max {ms(max(first))}), warm p50 {ms(median(warm))} "
        f"(max {ms(max(warm))}), over {SESSIONS} sessions",
    )
