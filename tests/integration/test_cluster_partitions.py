"""A 3-node JetStream cluster whose servers and clients each live in a network namespace of their
own: the stream's leader is cut off from the others, or paused, while a writer keeps writing.

Every process runs in a namespace (``support.netns``): the three nats-servers, a writer, a
projector, a control client that asks the cluster what it thinks, and a client on the minority
side (in the leader's namespace, connected to the leader alone). The test process itself never
talks to NATS: it drives the clients (``support/partition_client.py``) over their stdin/stdout
and reads the writer's record of every attempt.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeVar

import pytest
from support.netns import Network, unavailable_reason
from support.processes import freeze

from memstream.settings import Settings
from memstream.workers.runtime.nats_server import MAX_PAYLOAD, liveness_config, nats_server_binary

CLIENT_SCRIPT = Path(__file__).resolve().parents[1] / "support" / "partition_client.py"
NODES = ("n1", "n2", "n3")
CLIENTS = ("wr", "pr", "ctl")  # the writer, the projector, the control client
CLIENT_PORT = 4222
ROUTE_PORT = 6222
SESSIONS = ("s0", "s1", "s2")
MINORITY = "minority"  # the session the client on the minority side writes to
WRITE_TIMEOUT = Settings().write_timeout
MARGIN = 1.0  # what a failing write may take beyond the write timeout
BEFORE = 30  # writes acknowledged before the leader is cut off
DURING = 30  # writes the majority side acknowledges while the leader is away
AFTER = 30  # writes acknowledged once it is back
READY_TIMEOUT = 15.0  # a nats-server says "Server is ready" within this
START_TIMEOUT = 60.0  # a client connects once the cluster has placed the stream
CALL_TIMEOUT = 45.0  # a client answers one request within this
SETTLE_TIMEOUT = 45.0  # a new leader is elected, or a healed server catches up, within this
READ_TIMEOUT = 30.0  # the projector's read model catches up within this

T = TypeVar("T")


@pytest.fixture
def network() -> Iterator[Network]:
    """A bridge and namespaces for the servers and the clients, deleted afterwards."""
    reason = unavailable_reason()
    if reason is not None:
        if os.environ.get("MEMSTREAM_REQUIRE_NETNS") == "1":
            pytest.fail(f"MEMSTREAM_REQUIRE_NETNS=1 but {reason}")
        pytest.skip(reason)
    net = Network()
    try:
        net.start()
        for host in (*NODES, *CLIENTS):
            net.add_host(host)
        yield net
    finally:
        net.close()


@pytest.fixture
def processes(network: Network) -> Iterator[list[subprocess.Popen[str]]]:
    """Every process the test starts in the namespaces: killed before they are deleted."""
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for process in reversed(started):
            if process.poll() is None:
                process.kill()  # (a stopped process dies of SIGKILL too)
            process.wait(timeout=10)
            if process.stdin is not None:
                process.stdin.close()  # (its stdout: closed by the thread that reads it)


@dataclass
class Node:
    """One nats-server, in the namespace of the same name."""

    name: str
    address: str
    process: subprocess.Popen[str]
    log_path: Path

    @property
    def url(self) -> str:
        return f"nats://{self.address}:{CLIENT_PORT}"


def _start_node(
    network: Network, processes: list[subprocess.Popen[str]], folder: Path, name: str
) -> Node:
    """``nats-server`` with JetStream in ``name``'s namespace, routed to the other nodes."""
    folder.mkdir(parents=True)
    address = network.addresses[name]
    routes = ", ".join(
        f'"nats://{network.addresses[other]}:{ROUTE_PORT}"' for other in NODES if other != name
    )
    config = folder / "nats.conf"
    config.write_text(
        f'server_name: "{name}"\n'
        f'listen: "{address}:{CLIENT_PORT}"\n'
        f"max_payload: {MAX_PAYLOAD}\n"
        + liveness_config()
        + f'jetstream {{ store_dir: "{folder / "store"}", sync_interval: always }}\n'
        "cluster {\n"
        '  name: "memstream-partitions"\n'
        f'  listen: "{address}:{ROUTE_PORT}"\n'
        f"  routes: [{routes}]\n"
        "}\n"
    )
    log_path = folder / "nats.log"
    command = network.command(name, nats_server_binary(), "-c", str(config), "-l", str(log_path))
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True
    )
    processes.append(process)
    return Node(name, address, process, log_path)


