"""Registered sessions through the installed ``memstream`` console script: create, rename,
list, usage, fork, compact, split and delete, each a process of its own on the embedded
platform of one temp data dir."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.processes import clean_env, json_of, memstream

APPEND_SCRIPT = """
import asyncio, memstream
async def main():
    async with memstream.connect() as ms:
        await ms.session("trip").append_messages([
            {"id": f"m{i}", "role": "user" if i % 2 else "assistant",
             "parts": [{"type": "text", "text": f"Turn {i}: we compare the tram, the ferry and "
                        "the train between Lisbon and Porto, their prices, the timetable and "
                        "where to eat pastel de nata on the way. Which one should we take?"}]}
            for i in range(1, 9)
        ], None)
asyncio.run(main())
"""


def one_line_error(env: dict[str, str], *args: str) -> str:
    stderr = memstream(env, *args, expect=1).stderr
    assert stderr.startswith("error: ")
    assert stderr.count("\n") == 1
    return stderr.strip()


def test_registered_sessions_from_create_to_delete(tmp_path: Path) -> None:
    # Given the embedded platform of a fresh data dir (each command starts and releases it)
    env = clean_env(MEMSTREAM_DATA_DIR=str(tmp_path / "data"))

    # When two sessions are created, Then each is printed with the id first
    trip = json_of(env, "sessions", "create", "Trip", "--id", "trip", "--model", "m-1",
                   "--source", "cli")  # fmt: skip
    assert next(iter(trip)) == "id"
    assert (trip["id"], trip["name"], trip["model"], trip["source"]) == (
        "trip",
        "Trip",
        "m-1",
        "cli",
    )
    assert memstream(env, "sessions", "create", "Other", "--id", "other").stdout.startswith("id ")

    # When the first is renamed, Then it has the new name and is the most recently active
    renamed = json_of(env, "sessions", "rename", "trip", "Lisbon trip")
    assert renamed["name"] == "Lisbon trip"
    assert renamed["updated_at"] > trip["updated_at"]
    page = json_of(env, "sessions", "registered")
    assert ([s["id"] for s in page["sessions"]], page["cursor"]) == (["trip", "other"], None)
    first = json_of(env, "sessions", "registered", "--limit", "1")
    assert [s["id"] for s in first["sessions"]] == ["trip"]
    rest = json_of(env, "sessions", "registered", "--limit", "1", "--cursor", first["cursor"])
    assert ([s["id"] for s in rest["sessions"]], rest["cursor"]) == (["other"], None)
    table = memstream(env, "sessions", "registered").stdout
    assert "Lisbon" in table  # (80 columns: the name may wrap)
    assert "2 registered sessions" in table

    # When usage is added twice, Then the counters hold the sums
    memstream(env, "usage", "add", "trip", "100", "20", "0.5")
    added = json_of(env, "usage", "add", "trip", "1", "1", "0.25")
    shown = json_of(env, "usage", "show", "trip")
    assert shown == added
    assert (shown["input_tokens"], shown["output_tokens"], shown["estimated_cost"]) == (
        101,
        21,
        0.75,
    )
    assert "output tokens" in memstream(env, "usage", "show", "trip").stdout

    # Given eight long messages in the session
    subprocess.run([sys.executable, "-c", APPEND_SCRIPT], env=env, check=True, timeout=120)

    # When it is forked at the third, Then the fork holds that path, under the same ids
    fork = json_of(env, "sessions", "fork", "trip", "m3", "Trip, other ending")
    assert (fork["parent_session_id"], fork["name"]) == ("trip", "Trip, other ending")
    fork_history = json_of(env, "sessions", "history", fork["id"])
    assert [m["id"] for m in fork_history] == ["m1", "m2", "m3"]

    # When the session is compacted keeping one head message and a small tail
    overlay = json_of(env, "sessions", "compact", "trip", "--protect-head", "1",
                      "--tail-tokens", "120")  # fmt: skip
    # Then the overlay stored is printed, and the history shows its summary in place
    assert (overlay["session_id"], overlay["from_message_id"]) == ("trip", "m2")
    assert "## Key Points" in overlay["summary"]
    history = json_of(env, "sessions", "history", "trip")
    assert history[1]["id"] == f"compaction_{overlay['id']}"
    assert history[0]["id"] == "m1"
    assert history[-1]["id"] == "m8"
    assert len(history) < 8
    # And a session too short to compact says so
    nothing = memstream(env, "sessions", "compact", fork["id"]).stdout
    assert nothing.strip() == f"nothing to compact in session {fork['id']!r}"

    # When it is split, Then a new session starts from the summary and the old one has ended
    split = json_of(env, "sessions", "split", "trip", "We chose the train.", "--name", "Trip 2")
    assert (split["name"], split["parent_session_id"], split["model"]) == ("Trip 2", "trip", "m-1")
    [context] = json_of(env, "sessions", "history", split["id"])
    assert context["parts"][0]["text"].endswith("We chose the train.")
    listed = json_of(env, "sessions", "registered")["sessions"]
    assert [s["id"] for s in listed] == [split["id"], "trip", fork["id"], "other"]
    assert listed[1]["end_reason"] == "compaction"

    # When a delete has neither --yes nor a terminal to ask on, Then it is refused
    refused = one_line_error(env, "sessions", "delete", "other")
    assert refused == "error: not deleting session 'other': no terminal to confirm on; pass --yes"
    assert json_of(env, "usage", "show", "other")["id"] == "other"
    # And with --yes the session is gone
    deleted = memstream(env, "sessions", "delete", "other", "--yes").stdout
    assert deleted.strip() == "deleted session 'other'"
    assert (
        one_line_error(env, "usage", "show", "other") == "error: session 'other' is not registered"
    )

    # And an unknown session or message is one line and exit 1
    assert one_line_error(env, "sessions", "rename", "nope", "x") == (
        "error: session 'nope' is not registered"
    )
    assert one_line_error(env, "sessions", "fork", "trip", "m99", "x") == (
        "error: no message 'm99' in session 'trip'"
    )
    assert one_line_error(env, "sessions", "compact", "nope") == (
        "error: session 'nope' is not registered and has no messages"
    )
    assert "not registered" in one_line_error(env, "sessions", "split", "nope", "summary")
