"""The CLI without services: every command's help, and user errors as one line with exit 1."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import typer.main
from typer.core import TyperGroup
from typer.testing import CliRunner, Result

from memstream import InvalidInputError
from memstream.cli.app import app
from memstream.cli.events import parse_time
from memstream.cli.output import verify_json
from memstream.projections.ports import Difference
from memstream.settings import Settings
from memstream.workers.admin.audit import AuditEvent, EventQuery
from memstream.workers.admin.rebuild import VerifyResult

# No MEMSTREAM_* setting of the environment running the tests leaks into a command.
CLEAN_ENV: dict[str, str | None] = dict.fromkeys(
    (
        "MEMSTREAM_DATA_DIR",
        "MEMSTREAM_NATS_URL",
        "MEMSTREAM_STREAM",
        "MEMSTREAM_STREAM_REPLICAS",
        "MEMSTREAM_NAMESPACE",
        "MEMSTREAM_DATABASE_URL",
    )
)


@pytest.fixture(autouse=True)
def _in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default data dir (./.memstream) of any command lands in the test's temp dir."""
    monkeypatch.chdir(tmp_path)


def invoke(
    *args: str, env: dict[str, str | None] | None = None, stdin: str | None = None
) -> Result:
    return CliRunner().invoke(app, list(args), env={**CLEAN_ENV, **(env or {})}, input=stdin)


def command_paths() -> list[tuple[str, ...]]:
    """Every group and command of the tree, as the words that name it."""
    paths: list[tuple[str, ...]] = []

    def walk(command: object, path: tuple[str, ...]) -> None:
        paths.append(path)
        if isinstance(command, TyperGroup):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return paths


def test_the_command_tree_is_complete() -> None:
    # Given the CLI / When its tree is listed / Then it has every command of the design
    assert set(command_paths()) >= {
        (),
        ("up",),
        ("worker",),
        ("status",),
        ("append",),
        ("sessions",),
        ("sessions", "list"),
        ("sessions", "show"),
        ("sessions", "history"),
        ("sessions", "search"),
        ("sessions", "append"),
        ("sessions", "create"),
        ("sessions", "rename"),
        ("sessions", "fork"),
        ("sessions", "compact"),
        ("sessions", "split"),
        ("sessions", "delete"),
        ("sessions", "registered"),
        ("usage",),
        ("usage", "add"),
        ("usage", "show"),
        ("events",),
        ("events", "tail"),
        ("events", "show"),
        ("events", "export"),
        ("projections",),
        ("projections", "list"),
        ("projections", "rebuild"),
        ("projections", "verify"),
        ("context",),
        ("context", "list"),
        ("context", "show"),
        ("context", "set"),
        ("prompt",),
        ("prompt", "show"),
    }


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p) or "memstream")
def test_every_command_has_help(path: tuple[str, ...]) -> None:
    # When --help is asked for
    result = invoke(*path, "--help")
    # Then it exits 0 with the usage line
    assert result.exit_code == 0, result.output
    assert f"Usage: memstream {' '.join(path)}".rstrip() in result.output


@pytest.mark.parametrize(
    "path",
    [
        p
        for p in command_paths()
        if p
        and p
        not in {("sessions",), ("events",), ("projections",), ("context",), ("prompt",), ("usage",)}
    ],
)
def test_every_command_help_shows_an_example(path: tuple[str, ...]) -> None:
    # The docstring is the --help text, and it ends with one example
    text = " ".join(invoke(*path, "--help").output.split())
    assert "Example:" in text
    assert "memstream " in text.split("Example:", 1)[1]


def test_read_commands_offer_json() -> None:
    reads = [
        ("status",),
        ("sessions", "list"),
        ("sessions", "show"),
        ("sessions", "history"),
        ("sessions", "search"),
        ("sessions", "create"),
        ("sessions", "rename"),
        ("sessions", "fork"),
        ("sessions", "compact"),
        ("sessions", "split"),
        ("sessions", "registered"),
        ("usage", "add"),
        ("usage", "show"),
        ("events", "tail"),
        ("events", "show"),
        ("projections", "list"),
        ("projections", "verify"),
        ("context", "list"),
        ("context", "show"),
        ("context", "set"),
        ("prompt", "show"),
    ]
    for path in reads:
        assert "--json" in invoke(*path, "--help").output, path


