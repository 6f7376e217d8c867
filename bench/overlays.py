"""``get_history`` on a 2,000-message path with 1 and with 20 overlays, against the same path
with none."""

from __future__ import annotations

import time

from bench.harness import Row, bench_env, median, ms, paired_ratio
from bench.payloads import MessageFactory, chunks
from memstream.client import Memstream

NAME = "overlays"
TITLE = "get_history on a 2,000-message path with 1 and 20 overlays"
TARGET = 1.3
MESSAGES = 2_000
OVERLAYS = 20
ROUNDS = 21


async def _fill(memstream: Memstream, session_ids: list[str], factory: MessageFactory) -> None:
    """The same messages (ids ``m-<n>``, one chain) in each session."""
    messages = factory.messages("m", MESSAGES)
    for session_id in session_ids:
        session = memstream.session(session_id)
        for chain in chunks(messages, 500):
            await session.append_messages(chain)
    await memstream.wait_for("sessions")


async def _add_overlays(memstream: Memstream, factory: MessageFactory) -> None:
    # One overlay as a compaction leaves it: the head and a tail of about 100 messages kept.
    await memstream.session("one").add_compaction(factory.text(), "m-3", f"m-{MESSAGES - 101}")
    # Twenty non-nested ranges of 80 messages, one in each twentieth of the path.
    span = MESSAGES // OVERLAYS
    session = memstream.session("twenty")
    for k in range(OVERLAYS):
        first = k * span + 10
        await session.add_compaction(factory.text(), f"m-{first}", f"m-{first + 79}")


async def run() -> Row:
    factory = MessageFactory(seed=22)
    names = ("none", "one", "twenty")
    async with bench_env(NAME) as env:
        memstream = await env.memstream()
        try:
            await _fill(memstream, list(names), factory)
            await _add_overlays(memstream, factory)
            sessions = {name: memstream.session(name) for name in names}
            lengths = {name: len(await s.get_history()) for name, s in sessions.items()}
            expected = {
                "none": MESSAGES,
                "one": MESSAGES - (MESSAGES - 103) + 1,
                "twenty": MESSAGES - OVERLAYS * 80 + OVERLAYS,
            }
            assert lengths == expected, f"history lengths {lengths}, expected {expected}"
            samples: dict[str, list[float]] = {name: [] for name in names}
            for round_ in range(ROUNDS):  # interleaved, rotating which goes first
                for name in names[round_ % 3 :] + names[: round_ % 3]:
                    start = time.perf_counter()
                    await sessions[name].get_history()
                    samples[name].append(time.perf_counter() - start)
        finally:
            await memstream.close()
    one = paired_ratio(samples["one"], samples["none"])
    twenty = paired_ratio(samples["twenty"], samples["none"])
    return Row(
        TITLE,
        f"1 overlay {ms(median(samples['one']))}; {OVERLAYS} overlays "
        f"{ms(median(samples['twenty']))}",
        f"no overlay {ms(median(samples['none']))}",
        f"{one:.2f}× / {twenty:.2f}×",
        f"≤ {TARGET}× each",
        one <= TARGET and twenty <= TARGET,
        f"three sessions holding the same {MESSAGES:,} messages as one path; medians of "
        f"{ROUNDS} interleaved calls (rotating which goes first), ratios the medians of "
        f"per-round ratios; 1 overlay over m-3..m-{MESSAGES - 101} (history of "
        f"{lengths['one']} messages), {OVERLAYS} non-nested overlays of 80 messages, one per "
        f"{MESSAGES // OVERLAYS} (history of {lengths['twenty']}); every call reads and "
        f"decodes the whole path",
    )
