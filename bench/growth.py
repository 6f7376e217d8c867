"""Sequential append rate into a session of 100,000 messages against the same at 2,000."""

from __future__ import annotations

import time

from bench.fixtures import fill_session
from bench.harness import Row, bench_env, median, paired_ratio
from bench.payloads import MessageFactory

NAME = "growth"
TITLE = "growth: sequential append into a 100,000-message session"
TARGET = 0.8
BIG = 100_000
SMALL = 2_000
ROUNDS = 8
PER_ROUND = 800


async def run() -> Row:
    factory = MessageFactory(seed=7)
    async with bench_env(NAME) as env:
        memstream = await env.memstream()
        try:
            fill_big = await fill_session(memstream, "big", factory, BIG)
            await fill_session(memstream, "small", factory, SMALL)
            # A new client's first append loads the aggregate from the log (reported, not rated).
            fresh = await env.memstream(workers=False)
            try:
                first: dict[str, float] = {}
                for name in ("small", "big"):
                    start = time.perf_counter()
                    await fresh.session(name).append_message(factory.message(f"{name}-first", 0))
                    first[name] = time.perf_counter() - start
            finally:
                await fresh.close()
            sessions = {name: memstream.session(name) for name in ("small", "big")}
            for name, session in sessions.items():  # this client re-reads the fresh appends
                await session.append_message(factory.message(f"{name}-warm", 1))
            rates: dict[str, list[float]] = {"small": [], "big": []}
            for round_ in range(ROUNDS):
                order = ("small", "big") if round_ % 2 == 0 else ("big", "small")
                for name in order:
                    session = sessions[name]
                    messages = factory.messages(f"{name}-r{round_}", PER_ROUND)
                    await memstream.wait_for("sessions")
                    start = time.perf_counter()
                    for message in messages:
                        await session.append_message(message)
                    rates[name].append(PER_ROUND / (time.perf_counter() - start))
            await memstream.wait_for("sessions")
            count = memstream.core.reads.session_queries.message_count("default", "big")
            expected = BIG + 2 + ROUNDS * PER_ROUND
            assert count == expected, f"big session has {count} messages, expected {expected}"
        finally:
            await memstream.close()
    big, small = median(rates["big"]), median(rates["small"])
    ratio = paired_ratio(rates["big"], rates["small"])
    return Row(
        TITLE,
        f"{big:,.0f} msg/s",
        f"{small:,.0f} msg/s (at {SMALL:,})",
        f"{ratio:.2f}×",
        f"≥ {TARGET}×",
        ratio >= TARGET,
        f"medians of {ROUNDS} interleaved rounds of {PER_ROUND} (alternating which goes first), "
        f"ratio the median of per-round ratios ("
        + ", ".join(f"{b / s:.2f}" for b, s in zip(rates["big"], rates["small"], strict=True))
        + "); "
        f"100k session built in "
        f"{fill_big:.1f} s; a new client's first append (aggregate load) took "
        f"{first['big'] * 1000:.0f} ms at 100k vs {first['small'] * 1000:.0f} ms at 2k",
    )