@pytest.fixture
def cluster(
    network: Network, processes: list[subprocess.Popen[str]], tmp_path: Path
) -> dict[str, Node]:
    """Three clustered servers, one per namespace, each ready for clients."""
    nodes = {name: _start_node(network, processes, tmp_path / name, name) for name in NODES}
    for node in nodes.values():
        _until(partial(_ready, node), READY_TIMEOUT, f"{node.name} ready", alive=node.process)
    return nodes


def _ready(node: Node) -> bool:
    return "Server is ready" in _text(node.log_path)


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _until(
    condition: Callable[[], T | None],
    timeout: float,
    what: str,
    *,
    alive: subprocess.Popen[str] | None = None,
) -> T:
    """Poll ``condition`` until it returns something truthy (bounded), and return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if alive is not None and alive.poll() is not None:
            raise AssertionError(f"{what}: the process exited with {alive.returncode}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s (last: {value!r})")
        time.sleep(0.05)


class Client:
    """A ``partition_client.py serve`` process: one JSON request, one JSON answer per line."""

    def __init__(self, process: subprocess.Popen[str], stderr: Path) -> None:
        self.process = process
        self.stderr = stderr
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                self._lines.put(line)
        self._lines.put("")  # the end of its output

    def answer(self, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no answer within {timeout} s; stderr:\n{_text(self.stderr)[-3000:]}"
            ) from None
        if not line:
            raise AssertionError(f"the client exited; stderr:\n{_text(self.stderr)[-3000:]}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def call(self, op: str, timeout: float = CALL_TIMEOUT, **args: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.process.stdin.flush()
        return self.answer(timeout)

    def until(
        self, op: str, accept: Callable[[dict[str, Any]], bool], what: str, **args: Any
    ) -> dict[str, Any]:
        """Ask again (bounded) until the answer is accepted."""
        answers: list[dict[str, Any]] = []

        def accepted() -> dict[str, Any] | None:
            answers.append(self.call(op, **args))
            return answers[-1] if accept(answers[-1]) else None

        try:
            return _until(accepted, SETTLE_TIMEOUT, what)
        except AssertionError as error:
            raise AssertionError(f"{error}; answers: {answers[-3:]}") from None


@dataclass
class Writer:
    """A ``partition_client.py write`` process and its record of every attempt."""

    process: subprocess.Popen[str]
    records: Path
    stderr: Path

    def entries(self) -> list[dict[str, Any]]:
        text = _text(self.records)
        return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]

    def writes(self) -> list[dict[str, Any]]:
        return [e for e in self.entries() if "id" in e and not e.get("retry")]

    def acknowledged_after(self, moment: float) -> int:
        return sum(1 for e in self.writes() if e["ok"] and e["started"] > moment)

    def wait_acknowledged_after(self, moment: float, count: int, what: str) -> None:
        try:
            _until(lambda: self.acknowledged_after(moment) >= count, SETTLE_TIMEOUT, what)
        except AssertionError as error:
            raise AssertionError(f"{error}\nwriter stderr:\n{_text(self.stderr)[-3000:]}") from None


def _settings(network: Network, folder: Path, stream: str, **fields: Any) -> str:
    """A client's settings (JSON, for its command line): the stream at 3 replicas, the data
    dir ``folder``, all three servers unless ``fields`` say otherwise."""
    urls = ",".join(f"nats://{network.addresses[n]}:{CLIENT_PORT}" for n in NODES)
    values = {"nats_url": urls, "stream": stream, "stream_replicas": 3, **fields}
    return json.dumps({**values, "data_dir": str(folder)})


def _spawn(
    network: Network,
    processes: list[subprocess.Popen[str]],
    host: str,
    stderr: Path,
    *args: str,
    answers: bool,
) -> subprocess.Popen[str]:
    """``partition_client.py ARGS`` in ``host``'s namespace (``answers``: with pipes to talk
    to it)."""
    pipe = subprocess.PIPE if answers else subprocess.DEVNULL
    with stderr.open("w") as err:
        process = subprocess.Popen(
            network.command(host, sys.executable, str(CLIENT_SCRIPT), *args),
            stdin=pipe,
            stdout=pipe,
            stderr=err,
            text=True,
        )
    processes.append(process)
    return process


def _serve(
    network: Network,
    processes: list[subprocess.Popen[str]],
    host: str,
    settings: str,
    stderr: Path,
) -> Client:
    process = _spawn(network, processes, host, stderr, "serve", settings, answers=True)
    return Client(process, stderr)


def _node_of(cluster: dict[str, Node], connected: str) -> str:
    """The node a client's ``host:port`` belongs to."""
    return next(node.name for node in cluster.values() if connected.startswith(node.address + ":"))


