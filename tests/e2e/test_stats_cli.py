"""``memstream stats`` (issue 16, item 6): daily volumes counted by the analytics worker, a
consumer of the log of its own — in the embedded platform, or as ``memstream worker analytics``
in its own process with its own read-model copy."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.deployment import deployment_env, deployment_settings
from support.processes import MEMSTREAM, json_of, memstream, stop, wait_for_text

from memstream.client import Memstream, open_memstream
from memstream.projections.analytics_rows import grouped
from memstream.workers.runtime.nats_server import NatsServerProcess


@pytest.fixture
async def platform(
    tmp_path: Path, nats_server: NatsServerProcess
) -> AsyncIterator[tuple[Memstream, dict[str, str]]]:
    """A client running every worker (the analytics worker too), with registered sessions of
    two models, an unregistered one, and a second namespace; the CLI's environment."""
    settings = deployment_settings(nats_server.url, tmp_path / "a")
    ms = await open_memstream(settings, workers=True)
    env = deployment_env(settings)
    try:
        manager = ms.session_manager()
        await manager.create("One", session_id="one", model="gpt-4o", source="web")
        await manager.create("Two", session_id="two", model="claude", source="slack")
        await ms.session("one").append_messages(
            [{"role": "user", "content": f"question {i}"} for i in range(3)]
        )
        await ms.session("two").append_message({"role": "user", "content": "hi"})
        await ms.session("loose").append_message({"role": "user", "content": "unregistered"})
        await manager.add_usage("one", 1000, 250, 0.0125)
        await manager.add_usage("two", 40, 10, 0.001)
        team = await open_memstream(replace(settings, namespace="team"), workers=False)
        try:
            await team.session("t").append_message({"role": "user", "content": "team"})
        finally:
            await team.close()
        yield ms, env
    finally:
        await ms.close()


def _start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    with log.open("w") as out:
        return subprocess.Popen(
            [MEMSTREAM, "worker", "analytics"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def _today() -> str:
    return datetime.now(UTC).date().isoformat()


async def test_stats_by_model_by_day_and_across_namespaces(
    platform: tuple[Memstream, dict[str, str]], tmp_path: Path
) -> None:
    ms, env = platform
    chart = tmp_path / "volumes.png"

    def work() -> dict[str, Any]:
        return {
            "rows": json_of(env, "stats"),
            "by_day": json_of(env, "stats", "--by", "day"),
            "spaces": json_of(env, "stats", "--all-namespaces", "--by", "namespace"),
            "future": json_of(env, "stats", "--since", "2999-01-01"),
            "table": memstream({**env, "COLUMNS": "200"}, "stats", "--by", "model"),
            "plot": memstream(env, "stats", "--by", "day", "--plot", str(chart)),
            "bad_by": memstream(env, "stats", "--by", "week", expect=1),
            "bad_range": memstream(
                env, "stats", "--since", "2026-02-01", "--until", "2026-01-01", expect=1
            ),
            "no_day": memstream(env, "stats", "--by", "model", "--plot", str(chart), expect=1),
            "piped": subprocess.run(
                [MEMSTREAM, "stats", "--by", "day", "--plot", "-"],
                env=env,
                capture_output=True,
                timeout=120,
                check=True,
            ),
        }

    got = await asyncio.to_thread(work)
    day = _today()
    by_model = {(r["model"], r["source"]): r for r in got["rows"]}
    assert {r["day"] for r in got["rows"]} == {day}
    one, two, loose = by_model[("gpt-4o", "web")], by_model[("claude", "slack")], by_model[("", "")]
    assert (one["sessions"], one["messages"], one["input_tokens"], one["output_tokens"]) == (
        1,
        3,
        1000,
        250,
    )
    assert one["cost"] == 0.0125
    assert (two["sessions"], two["messages"], two["cost"]) == (1, 1, 0.001)
    assert (loose["sessions"], loose["messages"], loose["input_tokens"]) == (1, 1, 0)
    (total,) = got["by_day"]
    assert (total["day"], total["sessions"], total["messages"]) == (day, 3, 5)
    assert total["cost"] == 0.0135
    spaces = {r["namespace"]: (r["sessions"], r["messages"]) for r in got["spaces"]}
    assert spaces == {"default": (3, 5), "team": (1, 1)}
    assert got["future"] == []
    assert "gpt-4o" in got["table"].stdout
    assert "claude" in got["table"].stdout
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert chart.stat().st_mode & 0o777 == 0o600
    assert got["piped"].stdout[:8] == b"\x89PNG\r\n\x1a\n"  # --plot -: only the PNG, on stdout
    assert "name one or more of day, namespace, model, source" in got["bad_by"].stderr
    assert "--since 2026-02-01 is after --until 2026-01-01" in got["bad_range"].stderr
    assert "include day in --by" in got["no_day"].stderr
    # The API gives the same rows (per namespace too: the CLI groups this one's by day,
    # model and source).
    assert grouped(await ms.stats(), ["day", "model", "source"]) == got["rows"]
    assert {(r["model"], r["messages"]) for r in await ms.stats()} == {
        ("gpt-4o", 3),
        ("claude", 1),
        ("", 1),
    }


async def test_an_analytics_worker_in_its_own_process_counts_for_its_own_copy(
    platform: tuple[Memstream, dict[str, str]], tmp_path: Path
) -> None:
    """Another consumer of the same stream: ``memstream worker analytics`` for a second data
    dir builds the same volumes with a durable consumer of its own, while the first copy's
    workers go on."""
    ms, env = platform
    other = {**env, "MEMSTREAM_DATA_DIR": str(tmp_path / "b")}
    log = tmp_path / "worker.log"
    worker = await asyncio.to_thread(_start_worker, other, log)
    try:
        await asyncio.to_thread(wait_for_text, log, "worker analytics", worker)
        theirs = await asyncio.to_thread(json_of, other, "stats")
        ours = grouped(await ms.stats(), ["day", "model", "source"])
        await ms.session("one").append_message({"role": "user", "content": "one more"})
        again = await asyncio.to_thread(json_of, other, "stats", "--by", "day")
        status = await asyncio.to_thread(json_of, other, "status")
    finally:
        assert stop(worker) == 0
    assert theirs == ours
    assert again[0]["messages"] == 6
    consumers = {c["name"] for c in status["consumers"] if c["durable"]}
    # One analytics consumer per read-model copy: this data dir's and the platform's.
    analytics = sorted(name for name in consumers if name.endswith("-analytics"))
    assert len(analytics) == 2
    assert f"projector-{status['copy_id']}-analytics" in analytics
