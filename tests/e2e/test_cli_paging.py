"""CLI polish (issue 15, item 7): paging of sessions list/history and JSON from rebuild."""

from __future__ import annotations

from pathlib import Path

from support.processes import clean_env, json_of, memstream


def test_history_and_list_pages_and_rebuild_json(tmp_path: Path) -> None:
    env = clean_env(MEMSTREAM_DATA_DIR=str(tmp_path / "data"))
    memstream(env, "append", "a", "--id", "m1", "--text", "one")
    for n in range(2, 6):
        memstream(env, "append", "a", "--id", f"m{n}", "--text", f"text {n}")
    memstream(env, "append", "b", "--text", "other session")

    def ids(*args: str) -> list[str]:
        return [m["id"] for m in json_of(env, "sessions", "history", "a", *args)]

    assert ids() == ["m1", "m2", "m3", "m4", "m5"]
    assert ids("--limit", "2") == ["m4", "m5"]
    assert ids("--limit", "2", "--offset", "2") == ["m2", "m3"]
    assert ids("--limit", "2", "--offset", "4") == ["m1"]
    assert ids("--offset", "9") == []
    every = [s["session_id"] for s in json_of(env, "sessions", "list")]
    assert sorted(every) == ["a", "b"]
    assert [s["session_id"] for s in json_of(env, "sessions", "list", "--limit", "1")] == every[:1]
    assert [s["session_id"] for s in json_of(env, "sessions", "list", "--offset", "1")] == every[1:]
    bad = memstream(env, "sessions", "history", "a", "--limit", "-1", expect=2)
    assert "--limit" in bad.stderr
    rebuilt = json_of(env, "projections", "rebuild", "sessions")
    assert rebuilt["projections"] == ["sessions"]
    assert rebuilt["sequence"] >= 6
    assert rebuilt["into"] == str((tmp_path / "data" / "memstream.db").resolve())


def test_deleting_commands_print_json_on_request(tmp_path: Path) -> None:
    env = clean_env(MEMSTREAM_DATA_DIR=str(tmp_path / "data"))
    memstream(env, "append", "gone", "--text", "bye")
    memstream(env, "memory", "remember", "alice", "Likes trams")
    assert json_of(env, "sessions", "delete", "gone", "--yes") == {
        "session_id": "gone",
        "deleted": True,
    }
    assert json_of(env, "memory", "forget-session", "alice", "s9") == {
        "profile": "alice",
        "session_id": "s9",
        "forgotten": True,
    }
    assert json_of(env, "memory", "delete-profile", "alice") == {
        "profile": "alice",
        "namespace": "default",
        "deleted": True,
    }
    assert json_of(env, "memory", "profiles") == []