def test_no_arguments_shows_the_groups() -> None:
    result = invoke()
    for group in ("up", "worker", "status", "sessions", "events", "projections", "context"):
        assert group in result.output


def assert_user_error(result: Result, message: str) -> None:
    """Exit 1, one ``error:`` line on stderr, nothing on stdout, no traceback."""
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert isinstance(result.exception, SystemExit)


def test_a_bad_namespace_is_one_line_and_exit_1() -> None:
    result = invoke("--namespace", "Not OK!", "status")
    assert_user_error(result, "namespace 'Not OK!' may contain only [a-z0-9_-]")


def test_a_bad_namespace_from_the_environment_is_a_user_error() -> None:
    result = invoke("sessions", "history", "s1", env={"MEMSTREAM_NAMESPACE": "UPPER"})
    assert_user_error(result, "namespace 'UPPER'")


def test_help_works_even_when_the_environment_is_invalid() -> None:
    result = invoke("sessions", "history", "--help", env={"MEMSTREAM_NAMESPACE": "UPPER"})
    assert result.exit_code == 0


def test_stream_replicas_come_from_the_environment_or_an_override() -> None:
    assert Settings.from_env({}).stream_replicas == 1
    assert Settings.from_env({"MEMSTREAM_STREAM_REPLICAS": "3"}).stream_replicas == 3
    assert Settings.from_env({"MEMSTREAM_STREAM_REPLICAS": ""}).stream_replicas == 1
    env = {"MEMSTREAM_STREAM_REPLICAS": "3"}
    assert Settings.from_env(env, stream_replicas=5).stream_replicas == 5


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "stream_replicas (MEMSTREAM_STREAM_REPLICAS) is 0; it must be between 1 and 5"),
        ("6", "stream_replicas (MEMSTREAM_STREAM_REPLICAS) is 6; it must be between 1 and 5"),
        (
            "three",
            "stream_replicas (MEMSTREAM_STREAM_REPLICAS) is 'three'; it must be an integer "
            "between 1 and 5",
        ),
    ],
)
def test_stream_replicas_out_of_range_are_refused_by_name(value: str, message: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        Settings.from_env({"MEMSTREAM_STREAM_REPLICAS": value})
    assert str(refused.value) == message


def test_bad_stream_replicas_are_one_line_and_exit_1() -> None:
    result = invoke("--stream-replicas", "7", "status")
    assert_user_error(result, "stream_replicas (MEMSTREAM_STREAM_REPLICAS) is 7")
    result = invoke("status", env={"MEMSTREAM_STREAM_REPLICAS": "2.5"})
    assert_user_error(result, "stream_replicas (MEMSTREAM_STREAM_REPLICAS) is '2.5'")


def test_append_refuses_parent_and_root_together() -> None:
    result = invoke("append", "s1", "--text", "hi", "--parent", "m1", "--root")
    assert_user_error(result, "give --parent or --root, not both")


def test_sessions_append_is_the_same_command() -> None:
    result = invoke("sessions", "append", "s1", "--text", "hi", "--parent", "m1", "--root")
    assert_user_error(result, "give --parent or --root, not both")


def test_search_limit_is_checked_before_connecting() -> None:
    result = invoke("sessions", "search", "tea", "--limit", "0")
    assert_user_error(result, "limit is 0; it must be between 1 and 500")


def test_delete_without_yes_and_without_a_terminal_is_refused_before_connecting() -> None:
    # Given no terminal on stdin (the runner's input is a pipe) and nothing listening for NATS
    result = invoke("--nats-url", "nats://127.0.0.1:1", "sessions", "delete", "chat-1")
    # Then the delete is refused at once instead of waiting for an answer
    assert_user_error(
        result, "not deleting session 'chat-1': no terminal to confirm on; pass --yes"
    )


def test_registered_and_compact_check_their_options_before_connecting() -> None:
    assert_user_error(
        invoke("sessions", "registered", "--limit", "501"),
        "limit is 501; it must be between 1 and 500",
    )
    assert_user_error(
        invoke("sessions", "compact", "chat-1", "--tail-tokens", "-1"),
        "--tail-tokens is -1; it must be between 0",
    )
    assert_user_error(
        invoke("usage", "show", "s" * 257), "session_id is 257 characters; the limit is 256"
    )


def test_export_rejects_a_time_that_is_not_iso_8601() -> None:
    result = invoke("events", "export", "--since", "yesterday")
    assert_user_error(result, "--since 'yesterday' is not an ISO 8601 time")


def test_export_rejects_reversed_sequences() -> None:
    result = invoke("events", "export", "--from-seq", "5", "--to-seq", "2")
    assert_user_error(result, "from_seq 5 is after to_seq 2")


def test_events_show_and_sessions_show_check_arguments_before_connecting() -> None:
    assert_user_error(invoke("events", "show", "0"), "sequence is 0; stream sequences start at 1")
    result = invoke("sessions", "show", "x" * 257)
    assert_user_error(result, "session_id is 257 characters; the limit is 256")


def test_tail_rejects_sequence_zero() -> None:
    result = invoke("events", "tail", "--since-seq", "0")
    assert_user_error(result, "is 0; stream sequences start at 1")


def test_context_set_needs_exactly_one_source_of_content(tmp_path: Path) -> None:
    # Neither content nor --file, or both: refused before connecting
    assert_user_error(invoke("context", "set", "memory"), "give the content or --file")
    both = invoke("context", "set", "memory", "text", "--file", str(tmp_path / "f.txt"))
    assert_user_error(both, "give the content or --file, not both or neither")
    # An unreadable file names the file
    missing = invoke("context", "set", "memory", "--file", str(tmp_path / "missing.txt"))
    assert_user_error(missing, f"cannot read --file {tmp_path / 'missing.txt'}")


def test_a_file_argument_of_dash_reads_standard_input() -> None:
    # Checked before connecting, as a file's lines are: the error names the line of stdin
    result = invoke("memory", "ingest", "alice", "-", stdin='{"role": "user"}\nnot json\n')
    assert_user_error(result, "<stdin>:2 is not JSON")
    result = invoke("memory", "ingest", "alice", "-", stdin="[1]\n")
    assert_user_error(result, "<stdin>:1 is not a JSON object")


def test_stats_plot_to_stdout_cannot_go_with_json() -> None:
    result = invoke("stats", "--plot", "-", "--json")
    assert_user_error(result, "--plot - writes the PNG to stdout: it cannot go with --json")


def test_context_and_prompt_check_labels_and_session_ids_before_connecting() -> None:
    assert_user_error(
        invoke("context", "show", "x" * 65), "label is 65 characters; the limit is 64"
    )
    assert_user_error(
        invoke("prompt", "show", "s" * 257), "session_id is 257 characters; the limit is 256"
    )


def test_unknown_worker_is_a_user_error() -> None:
    result = invoke("worker", "nope")
    assert_user_error(result, "unknown worker 'nope'; known: projector")


def test_a_worker_linger_out_of_range_is_a_user_error() -> None:
    assert_user_error(
        invoke("worker", "projector", "--linger", "-1"),
        "--linger is -1; it must be 0 to 10 seconds",
    )
    assert_user_error(
        invoke("worker", "projector", "--linger", "11"),
        "--linger is 11; it must be 0 to 10 seconds",
    )


def test_a_search_over_4_kib_matches_nothing_without_connecting() -> None:
    # Given a NATS URL where nothing listens: a command that connected would fail
    result = invoke("--nats-url", "nats://127.0.0.1:1", "sessions", "search", "x" * 5000, "--json")
    # Then the query over 4 KiB is an empty result, at once (spec Part A.5)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []


def test_unreachable_nats_is_one_line_and_exit_1() -> None:
    # Given a NATS URL where nothing listens (port 1)
    result = invoke("--nats-url", "nats://127.0.0.1:1", "status")
    # Then the command gives up within its connect bound, with one line
    assert_user_error(result, "cannot reach NATS at nats://127.0.0.1:1")


def test_a_usage_error_is_clicks_exit_2_without_traceback() -> None:
    result = invoke("sessions", "history")
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_parse_time_reads_iso_8601_and_defaults_to_utc() -> None:
    assert parse_time("--since", "2025-03-01") == datetime(2025, 3, 1, tzinfo=UTC)
    assert parse_time("--since", "2025-03-01T10:00:00Z") == datetime(2025, 3, 1, 10, tzinfo=UTC)
    plus_two = timezone(timedelta(hours=2))
    assert parse_time("--until", "2025-03-01T10:00+02:00") == datetime(
        2025, 3, 1, 10, tzinfo=plus_two
    )
    assert parse_time("--since", None) is None
    with pytest.raises(InvalidInputError):
        parse_time("--since", "March")


def event_of(topic: str, time: datetime | None = None) -> AuditEvent:
    return AuditEvent(1, "ms.default.session.s", time or datetime.now(UTC), topic, {}, {})


def test_type_filter_matches_topic_or_class_name() -> None:
    topic = "memstream.domain.session:Session.MessageAppended"
    for wanted in (topic, "Session.MessageAppended", "MessageAppended"):
        assert EventQuery(event_type=wanted).matches(event_of(topic))
    assert not EventQuery(event_type="Appended").matches(event_of(topic))
    assert not EventQuery(event_type="MessagesDeleted").matches(event_of(topic))
    assert EventQuery().matches(event_of(topic))


def test_type_filter_knows_the_aggregate_by_its_old_and_new_name() -> None:
    # Events written before the contract and the rename carry the topic of ``Session``; events
    # of the contract carry its type; either is found by either name of the class
    old = "memstream.domain.session:Session.MessageAppended"
    new = "memstream.domain.session:SessionAggregate.MessageAppended"
    qualified = ("Session.MessageAppended", "SessionAggregate.MessageAppended")
    for wanted in ("session.message_appended", *qualified, old, new):
        for written in (old, new, "session.message_appended"):
            assert EventQuery(event_type=wanted).matches(event_of(written)), (wanted, written)
    assert not EventQuery(event_type="Session.MessagesDeleted").matches(event_of(old))


def test_since_filter_drops_older_events() -> None:
    now = datetime.now(UTC)
    query = EventQuery(since=now)
    assert query.matches(event_of("t", now))
    assert not query.matches(event_of("t", now - timedelta(seconds=1)))


def test_verify_json_shows_where_it_differs_with_long_values_shortened() -> None:
    long = "x" * 1000
    results = [
        VerifyResult("sessions", 7, "a" * 64, "b" * 64, Difference("messages", ("s", long), None)),
        VerifyResult("context", 7, "c" * 64, "c" * 64),
    ]
    assert verify_json(results, {"sessions": True, "context": True}) == [
        {
            "projection": "sessions",
            "seq": 7,
            "live": "a" * 64,
            "rebuilt": "b" * 64,
            "comparable": True,
            "ok": False,
            "difference": {
                "part": "messages",
                "live": ["s", "x" * 200 + "… (1000 characters)"],
                "rebuilt": None,
            },
        },
        {
            "projection": "context",
            "seq": 7,
            "live": "c" * 64,
            "rebuilt": "c" * 64,
            "comparable": True,
            "ok": True,
            "difference": None,
        },
    ]
    # A live model that is elsewhere (at another sequence) is not compared at all
    assert verify_json(results[:1], {"sessions": False})[0]["difference"] is None


def test_counts_and_ids_are_checked_before_connecting() -> None:
    assert_user_error(invoke("events", "tail", "-n", "0"), "--last is 0; it must be between 1")
    assert_user_error(invoke("events", "tail", "-n", "-1"), "--last is -1")
    result = invoke("status", "--dead-letters", "-1")
    assert_user_error(result, "--dead-letters is -1; it must be between 0")
    assert_user_error(invoke("append", "s", "--text", "x", "--id", ""), "minimum is 1")


def test_database_url_option_selects_postgresql_and_is_checked_before_use() -> None:
    result = invoke("--database-url", "mysql://bob:pw-secret@db/x", "sessions", "list")
    assert_user_error(result, "database_url 'mysql://bob:***@db/x' is not a postgresql:// URL")
    assert "pw-secret" not in result.output
    # The option wins over the environment
    result = invoke(
        "--database-url",
        "mysql://db/x",
        "status",
        env={"MEMSTREAM_DATABASE_URL": "postgresql://db/ms"},
    )
    assert_user_error(result, "database_url 'mysql://db/x' is not a postgresql:// URL")


def test_the_cli_imports_faststream_only_for_a_worker() -> None:
    # Every CLI call pays for its imports: FastStream (a large share of a start:
    # bench/RESULTS.md, 'Figures moved from code comments') is only needed by `memstream
    # worker`, which imports it when it runs.
    code = (
        "import sys, memstream.cli.app\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('faststream', 'uvicorn')))\n"
        "import memstream.workers.apps\n"
        "print('faststream' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    before, after = done.stdout.split()
    assert before == "[]"
    assert after == "True"  # the worker's import is what brings it in