@dataclass
class Stage:
    """The cluster with its clients in place and the stream led by a server none of the writer,
    the projector and the control client is connected to: the ``victim``."""

    network: Network
    cluster: dict[str, Node]
    writer: Writer
    projector: Client
    control: Client
    minority: Client  # in the victim's namespace, connected to the victim alone
    victim: str
    timeline: dict[str, float] = field(default_factory=dict)

    @property
    def victim_node(self) -> Node:
        return self.cluster[self.victim]


def _stage(
    network: Network,
    cluster: dict[str, Node],
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> Stage:
    """Start the clients, pick the victim, and hand it the stream's leadership."""
    stream = "P" + uuid.uuid4().hex[:12].upper()
    # The projector (with the workers) and the writer connect to any of the three servers
    projector = _serve(
        network,
        processes,
        "pr",
        _settings(network, tmp_path / "projector", stream, read_timeout=READ_TIMEOUT, workers=True),
        tmp_path / "projector.err",
    )
    records = tmp_path / "writes.jsonl"
    writer_err = tmp_path / "writer.err"
    writer = Writer(
        _spawn(
            network,
            processes,
            "wr",
            writer_err,
            "write",
            _settings(network, tmp_path / "writer", stream),
            str(records),
            ",".join(SESSIONS),
            answers=False,
        ),
        records,
        writer_err,
    )
    projector_at = _node_of(cluster, projector.answer(START_TIMEOUT)["connected"])
    first = _until(writer.entries, START_TIMEOUT, "writer connected", alive=writer.process)
    writer_at = _node_of(cluster, first[0]["connected"])
    # The victim: a server neither is connected to (with 3 servers and 2 clients there is one)
    victim = next(name for name in NODES if name not in {projector_at, writer_at})
    others = [cluster[name].url for name in NODES if name != victim]
    control = _serve(
        network,
        processes,
        "ctl",
        _settings(network, tmp_path / "control", stream, nats_url=",".join(others)),
        tmp_path / "control.err",
    )
    minority = _serve(
        network,
        processes,
        victim,
        _settings(network, tmp_path / "minority", stream, nats_url=cluster[victim].url),
        tmp_path / "minority.err",
    )
    control.answer(START_TIMEOUT)
    assert minority.answer(START_TIMEOUT)["connected"].startswith(cluster[victim].address)
    # The stream is on all three servers, led by the victim
    state = control.until("cluster", _replicated, "stream replicated")
    assert state["num_replicas"] == 3
    if state["leader"] != victim:
        assert control.call("stepdown", preferred=victim).get("success"), victim
        control.until("cluster", lambda s: _replicated(s) and s["leader"] == victim, "handover")
    # The client on the victim writes through it
    assert minority.call("append", session=MINORITY, id="x0")["ok"]
    print(f"\nwriter on {writer_at}, projector on {projector_at}, stream leader {victim}")
    return Stage(network, cluster, writer, projector, control, minority, victim)


def _replicated(state: dict[str, Any]) -> bool:
    """The stream has a leader and two current followers."""
    replicas = state.get("replicas", [])
    return bool(state.get("leader")) and len(replicas) == 2 and all(r["current"] for r in replicas)


def _answered(answer: dict[str, Any]) -> bool:
    """Not a failure (a read refused for a moment is asked again)."""
    return "error" not in answer


def _start_writing(stage: Stage) -> None:
    stage.writer.process.send_signal(signal.SIGUSR1)
    stage.writer.wait_acknowledged_after(0.0, BEFORE, "writes before the fault")


def _minority_write_fails(stage: Stage) -> dict[str, Any]:
    """A write from the client on the victim's side: refused within the write timeout."""
    outcome = stage.minority.call("append", session=MINORITY, id="x1")
    print(f"minority write: {outcome}")
    assert not outcome["ok"], outcome
    assert outcome["error"] == "UnavailableError", outcome
    assert outcome["seconds"] <= WRITE_TIMEOUT + MARGIN, outcome
    return outcome


def _majority_goes_on(stage: Stage, since: float) -> str:
    """The writer's writes go on, and another server leads the stream; returns its name."""
    stage.writer.wait_acknowledged_after(since, DURING, "writes on the majority side")
    state = stage.control.until(
        "cluster",
        lambda s: s.get("leader") not in (None, stage.victim),
        "a new leader",
    )
    leader: str = state["leader"]
    return leader


def _back_together(stage: Stage) -> None:
    """All three servers current again; the minority's failed write, tried again, is
    acknowledged, and trying it once more stores nothing."""
    stage.control.until(
        "cluster",
        lambda s: _replicated(s) and stage.victim in {r["name"] for r in s["replicas"]},
        "the victim caught up",
    )
    retried, refused = _append_until_acknowledged(stage.minority, MINORITY, "x1")
    # (right after, a read through the server that was away may still be refused: ask again)
    again, refused_again = _append_until_acknowledged(stage.minority, MINORITY, "x1")
    print(f"minority retry: {retried}, after {refused}; once more: {again}, after {refused_again}")
    unexpected = [a for a in refused + refused_again if a["error"] != "UnavailableError"]
    assert not unexpected, unexpected


def _append_until_acknowledged(
    client: Client, session: str, id: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Append until acknowledged (bounded): the acknowledgement, and the refusals before it."""
    refusals: list[dict[str, Any]] = []

    def acknowledged() -> dict[str, Any] | None:
        answer = client.call("append", session=session, id=id)
        if answer["ok"]:
            return answer
        refusals.append(answer)
        return None

    try:
        return _until(acknowledged, SETTLE_TIMEOUT, f"{id} acknowledged"), refusals
    except AssertionError as error:
        raise AssertionError(f"{error}; refusals: {refusals[-3:]}") from None


def _finish(stage: Stage, since: float) -> None:
    """The writer writes some more, then stops; then every acknowledged write is in the log
    once, and in the read model."""
    writer = stage.writer
    writer.wait_acknowledged_after(since, AFTER, "writes after the fault")
    writer.process.send_signal(signal.SIGTERM)
    assert writer.process.wait(timeout=60) == 0, _text(writer.stderr)[-3000:]
    entries = writer.entries()
    writes = [e for e in entries if "id" in e and not e.get("retry")]
    retries = [e for e in entries if e.get("retry")]
    acknowledged: dict[str, list[str]] = {session: [] for session in SESSIONS}
    for entry in writes:
        if entry["ok"]:
            acknowledged[entry["session"]].append(entry["id"])
    _report(stage, writes)
    # Every message the writer started was acknowledged in the end (it tries until it is)
    assert {e["id"] for e in writes} == {i for ids in acknowledged.values() for i in ids}
    # And a retried command (an acknowledged message appended again) was acknowledged
    assert sorted(r["session"] for r in retries if r["ok"]) == sorted(SESSIONS), retries
    # Then the log holds each acknowledged message once, in the order of the acknowledgements
    sessions = [*SESSIONS, MINORITY]
    # (a read may time out while the servers reconnect their routes: ask again)
    logged = stage.control.until("log", _answered, "the log read", sessions=sessions)
    for session in SESSIONS:
        ids = logged[session]["ids"]
        duplicates = {i: n for i, n in Counter(ids).items() if n > 1}
        assert not duplicates, f"{session}: {duplicates}"
        assert ids == acknowledged[session], session
        assert logged[session]["others"] == []
    # And the minority's message once: its failed attempt and its retries added no copy
    assert logged[MINORITY] == {"ids": ["x0", "x1"], "others": []}
    # And the read model the projector built has the same histories
    histories = stage.projector.until("histories", _answered, "the histories", sessions=sessions)
    for session in sessions:
        assert histories[session] == logged[session]["ids"], session
    # And equals a rebuild from the log
    verified = stage.projector.until("verify", _answered, "verify")
    assert verified["results"], verified
    assert all(r["ok"] for r in verified["results"]), (
        f"{verified}\nprojector stderr:\n{_text(stage.projector.stderr)[-3000:]}"
    )
    # And the writer was refused with UnavailableError only
    unexpected = [e for e in writes + retries if not e["ok"] and e["error"] != "UnavailableError"]
    assert not unexpected, unexpected


def _report(stage: Stage, writes: list[dict[str, Any]]) -> None:
    """How long the writer waited, and what it was told meanwhile (printed for the record)."""
    fault = stage.timeline["fault"]
    acks = sorted(e["started"] + e["seconds"] for e in writes if e["ok"])
    around = [fault, *(at for at in acks if at > fault)]
    outage = max((later - earlier for earlier, later in pairwise(around)), default=0.0)
    failures = [e for e in writes if not e["ok"]]
    kinds = Counter(e["message"].split(":")[0] for e in failures)
    longest = max((e["seconds"] for e in failures), default=0.0)
    steps = ", ".join(f"{k} +{v - fault:.2f} s" for k, v in stage.timeline.items())
    print(
        f"{len(writes)} attempts, {len(acks)} acknowledged; the longest wait for an ack after "
        f"the fault: {outage:.2f} s; {len(failures)} failed attempts (the longest "
        f"{longest:.2f} s): {dict(kinds)}; timeline: {steps}"
    )


@pytest.mark.slow
def test_a_cut_off_stream_leader_loses_no_acknowledged_write_and_duplicates_none(
    network: Network,
    cluster: dict[str, Node],
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    # Given a writer writing to a 3-replica stream, led by a server no other client uses
    stage = _stage(network, cluster, processes, tmp_path)
    _start_writing(stage)
    # When the leader's cable is unplugged mid-loop
    network.cut(stage.victim)
    stage.timeline["fault"] = cut = time.monotonic()
    # Then a client on the leader's side of the cut is refused within its write timeout
    _minority_write_fails(stage)
    # And the writer goes on through a new leader on the other side
    leader = _majority_goes_on(stage, cut)
    stage.timeline["new leader seen"] = time.monotonic()
    assert leader != stage.victim
    # When the cable is plugged back in
    network.heal(stage.victim)
    stage.timeline["heal"] = healed = time.monotonic()
    # Then the old leader catches up, the minority's write goes through when retried, and
    # every acknowledged write is in the log and the read model exactly once
    _back_together(stage)
    stage.timeline["minority retried"] = time.monotonic()
    _finish(stage, healed)


@pytest.mark.slow
def test_a_paused_stream_leader_loses_no_acknowledged_write_and_duplicates_none(
    network: Network,
    cluster: dict[str, Node],
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    # Given a writer writing to a 3-replica stream, led by a server no other client uses
    stage = _stage(network, cluster, processes, tmp_path)
    _start_writing(stage)
    # When the leader's nats-server is paused (SIGSTOP) mid-loop
    freeze(stage.victim_node.process)
    stage.timeline["fault"] = paused = time.monotonic()
    # Then a client connected to it alone is refused within its write timeout
    _minority_write_fails(stage)
    # And the writer goes on through a new leader among the two others
    leader = _majority_goes_on(stage, paused)
    stage.timeline["new leader seen"] = time.monotonic()
    assert leader != stage.victim
    # When the paused server goes on (SIGCONT)
    stage.victim_node.process.send_signal(signal.SIGCONT)
    stage.timeline["resume"] = resumed = time.monotonic()
    # Then it catches up, the minority's write goes through when retried, and every
    # acknowledged write is in the log and the read model exactly once
    _back_together(stage)
    stage.timeline["minority retried"] = time.monotonic()
    _finish(stage, resumed)
