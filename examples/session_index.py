"""Keep a SQLite index of memstream's sessions with nothing but nats-py, json and sqlite3: a
consumer of the public event contract (docs/events.md) with its own durable consumer and its
own state, independent of memstream.

    python examples/session_index.py --url nats://127.0.0.1:4222 --stream MEMSTREAM \\
        --durable session-index --database index.db [--once] [--json]

Its database holds one row per session (namespace, id, messages, roles seen, first and last
event time) and the stream sequence it has applied. Each fetched batch is applied in one SQLite
transaction together with that sequence, and acknowledged only after the commit: a batch
redelivered after a crash is recognised by its sequences and skipped, so nothing is counted
twice or lost. ``--once`` stops when it has caught up and prints the sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import nats
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    namespace TEXT NOT NULL,
    session_id TEXT NOT NULL,
    messages INTEGER NOT NULL DEFAULT 0,
    roles TEXT NOT NULL DEFAULT '[]',
    first_at TEXT NOT NULL,
    last_at TEXT NOT NULL,
    PRIMARY KEY (namespace, session_id)
);
CREATE TABLE IF NOT EXISTS position (last_seq INTEGER NOT NULL);
INSERT INTO position SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM position);
"""


def open_index(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.executescript(SCHEMA)
    return connection


def last_seq(connection: sqlite3.Connection) -> int:
    return int(connection.execute("SELECT last_seq FROM position").fetchone()[0])


def apply(connection: sqlite3.Connection, namespace: str, event: dict[str, Any]) -> None:
    """Apply one session event of the contract (anything else is passed over)."""
    kind, session_id, at = event.get("type"), event.get("session_id"), event.get("time")
    if not isinstance(kind, str) or not kind.startswith("session.") or not session_id:
        return
    if kind == "session.message_appended":
        added = [event["message"]]
    elif kind == "session.messages_appended":
        added = [entry["message"] for entry in event["messages"]]
    else:
        added = []
    row = connection.execute(
        "SELECT messages, roles FROM sessions WHERE namespace = ? AND session_id = ?",
        (namespace, session_id),
    ).fetchone()
    messages, roles = (0, []) if row is None else (row[0], json.loads(row[1]))
    messages += len(added)
    if kind == "session.messages_deleted":
        messages = max(0, messages - len(event["message_ids"]))
    elif kind == "session.messages_cleared":
        messages = 0
    for message in added:
        if message.get("role") not in roles:
            roles.append(message.get("role"))
    connection.execute(
        "INSERT INTO sessions (namespace, session_id, messages, roles, first_at, last_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, session_id) DO UPDATE SET "
        "messages = excluded.messages, roles = excluded.roles, last_at = excluded.last_at",
        (namespace, session_id, messages, json.dumps(sorted(roles)), at, at),
    )


async def follow(args: argparse.Namespace) -> None:
    connection = open_index(args.database)
    client = await nats.connect(args.url)
    try:
        js = client.jetstream()
        subscription = await js.pull_subscribe(
            f"{args.prefix}.*.session.>",  # ".>": also the partition token, if any
            durable=args.durable,
            stream=args.stream,
            config=ConsumerConfig(ack_policy=AckPolicy.ALL, max_ack_pending=-1),
        )
        while True:
            try:
                msgs = await subscription.fetch(500, timeout=1.0)
            except NatsTimeout:
                if args.once:
                    break
                continue
            applied = last_seq(connection)
            connection.execute("BEGIN IMMEDIATE")
            try:
                for msg in msgs:
                    seq = msg.metadata.sequence.stream
                    if seq <= applied:
                        continue  # redelivered after a crash: applied already
                    if (msg.headers or {}).get("Ms-Schema") == "1":
                        apply(connection, msg.subject.split(".")[1], json.loads(msg.data))
                    applied = seq
                connection.execute("UPDATE position SET last_seq = ?", (applied,))
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            await msgs[-1].ack()  # only once the batch is committed
            if args.once and msgs[-1].metadata.num_pending == 0:
                break
    finally:
        await client.close()
        connection.close()


def sessions(path: Path) -> list[dict[str, Any]]:
    connection = open_index(path)
    try:
        rows = connection.execute(
            "SELECT namespace, session_id, messages, roles, first_at, last_at FROM sessions "
            "ORDER BY namespace, session_id"
        ).fetchall()
    finally:
        connection.close()
    keys = ("namespace", "session_id", "messages", "roles", "first_at", "last_at")
    return [{**dict(zip(keys, row, strict=True)), "roles": json.loads(row[3])} for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="nats://127.0.0.1:4222")
    parser.add_argument("--stream", default="MEMSTREAM")
    parser.add_argument("--prefix", default="ms", help="the stream's subject prefix")
    parser.add_argument("--durable", default="session-index")
    parser.add_argument("--database", type=Path, default=Path("session-index.db"))
    parser.add_argument("--once", action="store_true", help="stop once caught up")
    parser.add_argument("--json", action="store_true", help="print the sessions as JSON")
    args = parser.parse_args()
    asyncio.run(follow(args))
    rows = sessions(args.database)
    if args.json:
        print(json.dumps(rows, sort_keys=True))
    else:
        for row in rows:
            print(f"{row['namespace']}\t{row['session_id']}\t{row['messages']}\t{row['last_at']}")


if __name__ == "__main__":
    main()
