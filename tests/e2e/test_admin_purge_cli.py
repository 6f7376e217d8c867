"""``memstream admin purge`` (issue 16, item 5) from the command line, beside a running platform
in another process: a dry run, the purge, ``projections verify`` still exit 0, and the cached
``--as-of`` copies (built before the purge, holding what it erased) deleted, in the purging data
dir at once and in any other data dir (another host's) at its next ``--as-of`` read."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from support.deployment import deployment_env, deployment_settings
from support.processes import json_of, memstream

from memstream.client import open_memstream
from memstream.settings import Settings
from memstream.workers.log.subjects import logical_subject
from memstream.workers.runtime.nats_server import NatsServerProcess


def platform(tmp_path: Path, nats_server: NatsServerProcess) -> tuple[Settings, dict[str, str]]:
    """A new stream's settings for this test's client, and the environment of its CLI
    processes (the same data dir and stream)."""
    settings = deployment_settings(nats_server.url, tmp_path / "data")
    return settings, deployment_env(settings)


async def test_purge_from_the_cli_keeps_verify_green(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    settings, env = platform(tmp_path, nats_server)
    ms = await open_memstream(settings, workers=True)
    try:
        manager = ms.session_manager()
        await manager.create("Doomed", session_id="doomed", model="gpt-x")
        await ms.session("doomed").append_message({"role": "user", "content": "my secret"})
        await manager.create("Kept", session_id="kept")
        await ms.session("kept").append_message({"role": "user", "content": "hello"})
        await manager.delete("doomed")
        for projection in ("sessions", "registry", "analytics"):
            await ms.wait_for(projection)
        as_of = str(await ms.core.log.stream_last_seq())
        # A cached as-of copy of the time before the deletion, which holds the secret
        history = json_of(env, "sessions", "history", "doomed", "--as-of", "2")
        assert ["my secret" in str(m) for m in history] == [True]
        cache = settings.data_dir / "as-of"
        assert any(cache.iterdir())
        # And one in another data dir (another host's CLI, say), which the purge cannot reach
        elsewhere = {**env, "MEMSTREAM_DATA_DIR": str(tmp_path / "elsewhere")}
        history = json_of(elsewhere, "sessions", "history", "doomed", "--as-of", "2")
        assert ["my secret" in str(m) for m in history] == [True]
        cached_elsewhere = tmp_path / "elsewhere" / "as-of"
        (old_copy,) = cached_elsewhere.iterdir()

        # Bad input is refused before anything is read, naming the option and the value
        refused = memstream(env, "admin", "purge", "--older-than", "30", expect=1)
        assert "--older-than '30' is not a duration" in refused.stderr
        for wait in ("-1", "601", "nan"):
            refused = memstream(
                env, "admin", "purge", "--older-than", "0s", "--wait", wait, expect=1
            )
            assert f"--wait {float(wait)!r} must be between 0 and 600" in refused.stderr

        plan = json_of(env, "admin", "purge", "--older-than", "0s", "--dry-run")
        assert plan["dry_run"] is True
        assert plan["records"] == []
        assert [(u["kind"], u["id"]) for u in plan["purged"]] == [("session", "doomed")]
        assert any(cache.iterdir())  # a dry run changes nothing

        done = json_of(env, "admin", "purge", "--older-than", "0s")
        assert done["erased"] == plan["events"] > 0
        assert done["overwritten"] == done["erased"]  # each in the server's files too
        assert done["deletes_denied"] is False
        assert done["records"] == [int(as_of) + 1]
        assert not cache.exists() or not any(cache.iterdir())
        history = json_of(env, "sessions", "history", "doomed", "--as-of", "2")
        assert history == []
        # The other data dir's copy is found built before the purge at its next read: deleted,
        # and the read answered from the purged log
        assert (old_copy / "memstream.db").exists()
        assert json_of(elsewhere, "sessions", "history", "doomed", "--as-of", "2") == []
        assert (old_copy / "purges").read_text() == "1"
        again = memstream(env, "admin", "purge", "--older-than", "0s")
        assert "erased 0 events of 0 sessions and 0 profiles" in again.stderr

        # (the platform's workers run on this test's event loop: let them apply the purge)
        end = await ms.core.log.stream_last_seq()
        for projection in ("sessions", "context", "registry", "memory", "analytics"):
            await ms.wait_for(projection, end)
        verified = json_of(env, "projections", "verify")
        assert {r["projection"]: r["ok"] for r in verified} == {
            "sessions": True,
            "context": True,
            "registry": True,
            "memory": True,
            "analytics": True,
        }
    finally:
        await ms.close()


async def test_a_purge_from_the_cli_makes_the_workers_elsewhere_forget_dead_letters(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    settings, env = platform(tmp_path, nats_server)
    ms = await open_memstream(settings, workers=True)
    try:
        # Given two profiles, each with an event no projection can read (dead letters naming
        # the profile), one of them deleted
        memory = ms.agent_memory("default")
        for name in ("temp", "gina"):
            await (await memory.get_profile(name)).remember(f"{name} likes trams")
            await ms.core.log.js.publish(
                f"{settings.subject_prefix}.default.profile.{name}",
                b"\xff X123",
                headers={"Nats-Msg-Id": name},
            )
        await memory.delete_profile("temp")
        for projection in ("memory", "analytics"):
            await ms.wait_for(projection)

        def letter_subjects() -> set[str]:  # as another process's CLI reads them
            letters = json_of(env, "status", "--dead-letters", "100")["dead_letters"]
            return {logical_subject(str(d["subject"])) for d in letters}

        temp, gina = (f"{settings.subject_prefix}.default.profile.{n}" for n in ("temp", "gina"))
        assert letter_subjects() == {temp, gina}

        # When the deleted profile is purged by a CLI process
        done = json_of(env, "admin", "purge", "--older-than", "0s")
        assert [(u["kind"], u["id"]) for u in done["purged"]] == [("profile", "temp")]

        # Then the workers of this process, applying the purge record, forget its dead letters
        # and keep the other's, as the next CLI process reads them
        end = await ms.core.log.stream_last_seq()
        for projection in ("memory", "analytics"):
            await ms.wait_for(projection, end)
        deadline = time.monotonic() + 10
        while (subjects := letter_subjects()) != {gina}:
            assert time.monotonic() < deadline, subjects
            await asyncio.sleep(0.1)
    finally:
        await ms.close()
