"""Follow memstream's event stream with nothing but nats-py and json, and count each session's
messages: a consumer of the public event contract (docs/events.md), independent of memstream.

    python examples/follow_sessions.py --url nats://127.0.0.1:4222 --stream MEMSTREAM \\
        --durable follow-sessions --state counts.json [--once] [--json]

It reads the stream with a durable pull consumer of its own (so it resumes where it stopped)
and keeps its counts in ``--state`` (written after each batch, before the batch is
acknowledged: a batch redelivered after a crash is recognised by its stream sequence and
skipped). ``--once`` stops when it has caught up; otherwise it follows the stream and prints
the counts whenever they change. With the embedded server, put its token in the URL
(``nats://<token>@127.0.0.1:<port>``; the token is in ``<data dir>/nats.token``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import nats
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig


def load_state(path: Path | None) -> dict[str, Any]:
    if path is None or not path.exists():
        return {"last_seq": 0, "counts": {}}
    state: dict[str, Any] = json.loads(path.read_text())
    return state


def save_state(path: Path | None, state: dict[str, Any]) -> None:
    if path is None:
        return
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(json.dumps(state, sort_keys=True))
    os.replace(temporary, path)


def apply(state: dict[str, Any], event: dict[str, Any]) -> bool:
    """Count one event of the contract; True if a count changed."""
    counts: dict[str, int] = state["counts"]
    kind = event.get("type")
    key = event.get("session_id")
    if not isinstance(key, str):
        return False
    before = counts.get(key, 0)
    if kind == "session.message_appended":
        counts[key] = before + 1
    elif kind == "session.messages_appended":
        counts[key] = before + len(event["messages"])
    elif kind == "session.messages_deleted":
        counts[key] = max(0, before - len(event["message_ids"]))
    elif kind == "session.messages_cleared":
        counts[key] = 0
    return counts.get(key, 0) != before


async def follow(args: argparse.Namespace) -> dict[str, int]:
    state = load_state(args.state)
    client = await nats.connect(args.url)
    try:
        js = client.jetstream()
        subscription = await js.pull_subscribe(
            f"{args.prefix}.>",
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
            changed = False
            for msg in msgs:
                seq = msg.metadata.sequence.stream
                if seq <= state["last_seq"]:
                    continue  # redelivered after a crash: already counted
                state["last_seq"] = seq
                if (msg.headers or {}).get("Ms-Schema") != "1":
                    continue  # not an event of contract version 1
                changed |= apply(state, json.loads(msg.data))
            save_state(args.state, state)
            await msgs[-1].ack()
            if changed and not args.once:
                print(json.dumps(state["counts"], sort_keys=True), flush=True)
            if args.once and msgs[-1].metadata.num_pending == 0:
                break
    finally:
        await client.close()
    counts: dict[str, int] = state["counts"]
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="nats://127.0.0.1:4222")
    parser.add_argument("--stream", default="MEMSTREAM")
    parser.add_argument("--prefix", default="ms", help="the stream's subject prefix")
    parser.add_argument("--durable", default="follow-sessions")
    parser.add_argument("--state", type=Path, default=None, help="JSON file of the counts")
    parser.add_argument("--once", action="store_true", help="stop once caught up")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args()
    counts = asyncio.run(follow(args))
    if args.json:
        print(json.dumps(counts, sort_keys=True))
    else:
        for session_id, count in sorted(counts.items()):
            print(f"{session_id}\t{count}")
    sys.exit(0)


if __name__ == "__main__":
    main()
