"""A memstream client in a process of its own, for the network-partition tests: run in a network
namespace with ``ip netns exec``, it reaches the cluster only through that namespace's cable.

``python tests/support/partition_client.py write SETTINGS RECORDS SESSIONS`` connects without
workers, writes one JSON line ``{"connected": "host:port"}`` to the file RECORDS, and on SIGUSR1
starts appending messages ``w00000``, ``w00001``… to the comma-separated SESSIONS in turn until
SIGTERM. A write that fails is tried again with the same message (its id makes a retry a no-op
if an earlier attempt was stored), whatever the error: the test asserts which errors it met.
Every attempt is one JSON line in RECORDS: ``{"session", "id", "attempt", "ok", "seq", "error",
"started", "seconds"}``
(``started`` on the system's monotonic clock, which the test process shares). After SIGTERM it
appends the first acknowledged message of each session once more (until acknowledged), a
retried command, recorded with ``"retry": true``.

``python tests/support/partition_client.py serve SETTINGS`` connects (with the workers if
SETTINGS says so), prints ``{"connected": "host:port"}`` and then answers one JSON request per
line of stdin with one JSON line on stdout (see :data:`OPERATIONS`); an operation that fails
answers ``{"error": <exception type>, "message": …}``.

SETTINGS is a JSON object of :class:`Settings` fields, plus ``"workers": true|false``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

from memstream import Memstream, UnavailableError
from memstream.client import open_memstream
from memstream.domain.session import SessionAggregate
from memstream.settings import Settings
from memstream.workers.admin.rebuild import verify

FORMING_TIMEOUT = 30.0  # a fresh cluster places the replicated stream within this
RETRY_DELAY = 0.05  # the writer's pause before it tries a failed write again
WRITE_PAUSE = 0.01  # between two writes: a steady trickle, not a flood, on a small machine
GIVE_UP_AFTER = 90.0  # the writer stops retrying one message after this
VERIFY_TIMEOUT = 30.0

logger = logging.getLogger(__name__)


def message(message_id: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": f"message {message_id}"}


def parse_settings(text: str) -> tuple[Settings, bool]:
    """SETTINGS as given on the command line: the settings and whether to run the workers."""
    fields = json.loads(text)
    workers = bool(fields.pop("workers", False))
    fields["data_dir"] = Path(fields["data_dir"])
    return Settings(**fields), workers


async def open_when_placed(settings: Settings, *, workers: bool) -> Memstream:
    """Connect once the cluster can place the stream (until then: UnavailableError)."""
    deadline = time.monotonic() + FORMING_TIMEOUT
    while True:
        try:
            return await open_memstream(settings, workers=workers)
        except UnavailableError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def connected(ms: Memstream) -> str:
    """``host:port`` of the server the client is connected to."""
    url = ms.core.nats.connected_url
    return "" if url is None else str(url.netloc)


async def append(ms: Memstream, session: str, id: str) -> dict[str, Any]:
    """Append message ``id``: whether it was acknowledged, and how long it took to say."""
    started = time.monotonic()
    try:
        seq = await ms.session(session).append_message(message(id))
    except Exception as error:  # any: the test asserts which (UnavailableError is expected)
        if not isinstance(error, UnavailableError):
            logger.exception("append %s to %s failed", id, session)
        return {
            "ok": False,
            "error": type(error).__name__,
            "message": str(error),
            "started": started,
            "seconds": time.monotonic() - started,
        }
    return {"ok": True, "seq": seq, "started": started, "seconds": time.monotonic() - started}


async def cluster(ms: Memstream) -> dict[str, Any]:
    """The stream's leader and replicas, as the server this client is connected to says."""
    info = await ms.core.log.js.stream_info(ms.core.log.stream)
    state = info.cluster
    replicas = [] if state is None else (state.replicas or [])
    return {
        "connected": connected(ms),
        "leader": None if state is None else state.leader,
        "replicas": [
            {"name": r.name, "current": bool(r.current), "offline": bool(r.offline)}
            for r in replicas
        ],
        "num_replicas": info.config.num_replicas,
        "last_seq": info.state.last_seq,
    }


