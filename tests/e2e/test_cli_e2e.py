"""The installed ``memstream`` console script end to end, in subprocesses, on a real nats-server."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from support.processes import MEMSTREAM, clean_env, json_of, memstream, stop, wait_for_text

AUDIT_HEADERS = {
    "command_id",
    "causation_id",
    "correlation_id",
    "actor",
    "originator_id",
    "originator_version",
}


@pytest.fixture
def projector(tmp_path: Path, cli_env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """``memstream worker projector`` (the FastStream app) as its own process, lingering up to
    5 s per transaction: every read below is a process of its own that cuts that short."""
    log = tmp_path / "worker.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [MEMSTREAM, "worker", "projector", "--linger", "5"],
            env=cli_env,
            stdout=sink,
            stderr=sink,
            text=True,
        )
    try:
        wait_for_text(log, "FastStream app started", process)
        assert "lingering up to 5 s" in log.read_text()
        yield process
    finally:
        if process.poll() is None:
            assert stop(process) == 0, log.read_text()
    assert "projector: stopped" in log.read_text()


def test_append_history_search_export_rebuild_verify_status(
    tmp_path: Path, cli_env: dict[str, str], projector: subprocess.Popen[str]
) -> None:
    env = cli_env
    # Given a session with a root, a reply, and a branch off the root
    memstream(env, "append", "trip", "--id", "m1", "--root", "--text", "Plan a trip to Lisbon")
    memstream(env, "append", "trip", "--id", "m2", "--role", "assistant", "--text", "Take tram 28")
    appended = json_of(env, "sessions", "append", "trip", "--id", "m3", "--parent", "m1",
                       "--text", "Or rather Porto by ferry?")  # fmt: skip
    assert appended == {"session_id": "trip", "id": "m3", "seq": 3}

    # When its history is read, Then the latest leaf's path comes back (and any leaf's on demand)
    assert [m["id"] for m in json_of(env, "sessions", "history", "trip")] == ["m1", "m3"]
    leaf_m2 = json_of(env, "sessions", "history", "trip", "--leaf", "m2")
    assert [(m["id"], m["role"]) for m in leaf_m2] == [("m1", "user"), ("m2", "assistant")]
    assert "Take tram 28" in memstream(env, "sessions", "history", "trip", "--leaf", "m2").stdout
    unknown_leaf = memstream(env, "sessions", "history", "trip", "--leaf", "nope").stdout
    assert unknown_leaf.strip() == "no message 'nope' in session 'trip'"

    # And search finds a message across sessions and within the session
    hits = json_of(env, "sessions", "search", "tram")
    assert [(h["session_id"], h["id"]) for h in hits] == [("trip", "m2")]
    assert json_of(env, "sessions", "search", "ferry", "--session", "trip")[0]["id"] == "m3"
    assert json_of(env, "sessions", "search", "ferry", "--session", "other") == []

    # And the export is one JSON object per event, with the audit headers, the headers as
    # stored (what events import sends again) and the decoded payload
    export = tmp_path / "audit.jsonl"
    exported = memstream(env, "events", "export", "-o", str(export))
    assert "exported 3 events" in exported.stderr
    events = [json.loads(line) for line in export.read_text().splitlines()]
    assert [e["seq"] for e in events] == [1, 2, 3]
    for event in events:
        assert set(event) == {
            "seq",
            "subject",
            "time",
            "type",
            "headers",
            "nats_headers",
            "payload",
        }
        assert set(event["headers"]) >= AUDIT_HEADERS
        assert event["nats_headers"]["Nats-Msg-Id"] == event["headers"]["msg_id"]
        assert event["subject"] == f"{env['MEMSTREAM_SUBJECT_PREFIX']}.default.session.trip"
        assert event["type"] == "session.message_appended"  # the public contract's name
        assert event["headers"]["schema"] == "1"
    assert [e["payload"]["message"]["id"] for e in events] == ["m1", "m2", "m3"]
    # The message is a nested object in the payload (event contract v1)
    assert events[0]["payload"]["message"]["id"] == "m1"
    assert events[2]["payload"]["parent_id"] == "m1"
    for wanted in ("MessageAppended", "session.message_appended"):
        filtered = memstream(
            env, "events", "export", "--type", wanted, "--from-seq", "2", "--to-seq", "2"
        ).stdout.splitlines()
        assert [json.loads(line)["seq"] for line in filtered] == [2]
    assert memstream(env, "events", "export", "--type", "MessagesDeleted").stdout == ""
    tail = memstream(env, "events", "tail", "-n", "2", "--json").stdout.splitlines()
    assert [json.loads(line)["seq"] for line in tail] == [2, 3]
    # And one event is shown by its sequence, the same object as its export line
    assert json_of(env, "events", "show", "3") == events[2]
    shown = memstream(env, "events", "show", "3").stdout
    assert "session.message_appended" in shown
    assert events[2]["headers"]["command_id"] in shown
    missing = memstream(env, "events", "show", "4", expect=1)
    assert missing.stderr == "error: no event at sequence 4; the log's last sequence is 3\n"

    # And the sessions are listed, and one is shown with its tree's shape
    listed = json_of(env, "sessions", "list")
    assert [(s["session_id"], s["messages"]) for s in listed] == [("trip", 3)]
    # (the same instants: the log writes UTC with Z, the read model with +00:00)
    first, last = (datetime.fromisoformat(events[i]["headers"]["timestamp"]) for i in (0, 2))
    assert datetime.fromisoformat(listed[0]["first_at"]) == first
    assert datetime.fromisoformat(listed[0]["last_at"]) == last
    trip = json_of(env, "sessions", "show", "trip")
    assert trip == {
        "session_id": "trip",
        "messages": 3,
        "leaves": 2,
        "latest_leaf": "m3",
        "path_length": 2,
        "compactions": 0,
        "first_at": listed[0]["first_at"],
        "last_at": listed[0]["last_at"],
        "context_blocks": [],
        "loaded_skills": [],
        "prompt_frozen": False,
    }
    assert "latest leaf" in memstream(env, "sessions", "show", "trip").stdout
    unknown = memstream(env, "sessions", "show", "nope", expect=1)
    assert unknown.stderr == "error: session 'nope' not found in namespace 'default'\n"

    # When the read model is rebuilt from the log, Then it verifies equal to a scratch rebuild
    rebuilt = memstream(env, "projections", "rebuild")
    assert "up to sequence 3" in rebuilt.stdout
    verified = json_of(env, "projections", "verify")
    assert verified
    assert all(v["ok"] and v["live"] == v["rebuilt"] for v in verified)
    # (analytics only where an analytics worker counts for the copy: none runs here)
    assert [v["projection"] for v in verified] == ["sessions", "context", "registry", "memory"]
    assert json_of(env, "projections", "list") == [
        {"name": "sessions", "tracked_seq": 3, "lag": 0},
        {"name": "context", "tracked_seq": 3, "lag": 0},
        {"name": "registry", "tracked_seq": 3, "lag": 0},
        {"name": "memory", "tracked_seq": 3, "lag": 0},
        {"name": "vectors", "tracked_seq": 3, "lag": 0},
        {"name": "analytics", "tracked_seq": 3, "lag": 0},
    ]
    past = json_of(env, "projections", "verify", "--as-of", "2")
    assert past[0]["seq"] == 2
    assert past[0]["comparable"] is False

    # And status shows the stream, the worker's durable consumer (named from this data dir's
    # read-model copy), that copy with no lag, and no dead letters
    status = json_of(env, "status")
    assert status["stream"]["name"] == env["MEMSTREAM_STREAM"]
    assert (status["stream"]["messages"], status["stream"]["last_seq"]) == (3, 3)
    consumer = f"projector-{status['copy_id']}"
    assert {"name": consumer, "durable": True}.items() <= next(
        c for c in status["consumers"] if c["name"] == consumer
    ).items()
    assert status["copies"] == [
        {
            "copy_id": status["copy_id"],
            "consumers": [consumer],
            "ack_floor": 3,
            "lag": 0,
            "local": True,
        }
    ]
    assert status["projections"] == [
        {"name": "sessions", "tracked_seq": 3, "lag": 0},
        {"name": "context", "tracked_seq": 3, "lag": 0},
        {"name": "registry", "tracked_seq": 3, "lag": 0},
        {"name": "memory", "tracked_seq": 3, "lag": 0},
        {"name": "vectors", "tracked_seq": 3, "lag": 0},
        {"name": "analytics", "tracked_seq": 3, "lag": 0},
    ]
    assert status["dead_letter_count"] == 0


def test_context_set_list_show_and_prompt_show(
    cli_env: dict[str, str], projector: subprocess.Popen[str]
) -> None:
    env = cli_env
    # Given a block written and then appended to through the CLI
    assert json_of(env, "context", "set", "memory", "User likes tea", "--session", "chat-1") == {
        "label": "memory", "session_id": "chat-1", "tokens": 4}  # fmt: skip
    memstream(env, "context", "set", "memory", "and coffee", "--session", "chat-1", "--append")
    # Then the block is listed under its session-namespaced key, and shows the joined content
    listed = json_of(env, "context", "list")
    assert [(b["key"], b["label"], b["session_id"]) for b in listed] == [
        ("memory_chat-1", "memory", "chat-1")
    ]
    assert json_of(env, "context", "list", "--session", "other") == []
    # And sessions show knows a session that has a block but no messages
    shown = json_of(env, "sessions", "show", "chat-1")
    assert (shown["messages"], shown["latest_leaf"], shown["context_blocks"]) == (
        0,
        None,
        ["memory"],
    )
    shown = memstream(env, "context", "show", "memory", "--session", "chat-1").stdout
    assert shown.rstrip("\n") == "User likes tea\nand coffee"
    # And --file - reads the content from standard input
    memstream(env, "context", "set", "memory", "--file", "-", "--session", "chat-2", stdin="pip\n")
    piped = memstream(env, "context", "show", "memory", "--session", "chat-2").stdout
    assert piped.rstrip("\n") == "pip"
    # And limits and unknown blocks are one-line user errors
    over = memstream(env, "context", "set", "memory", "word " * 50, "--max-tokens", "10", expect=1)
    assert over.stderr.strip() == 'error: Block "memory" exceeds maxTokens: 65 > 10'
    missing = memstream(env, "context", "show", "nope", expect=1)
    assert missing.stderr.startswith('error: no block "nope"')
    assert len(missing.stderr.strip().splitlines()) == 1
    memstream(env, "context", "set", "x" * 65, "text", expect=1)

    # Given no frozen prompt, Then prompt show says so; after a session freezes one, it shows it
    assert json_of(env, "prompt", "show", "chat-1") == {
        "session_id": "chat-1",
        "key": "_system_prompt_chat-1",
        "prompt": None,
    }
    script = (
        "import asyncio, memstream\n"
        "async def main():\n"
        "    async with memstream.connect() as ms:\n"
        "        s = ms.session('chat-1').with_context('memory').with_cached_prompt()\n"
        "        print(await s.freeze_system_prompt(), end='')\n"
        "asyncio.run(main())\n"
    )
    frozen = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
        check=True,
    ).stdout  # fmt: skip
    assert "MEMORY [writable]" in frozen
    assert frozen.endswith("User likes tea\nand coffee")
    assert json_of(env, "prompt", "show", "chat-1")["prompt"] == frozen
    assert memstream(env, "prompt", "show", "chat-1").stdout.rstrip("\n") == frozen


def test_tail_follow_prints_new_events_until_sigterm(
    tmp_path: Path, cli_env: dict[str, str], projector: subprocess.Popen[str]
) -> None:
    # Given one event, and `events tail --follow` running
    memstream(cli_env, "append", "s", "--id", "a", "--text", "first")
    out, err = tmp_path / "tail.jsonl", tmp_path / "tail.err"
    with out.open("w") as sink, err.open("w") as errors:
        tail = subprocess.Popen(
            [MEMSTREAM, "events", "tail", "--follow", "--json"],
            env=cli_env,
            stdout=sink,
            stderr=errors,
            text=True,
        )
    try:
        wait_for_text(out, '"seq": 1', tail)
        # When another event is appended
        memstream(cli_env, "append", "s", "--id", "b", "--text", "second")
        # Then it is printed as it arrives
        wait_for_text(out, '"seq": 2', tail)
    finally:
        code = stop(tail)
    # And SIGTERM ends the tail cleanly
    assert code == 0, err.read_text()
    assert [
        json.loads(line)["payload"]["message"]["id"] for line in out.read_text().splitlines()
    ] == [
        "a",
        "b",
    ]


def test_a_user_error_is_one_line_and_exit_1(cli_env: dict[str, str]) -> None:
    # When a message names a parent that does not exist
    result = memstream(cli_env, "append", "s1", "--text", "hi", "--parent", "ghost", expect=1)
    # Then one line says so, and nothing was written
    assert result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1
    assert "ghost" in result.stderr
    assert json_of(cli_env, "status")["stream"]["messages"] == 0


def test_up_demo_runs_from_a_fresh_data_dir(tmp_path: Path) -> None:
    # Given no data dir and no NATS URL: the embedded nats-server comes from the wheel
    data_dir = tmp_path / "fresh"
    env = clean_env(MEMSTREAM_DATA_DIR=str(data_dir))
    # When the demo runs
    started = time.monotonic()
    result = memstream(env, "up", "--demo")
    # Then it shows the branch's history, the search hit, the block the tool wrote, the frozen
    # prompt, an Agent Memory recall and the status, and exits in seconds (loading the
    # embedding model included)
    assert time.monotonic() - started < 60
    for text in (
        "demo-6",
        "Porto is smaller",
        "pastel de nata",
        "set_context → Written to memory. Usage: 4% (8/200 tokens)",
        "MEMORY (Learned facts) [4% — 8/200 tokens] [writable]",
        "dead letters: 0",
        "sessions",
        "agent memory: recall('What does the traveller eat?')",
        "answer: User is vegetarian",
    ):
        assert text in result.stdout, result.stdout
    # 6 messages, the block write, the prompt freeze, and the profile's creation, ingest and
    # extraction
    assert "11 messages" in result.stdout
    # And it released the data dir: no recorded server is left behind
    assert not (data_dir / "runtime.json").exists()
    # And running it again is a no-op on the log (fixed ids, same block text, prompt frozen)
    again = memstream(env, "up", "--demo")
    assert "11 messages" in again.stdout


def test_up_serves_other_commands_until_sigterm(tmp_path: Path) -> None:
    data_dir = tmp_path / "shared"
    env = clean_env(MEMSTREAM_DATA_DIR=str(data_dir))
    log = tmp_path / "up.log"
    with log.open("w") as sink:
        up = subprocess.Popen([MEMSTREAM, "up"], env=env, stdout=sink, stderr=sink, text=True)
    try:
        wait_for_text(log, "memstream is up", up)
        # When another process appends and reads on the same data dir
        memstream(env, "append", "s", "--id", "a", "--text", "hello")
        assert [m["id"] for m in json_of(env, "sessions", "history", "s")] == ["a"]
        # Then a second `up` on the same data dir is refused
        refused = memstream(env, "up", expect=1)
        assert "already up" in refused.stderr
    finally:
        code = stop(up)
    # And `up` stops cleanly on SIGTERM and releases the data dir
    assert code == 0, log.read_text()
    assert not (data_dir / "runtime.json").exists()


def test_verify_exits_1_and_shows_where_a_tampered_read_model_differs(
    cli_env: dict[str, str], projector: subprocess.Popen[str]
) -> None:
    env = cli_env
    memstream(env, "append", "audit", "--id", "a1", "--text", "the original words")
    memstream(env, "append", "audit", "--id", "a2", "--text", "more words")
    # When a stored message is changed in SQLite behind the projector's back
    database = Path(env["MEMSTREAM_DATA_DIR"]) / "memstream.db"
    with sqlite3.connect(database) as tamper:
        tamper.execute("UPDATE messages SET role = 'forged' WHERE id = 'a1'")
    # Then verify exits 1, names the projection, and shows the first differing rows
    shown = memstream(env, "projections", "verify", expect=1)
    assert shown.stderr.strip().splitlines()[-1] == "error: checksums differ for sessions"
    assert "sessions: first difference in messages" in shown.stdout
    assert '"forged"' in shown.stdout
    found = json.loads(memstream(env, "projections", "verify", "--json", expect=1).stdout)
    sessions, context, _registry, _memory = found
    assert (sessions["ok"], context["ok"], context["difference"]) == (False, True, None)
    assert sessions["difference"]["part"] == "messages"
    assert sessions["difference"]["live"][2:5] == ["a1", None, "forged"]
    assert sessions["difference"]["rebuilt"][2:5] == ["a1", None, "user"]
    # And a rebuild from the log repairs it
    memstream(env, "projections", "rebuild")
    assert all(v["ok"] for v in json_of(env, "projections", "verify"))


def test_a_command_records_the_actor_it_is_given(
    cli_env: dict[str, str], projector: subprocess.Popen[str]
) -> None:
    # Given a write by a named actor, one by the environment's, and one by default (user@host)
    memstream(cli_env, "--actor", "ops-oncall", "append", "s", "--id", "m1", "--text", "hi")
    named = {**cli_env, "MEMSTREAM_ACTOR": "nightly-import"}
    memstream(named, "append", "s", "--id", "m2", "--text", "ho")
    memstream(cli_env, "append", "s", "--id", "m3", "--text", "hu")
    # Then the audit trail says who did each
    actors = [json_of(cli_env, "events", "show", str(seq))["headers"]["actor"] for seq in (1, 2, 3)]
    assert actors[:2] == ["ops-oncall", "nightly-import"]
    assert "@" in actors[2]
    # And a bad actor is one line, before anything is written
    refused = memstream(cli_env, "--actor", "a\tb", "append", "s", "--text", "x", expect=1)
    assert refused.stderr.startswith("error: actor ")
    assert "printable" in refused.stderr
    assert memstream(cli_env, "events", "show", "4", expect=1).returncode == 1
