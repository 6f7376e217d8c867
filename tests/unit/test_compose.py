"""docker-compose.yml and the Dockerfile, read as files: every command is a real CLI command,
the NATS nodes form one cluster, every setting set is one memstream reads.

Nothing here starts a container (CI has no Docker daemon); the commands are parsed by the real
CLI with each command's function replaced by a recorder.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import typer.main
import yaml  # type: ignore[import-untyped]  # PyYAML (a dependency of transformers) has no stubs
from typer.core import TyperGroup
from typer.exceptions import TyperException

import memstream.settings
from memstream import InvalidInputError, Settings
from memstream.cli.app import app
from memstream.workers.apps import require_worker
from memstream.workers.runtime.nats_server import liveness_config
from memstream.workers.service import WORKERS

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
# The document that shows how to run the distributed shape (its `docker compose run` lines).
OPERATIONS = ROOT / "docs" / "operations.md"
NATS_NODES = ("nats1", "nats2", "nats3")
MEMSTREAM_SERVICES = {*WORKERS, "memstream"}
# ${NAME} or ${NAME:-default}: compose fills it from the shell; here the shell sets nothing.
INTERPOLATION = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-(?P<default>[^}]*))?\}")


@dataclass(frozen=True, slots=True)
class Call:
    """A command the CLI would have run: its path and its parsed parameters."""

    path: tuple[str, ...]
    params: dict[str, Any]


def parse_cli(args: Sequence[str]) -> Call:
    """Parse ``args`` as ``memstream ARGS`` and return the command it would run, without running it.

    Raises:
        TyperException: unknown command or option, missing argument, bad value (click's
            usage errors).
        InvalidInputError: ``worker`` with a name that is no worker.
    """
    root = typer.main.get_command(app)  # a fresh command tree: the recorders stay in it
    calls: list[Call] = []

    def recorder(path: tuple[str, ...]) -> Callable[..., None]:
        def record(**params: Any) -> None:
            calls.append(Call(path, params))

        return record

    def replace_callbacks(command: Any, path: tuple[str, ...]) -> None:
        if isinstance(command, TyperGroup):
            for name, sub in command.commands.items():
                replace_callbacks(sub, (*path, name))
        else:
            command.callback = recorder(path)

    replace_callbacks(root, ())
    root.main(list(args), prog_name="memstream", standalone_mode=False)
    (call,) = calls
    if call.path == ("worker",):  # the worker's name is checked when it runs, so check it here
        require_worker(call.params["name"])
    return call


def load_compose() -> dict[str, Any]:
    compose = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(compose, dict)
    return compose


def services() -> dict[str, dict[str, Any]]:
    found = load_compose()["services"]
    assert isinstance(found, dict)
    return found


def memstream_services() -> dict[str, dict[str, Any]]:
    """The services built from the Dockerfile (they run ``memstream``)."""
    return {name: service for name, service in services().items() if "build" in service}


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as the container sees it when the shell sets nothing."""
    env = service.get("environment", {})
    assert isinstance(env, dict), "environment is written as a mapping"
    return {
        str(name): INTERPOLATION.sub(lambda m: m.group("default") or "", str(value))
        for name, value in env.items()
    }


def option(command: Sequence[str], flag: str) -> str:
    """The value that follows ``flag`` in a command line."""
    assert command.count(flag) == 1, f"{flag} given once in {command}"
    return command[command.index(flag) + 1]


def setting_names() -> set[str]:
    """The environment variables memstream's settings read (names quoted in settings.py)."""
    source = Path(memstream.settings.__file__).read_text(encoding="utf-8")
    return set(re.findall(r"[\"'](MEMSTREAM_[A-Z0-9_]+)[\"']", source))


