"""Daily token totals from memstream's event stream with nothing but nats-py and json: reads
every ``registry.usage_added`` event (docs/events.md) and sums input tokens, output tokens and
cost per UTC day and namespace.

    python examples/daily_tokens.py --url nats://127.0.0.1:4222 --stream MEMSTREAM [--json]

It reads with an ephemeral consumer filtered on the registry subjects (nothing is left on the
server), from the start of the stream to its last event when it starts, and prints one line per
day and namespace. The day is the event's own ``time`` (when the usage was recorded), not when
the stream stored it, so a restored or migrated stream gives the same totals.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy


def add(
    totals: dict[tuple[str, str], dict[str, Any]], namespace: str, event: dict[str, Any]
) -> None:
    """Add one ``registry.usage_added`` event to the totals of its day and namespace."""
    day = str(event["time"])[:10]
    total = totals.setdefault(
        (day, namespace), {"input_tokens": 0, "output_tokens": 0, "cost": 0.0, "events": 0}
    )
    total["input_tokens"] += int(event["input_tokens"])
    total["output_tokens"] += int(event["output_tokens"])
    total["cost"] += float(event["cost"])
    total["events"] += 1


async def daily_totals(args: argparse.Namespace) -> list[dict[str, Any]]:
    client = await nats.connect(args.url)
    totals: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        js = client.jetstream()
        last = (await js.stream_info(args.stream)).state.last_seq
        subscription = await js.pull_subscribe(
            f"{args.prefix}.*.registry.>",  # ".>": also the partition token, if any
            stream=args.stream,
            config=ConsumerConfig(
                ack_policy=AckPolicy.NONE,
                deliver_policy=DeliverPolicy.ALL,
                inactive_threshold=30.0,
                mem_storage=True,
            ),
        )
        pending = (await subscription.consumer_info()).num_pending
        try:
            while pending:
                for msg in await subscription.fetch(500, timeout=5.0):
                    pending = msg.metadata.num_pending
                    if msg.metadata.sequence.stream > last:
                        pending = 0
                        break
                    event = json.loads(msg.data)
                    headers = msg.headers or {}
                    if (
                        headers.get("Ms-Schema") == "1"
                        and event.get("type") == "registry.usage_added"
                    ):
                        add(totals, msg.subject.split(".")[1], event)
        finally:
            await subscription.unsubscribe()
    finally:
        await client.close()
    return [
        {"day": day, "namespace": namespace, **total, "cost": round(total["cost"], 9)}
        for (day, namespace), total in sorted(totals.items())
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="nats://127.0.0.1:4222")
    parser.add_argument("--stream", default="MEMSTREAM")
    parser.add_argument("--prefix", default="ms", help="the stream's subject prefix")
    parser.add_argument("--json", action="store_true", help="print the totals as JSON")
    args = parser.parse_args()
    rows = asyncio.run(daily_totals(args))
    if args.json:
        print(json.dumps(rows, sort_keys=True))
    else:
        for row in rows:
            print(
                f"{row['day']}\t{row['namespace']}\tin {row['input_tokens']}\t"
                f"out {row['output_tokens']}\tcost {row['cost']:.4f}"
            )


if __name__ == "__main__":
    main()
