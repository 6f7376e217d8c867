"""What a connected client is made of (:attr:`memstream.client.Memstream.core`): each part has
one job, and ``connect()`` puts them together."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from nats.aio.client import Client

from memstream.agent_memory import RecallModels
from memstream.commands import CommandRunner
from memstream.local_workers import LocalWorkers
from memstream.read_side import ReadSide
from memstream.read_your_writes import ReadYourWrites
from memstream.settings import Settings
from memstream.workers.log.event_log import EventLog
from memstream.workers.own_writes import OwnWrites
from memstream.workers.runtime.embedded import EmbeddedRuntime


@dataclass
class Core:
    """The parts of a connected client.

    - ``log``: the event log (NATS JetStream) on the connection ``nats``; ``runtime``: the
      embedded server, when this data dir runs one;
    - ``reads``: the read-model copy and its damage handling;
    - ``ryw``: what reads wait for (read-your-writes);
    - ``commands``: every write, decided on an aggregate and appended to the log;
    - ``own``: this client's events for the projector of its process (own writes);
    - ``workers``: the workers this process runs (none for a client of remote workers);
    - ``recall``: what Agent Memory's recall computes with.
    """

    settings: Settings
    namespace: str
    actor: str
    # The loop it was connected on: a call made on another runs there (see home_loop).
    loop: asyncio.AbstractEventLoop
    nats: Client
    log: EventLog
    runtime: EmbeddedRuntime | None
    reads: ReadSide
    ryw: ReadYourWrites
    own: OwnWrites
    commands: CommandRunner
    workers: LocalWorkers
    recall: RecallModels


__all__ = ["Core"]