def dockerfile_instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions (continuations joined, comments dropped), in order."""
    lines = [
        line
        for line in DOCKERFILE.read_text(encoding="utf-8").splitlines()
        if not line.lstrip().startswith("#")
    ]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    instructions = []
    for line in text.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            instructions.append((keyword.upper(), " ".join(rest.split())))
    return instructions


# --- the commands -------------------------------------------------------------------------


def test_the_cli_parser_refuses_what_the_cli_refuses() -> None:
    # Given the parser the checks below rely on / When it reads good commands / Then it finds them
    call = parse_cli(["worker", "projector", "--projections", "sessions"])
    assert call.path == ("worker",)
    assert (call.params["name"], call.params["projections"]) == ("projector", "sessions")
    assert parse_cli(["--namespace", "x", "sessions", "list"]).path == ("sessions", "list")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["sesions", "list"], "No such command 'sesions'"),
        (["sessions", "lst"], "No such command 'lst'"),
        (["worker", "projektor"], "unknown worker 'projektor'"),
        (["worker"], "Missing parameter: name"),
        (["worker", "projector", "--lingr", "1"], "No such option: --lingr"),
        (["status", "--dead-letters", "many"], "valid integer"),
        (["sessions", "list", "extra"], "unexpected extra argument"),
        (["--namespace", "status"], "Missing command"),
    ],
)
def test_a_wrong_command_fails_to_parse(args: list[str], error: str) -> None:
    # Given a command with a wrong name, option, argument or value
    # When it is parsed / Then it fails as the CLI would, naming what is wrong
    with pytest.raises((TyperException, InvalidInputError), match=re.escape(error)):
        parse_cli(args)


def test_every_memstream_service_runs_a_real_command() -> None:
    # Given the services built from the Dockerfile
    built = memstream_services()
    assert set(built) == MEMSTREAM_SERVICES
    for name, service in built.items():
        # When its command is parsed by the CLI / Then it is a command the CLI runs
        command = service["command"]
        assert isinstance(command, list), f"{name}: command is a list (exec form)"
        call = parse_cli([str(word) for word in command])
        if name in WORKERS:  # each worker is its own service, named after it
            assert call.path == ("worker",)
            assert call.params["name"] == name


def test_the_cli_service_runs_only_on_demand() -> None:
    # Given the memstream CLI service / Then `up` leaves it out: it is run with `compose run`
    assert services()["memstream"]["profiles"] == ["cli"]


@pytest.mark.parametrize("document", [OPERATIONS, COMPOSE], ids=lambda path: path.name)
def test_the_documented_cli_runs_are_real_commands(document: Path) -> None:
    # Given the `docker compose run --rm memstream ARGS` lines a document shows
    text = document.read_text(encoding="utf-8")
    runs = re.findall(r"docker compose run --rm memstream ([^`\n]+)", text)
    assert runs, f"{document.name} shows how to run the CLI service"
    for args in runs:
        # When ARGS are parsed by the CLI / Then each is a command it runs
        parse_cli(shlex.split(args, comments=True))


# --- NATS, PostgreSQL and the settings ------------------------------------------------------


def test_the_nats_nodes_form_one_jetstream_cluster() -> None:
    # Given the three NATS services
    all_services = services()
    routes = {f"nats://{node}:6222" for node in NATS_NODES}
    names = set()
    for node in NATS_NODES:
        service = all_services[node]
        command = [str(word) for word in service["command"]]
        # Then each runs JetStream in the one cluster, routes to all three, under its own name
        assert service["image"].startswith("nats:")
        assert command[0] == "nats-server"
        assert "-js" in command
        assert option(command, "-cluster_name") == "memstream"
        assert urlsplit(option(command, "-cluster")).port == 6222
        assert set(option(command, "-routes").split(",")) == routes
        # (clients keep to the servers they were given: container addresses mean nothing to a
        # client on the host)
        assert "--no_advertise" in command
        names.add(option(command, "-server_name"))
        # and keeps its store in a volume of its own
        store = option(command, "-sd")
        assert any(str(volume).endswith(f":{store}") for volume in service["volumes"])
        assert "healthcheck" in service
    assert names == set(NATS_NODES)
    stores = {str(volume) for node in NATS_NODES for volume in all_services[node]["volumes"]}
    assert len(stores) == len(NATS_NODES)


def test_every_nats_node_syncs_each_write_to_disk_before_acknowledging_it() -> None:
    # Given the compose file's configs
    configs = load_compose()["configs"]
    for node in NATS_NODES:
        service = services()[node]
        command = [str(word) for word in service["command"]]
        # When a node starts, it reads one config file, mounted from a config of the file
        target = option(command, "-c")
        mounted = {c["target"]: c["source"] for c in service["configs"]}
        content = configs[mounted[target]]["content"]
        # Then that config makes JetStream fsync before every acknowledgement
        assert re.search(r"jetstream\s*\{[^}]*sync_interval:\s*always", content), content
        # and closes a connection to a cut-off or paused peer as the test clusters do
        assert liveness_config() in content, content


def test_the_memstream_services_use_the_cluster_and_postgres() -> None:
    all_services = services()
    postgres = all_services["postgres"]
    assert postgres["image"].startswith("pgvector/pgvector:")
    pg_env = environment(postgres)
    for name, service in memstream_services().items():
        env = environment(service)
        # Then the stream is kept on three servers
        assert env["MEMSTREAM_STREAM_REPLICAS"] == "3", name
        # and NATS is every node of the cluster
        servers = env["MEMSTREAM_NATS_URL"].split(",")
        assert {urlsplit(url).hostname for url in servers} == set(NATS_NODES), name
        assert {urlsplit(url).port for url in servers} == {4222}, name
        # and the read models are in the postgres service's database
        database = urlsplit(env["MEMSTREAM_DATABASE_URL"])
        assert database.scheme == "postgresql"
        assert (database.hostname, database.port) == ("postgres", 5432)
        assert database.username == pg_env["POSTGRES_USER"]
        assert database.password == pg_env["POSTGRES_PASSWORD"]
        assert database.path == "/" + pg_env["POSTGRES_DB"]
        # and it starts once they are healthy
        depends = service["depends_on"]
        for dependency in (*NATS_NODES, "postgres"):
            assert depends[dependency] == {"condition": "service_healthy"}, (name, dependency)
            assert "healthcheck" in all_services[dependency]


def test_every_setting_the_services_set_is_a_real_setting() -> None:
    # Given the environment variables memstream reads
    known = setting_names()
    assert {"MEMSTREAM_NATS_URL", "MEMSTREAM_DATABASE_URL"} <= known  # the parse finds them
    for name, service in memstream_services().items():
        env = environment(service)
        # Then the services set no other MEMSTREAM_* variable
        assert {var for var in env if var.startswith("MEMSTREAM_")} <= known, name
        # and the settings accept them as given
        settings = Settings.from_env(env)
        assert settings.nats_url == env["MEMSTREAM_NATS_URL"]
        assert settings.database_url == env["MEMSTREAM_DATABASE_URL"]


# --- the Dockerfile -------------------------------------------------------------------------


def test_the_image_runs_memstream_as_a_user_offline() -> None:
    # Given the Dockerfile's instructions
    instructions = dockerfile_instructions()
    keywords = [keyword for keyword, _ in instructions]
    # Then its entry point is the memstream CLI
    entrypoints = [value for keyword, value in instructions if keyword == "ENTRYPOINT"]
    assert json.loads(entrypoints[-1]) == ["memstream"]
    # and it runs as a user that is not root
    users = [value for keyword, value in instructions if keyword == "USER"]
    assert users, "the image names a user"
    assert users[-1].split(":")[0] not in {"root", "0"}
    assert keywords.index("USER") < keywords.index("ENTRYPOINT")
    # and never downloads a model, and sets only real settings
    env = " ".join(value for keyword, value in instructions if keyword == "ENV")
    assert "HF_HUB_OFFLINE=1" in env.split()
    assert set(re.findall(r"\b(MEMSTREAM_[A-Z0-9_]+)=", env)) <= setting_names()
    # and installs the CPU build of torch before the package
    runs = [value for keyword, value in instructions if keyword == "RUN"]
    torch = next(i for i, run in enumerate(runs) if "download.pytorch.org/whl/cpu" in run)
    package = next(i for i, run in enumerate(runs) if re.search(r"pip install \.(\s|$)", run))
    assert torch < package