async def stepdown(ms: Memstream, preferred: str) -> dict[str, Any]:
    """Ask the stream's leader to hand over to the server ``preferred``."""
    reply = await ms.core.nats.request(
        f"$JS.API.STREAM.LEADER.STEPDOWN.{ms.core.log.stream}",
        json.dumps({"placement": {"preferred": preferred}}).encode(),
        timeout=ms.core.log.timeout,
    )
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


async def log(ms: Memstream, sessions: list[str]) -> dict[str, Any]:
    """Each session's message ids in log order (and the types of any other events)."""
    found: dict[str, Any] = {}
    for session in sessions:
        ids: list[str] = []
        others: list[str] = []
        subject = ms.core.commands.session_subject(session)
        async for entry in ms.core.log.read_subject(subject, consistent=True):
            event = entry.decode()
            if isinstance(event, SessionAggregate.MessageAppended):
                ids.append(event.message_id)
            else:
                others.append(type(event).__name__)
        found[session] = {"ids": ids, "others": others}
    return found


async def histories(ms: Memstream, sessions: list[str]) -> dict[str, Any]:
    """Each session's history ids from the read model, once it has every event the log held
    when asked (bounded by the read timeout)."""
    await ms.sync("sessions")
    return {s: [m["id"] for m in await ms.session(s).get_history()] for s in sessions}


async def verified(ms: Memstream) -> dict[str, Any]:
    """The read models compared with a rebuild from the log."""
    results = await verify(ms.core.log, ms.core.reads.copy, wait_timeout=VERIFY_TIMEOUT)
    return {
        "results": [
            {"projection": r.projection, "ok": r.ok, "seq": r.seq, "difference": repr(r.difference)}
            for r in results
        ]
    }


async def where(ms: Memstream) -> dict[str, Any]:
    return {"connected": connected(ms)}


OPERATIONS: dict[str, Callable[..., Awaitable[dict[str, Any]]]] = {
    "append": append,
    "cluster": cluster,
    "stepdown": stepdown,
    "log": log,
    "histories": histories,
    "verify": verified,
    "where": where,
}


def reply(answer: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


async def serve(settings: Settings, workers: bool) -> None:
    ms = await open_when_placed(settings, workers=workers)
    try:
        reply({"connected": connected(ms)})
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            request = json.loads(line)
            operation = OPERATIONS[request.pop("op")]
            try:
                answer = await operation(ms, **request)
            except Exception as error:  # the driver decides: it asks again, or fails the test
                answer = {"error": type(error).__name__, "message": str(error)}
            reply(answer)
    finally:
        await ms.close()


def record(out: TextIO, line: dict[str, Any]) -> None:
    out.write(json.dumps(line) + "\n")
    out.flush()


async def write(settings: Settings, records: Path, sessions: list[str]) -> None:
    ms = await open_when_placed(settings, workers=False)
    go, stop = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, go.set)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        with records.open("a") as out:
            record(out, {"connected": connected(ms)})
            await go.wait()
            first: dict[str, str] = {}
            index = 0
            while not stop.is_set():
                session, id = sessions[index % len(sessions)], f"w{index:05d}"
                await append_until_acknowledged(ms, out, session, id)
                first.setdefault(session, id)
                index += 1
                await asyncio.sleep(WRITE_PAUSE)
            for session, id in first.items():
                await append_until_acknowledged(ms, out, session, id, retry=True)
    finally:
        await ms.close()


async def append_until_acknowledged(
    ms: Memstream, out: TextIO, session: str, id: str, *, retry: bool = False
) -> None:
    """Append message ``id`` until acknowledged, recording every attempt (``retry``: the
    command was acknowledged before, and is sent again)."""
    deadline = time.monotonic() + GIVE_UP_AFTER
    attempt = 0
    while True:
        attempt += 1
        outcome = await append(ms, session, id)
        line = {"session": session, "id": id, "attempt": attempt, **outcome}
        record(out, {**line, "retry": True} if retry else line)
        if outcome["ok"]:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{id} not acknowledged in {attempt} attempts")
        await asyncio.sleep(RETRY_DELAY)


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    mode, text = argv[:2]
    settings, workers = parse_settings(text)
    if mode == "write":
        asyncio.run(write(settings, Path(argv[2]), argv[3].split(",")))
    else:
        asyncio.run(serve(settings, workers))


if __name__ == "__main__":
    main(sys.argv[1:])
