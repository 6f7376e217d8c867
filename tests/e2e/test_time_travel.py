"""Time travel (issue 16, item 3): read commands answer ``--as-of`` a sequence or a time from a
cached copy, and ``projections rebuild --as-of --into`` builds the read models as they were."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.deployment import deployment_env, deployment_settings
from support.processes import json_of, memstream

from memstream.client import Memstream, open_memstream
from memstream.projections.read_models import read_models_at
from memstream.workers.admin.time_travel import CACHE_DIR, prune_cache
from memstream.workers.runtime.nats_server import NatsServerProcess


@pytest.fixture
async def history(
    tmp_path: Path, nats_server: NatsServerProcess
) -> AsyncIterator[tuple[Memstream, dict[str, str], dict[str, Any]]]:
    """A session written in two stages; the sequence and time between them."""
    settings = deployment_settings(nats_server.url, tmp_path / "data")
    ms = await open_memstream(settings, workers=True)
    env = deployment_env(settings)
    try:
        trip = ms.session("trip")
        await trip.append_message({"id": "m1", "role": "user", "content": "ferry to Lisbon"})
        await trip.append_message({"id": "m2", "role": "assistant", "content": "the 8:15"})
        await trip.add_context("memory")
        await trip.replace_context_block("memory", "Likes ferries")
        then = {"seq": await ms.core.log.stream_last_seq()}
        await asyncio.sleep(0.05)
        then["time"] = datetime.now(UTC).isoformat()
        await asyncio.sleep(0.05)
        await trip.append_message({"id": "m3", "role": "user", "content": "the tram instead"})
        await trip.replace_context_block("memory", "Likes trams")
        await ms.session("later").append_message({"role": "user", "content": "tram stop"})
        await ms.wait_for("sessions")
        yield ms, env, then
    finally:
        await ms.close()


def _ids(messages: list[dict[str, Any]]) -> list[str]:
    return [m["id"] for m in messages]


async def test_read_commands_answer_as_of_a_sequence_or_a_time(
    history: tuple[Memstream, dict[str, str], dict[str, Any]],
) -> None:
    ms, env, then = history
    seq, when = str(then["seq"]), then["time"]

    def work() -> dict[str, Any]:
        return {
            "now": json_of(env, "sessions", "history", "trip"),
            "seq": json_of(env, "sessions", "history", "trip", "--as-of", seq),
            "time": json_of(env, "sessions", "history", "trip", "--as-of", when),
            "naive": json_of(env, "sessions", "history", "trip", "--as-of", when[:26]),
            "list": json_of(env, "sessions", "list", "--as-of", seq),
            "search": json_of(env, "sessions", "search", "tram", "--as-of", seq),
            "search_now": json_of(env, "sessions", "search", "tram"),
            "block": json_of(env, "context", "show", "memory", "--session", "trip", "--as-of", seq),
            "before": json_of(env, "sessions", "history", "trip", "--as-of", "1999-01-01"),
            "future": memstream(env, "sessions", "history", "trip", "--as-of", "99999", expect=1),
            "typo": memstream(env, "sessions", "history", "trip", "--as-of", "yesterday", expect=1),
        }

    start = time.perf_counter()
    got = await asyncio.to_thread(work)
    assert time.perf_counter() - start < 60
    assert _ids(got["now"]) == ["m1", "m2", "m3"]
    assert _ids(got["seq"]) == _ids(got["time"]) == _ids(got["naive"]) == ["m1", "m2"]
    assert [s["session_id"] for s in got["list"]] == ["trip"]
    assert got["search"] == []
    assert {h["session_id"] for h in got["search_now"]} == {"trip", "later"}
    assert got["block"]["content"] == "Likes ferries"
    assert got["before"] == []
    assert "after the stream's last sequence" in got["future"].stderr
    assert "neither a stream sequence nor an ISO 8601 time" in got["typo"].stderr
    # One cached copy per sequence named (the time and the sequence name the same one; before
    # the first event is sequence 0), private to the user.
    cached = sorted(p.name for p in (ms.settings.data_dir / CACHE_DIR).iterdir())
    assert cached == sorted({f"{ms.settings.stream}-0", f"{ms.settings.stream}-{seq}"})
    assert all(
        p.stat().st_mode & 0o777 == 0o700 for p in (ms.settings.data_dir / CACHE_DIR).iterdir()
    )


async def test_rebuild_as_of_into_another_copy(
    history: tuple[Memstream, dict[str, str], dict[str, Any]], tmp_path: Path
) -> None:
    ms, env, then = history
    target = tmp_path / "past"
    target.mkdir()

    def work() -> tuple[Any, Any, Any]:
        built = json_of(
            env, "projections", "rebuild", "--as-of", str(then["seq"]), "--into", str(target)
        )
        refused = memstream(env, "projections", "rebuild", "--as-of", "3", expect=1)
        vectors = memstream(
            env,
            "projections",
            "rebuild",
            "vectors",
            "--as-of",
            "3",
            "--into",
            str(target),
            expect=1,
        )
        return built, refused, vectors

    built, refused, vectors = await asyncio.to_thread(work)
    assert built["sequence"] == then["seq"]
    assert "vectors" not in built["projections"]
    models = read_models_at(str(target)).reader(on_damage=_raise)
    try:
        assert _ids(models.sessions.history("default", "trip")) == ["m1", "m2"]
        assert models.context.block_content("default", "memory", "trip") == "Likes ferries"
        assert models.tracked_seq("sessions") == then["seq"]
    finally:
        models.close()
    assert "name it with --into" in refused.stderr
    assert "--as-of builds" in vectors.stderr
    # The live read models moved on and were left alone.
    assert _ids(await ms.session("trip").get_history()) == ["m1", "m2", "m3"]


def _raise(error: Exception) -> Any:
    raise error


def test_the_cache_keeps_the_most_recently_used(tmp_path: Path) -> None:
    root = tmp_path / CACHE_DIR
    for index in range(5):
        folder = root / f"S-{index}"
        folder.mkdir(parents=True)
        (folder / "memstream.db").write_text("x")
        stamp = 1_000_000 + index
        os.utime(folder, (stamp, stamp))
    deleted = prune_cache(tmp_path, keep=2)
    assert sorted(p.name for p in deleted) == ["S-0", "S-1", "S-2"]
    assert sorted(p.name for p in root.iterdir()) == ["S-3", "S-4"]


async def test_verify_exit_status_tells_a_scheduler_what_happened(
    history: tuple[Memstream, dict[str, str], dict[str, Any]],
) -> None:
    """0: every checksum matches; 1: one differs (a row changed behind the log's back); 2: the
    check could not run (NATS unreachable)."""
    ms, env, _ = history
    database = ms.settings.data_dir / "memstream.db"
    unreachable = {**env, "MEMSTREAM_NATS_URL": "nats://127.0.0.1:1"}

    def work() -> tuple[Any, Any, Any]:
        good = memstream(env, "projections", "verify", "sessions", "context")
        with sqlite3.connect(database) as tamper:
            tamper.execute("UPDATE messages SET content = '{\"id\":\"forged\"}' WHERE id = 'm2'")
        bad = memstream(env, "projections", "verify", "sessions", "--json", expect=1)
        down = memstream(unreachable, "projections", "verify", expect=2)
        return good, bad, down

    good, bad, down = await asyncio.to_thread(work)
    assert "error" not in good.stderr
    report = json.loads(bad.stdout)
    assert [(r["projection"], r["ok"]) for r in report] == [("sessions", False)]
    assert "checksums differ for sessions" in bad.stderr
    assert "could not verify" in down.stderr
    assert "cannot reach NATS" in down.stderr
