"""The AsyncAPI document of the stream (``docs/asyncapi.yaml``), generated with FastStream's
AsyncAPI support from the workers and the event catalogue.

The channels are declared on a FastStream NATS broker that never connects: one publisher per
aggregate kind (what writers append: ``ms.{namespace}.{kind}.{id}``) and one subscriber per
worker (its durable consumer and subject filter). FastStream turns them into an AsyncAPI 3.0.0
document; the payloads are then the event contract's JSON Schemas (``docs/schemas``), one
message per event type, and the headers the contract's (``docs/events.md``).

Regenerate with ``python -m memstream.workers.log.asyncapi > docs/asyncapi.yaml``; a test fails when
the file and the code disagree.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from memstream.workers.log.event_contract import EVENT_TYPES

# What each aggregate kind holds (docs/events.md, "Subjects").
KINDS: dict[str, str] = {
    "session": "One session's messages, compactions, frozen prompt and loaded skills; the "
    "token is the session id.",
    "block": "One built-in writable context block; the token is the block's label, a NUL byte "
    "and its session id.",
    "search": "One search block's entries; the token is the search block's key.",
    "registry": "What a SessionManager knows of one session: name, model, source, parent, "
    "usage, end reason; the token is the session id.",
    "profile": "One Agent Memory profile: raw messages, memories, supersessions, deletions; "
    "the token is the profile name.",
    "purge": "A namespace's record of purges (memstream admin purge): stream sequences and "
    "counts, no personal data; the token is log.",
}
# The workers: what each consumes (its filter), its durable consumer and what it does.
WORKERS: dict[str, tuple[str, str, str]] = {
    "projector": (
        "ms.>",
        "projector-{copy}",
        "Builds the read models sessions, context, registry and memory of one read-model copy "
        "(one transaction per batch with its tracking rows; acknowledged after commit).",
    ),
    "indexer": (
        "ms.*.profile.*",
        "projector-{copy}-vectors",
        "Embeds memories and raw messages (the vectors read model) with an embedding model.",
    ),
    "analytics": (
        "ms.>",
        "projector-{copy}-analytics",
        "Counts daily volumes per namespace, model and source (memstream stats).",
    ),
    "extractor": (
        "ms.*.profile.*",
        "extractor",
        "Extracts memories from ingested conversations and remembered texts and appends "
        "memory.memories_extracted to the profile's subject.",
    ),
}
HEADERS: dict[str, Any] = {
    "type": "object",
    "required": ["Ms-Schema", "Nats-Msg-Id", "Ms-Actor"],
    "properties": {
        "Ms-Schema": {"type": "string", "const": "1", "description": "Contract version."},
        "Nats-Msg-Id": {
            "type": "string",
            "description": "JetStream de-duplication id: the command id, or "
            "<command id>:<index> for a command's several events.",
        },
        "Ms-Actor": {"type": "string", "maxLength": 128, "description": "Who caused it."},
        "Ms-Command-Id": {
            "type": "string",
            "description": "The command id, when it cannot be read from Nats-Msg-Id.",
        },
        "Ms-Causation-Id": {"type": "string", "description": "What caused the command."},
        "Ms-Correlation-Id": {"type": "string", "description": "The flow it belongs to."},
        "traceparent": {"type": "string", "description": "W3C Trace Context of the command."},
        "Nats-Expected-Last-Subject-Sequence": {
            "type": "string",
            "description": "Optimistic concurrency: the subject's last sequence decided on.",
        },
    },
}
SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def kind_of(event_type: str) -> str:
    """The aggregate kind whose subjects carry ``event_type``."""
    prefix = event_type.partition(".")[0]
    if prefix == "memory":
        return "profile"
    if prefix == "context":
        return "block" if event_type.startswith("context.block_") else "search"
    return prefix


def _declared(version: str) -> Any:
    """The FastStream broker with the stream's channels declared, and its AsyncAPI factory."""
    from faststream.nats import JStream, NatsBroker, PullSub
    from faststream.specification import AsyncAPI

    broker = NatsBroker("nats://localhost:4222")
    stream = JStream("MEMSTREAM", subjects=["ms.>"], declare=False)
    for kind, description in KINDS.items():
        broker.publisher(
            f"ms.{{namespace}}.{kind}.{{id}}",
            stream=stream,
            title=f"{kind} events",
            description=description,
            schema=dict,
        )
    for name, (subject, durable, description) in WORKERS.items():

        async def handle(event: dict[str, Any]) -> None:  # declared only: never called
            """The worker's handler (a declaration for the document)."""

        broker.subscriber(
            subject,
            stream=stream,
            durable=durable,
            pull_sub=PullSub(batch_size=500),
            title=name,
            description=description,
        )(handle)
    return AsyncAPI(
        broker,
        title="memstream event stream",
        version=version,
        description="Every write to memstream is an event on one NATS JetStream stream "
        "(default MEMSTREAM, subjects ms.>); the event contract, version 1, is docs/events.md.",
        schema_version="3.0.0",
    )


def _event_schemas(root: Path) -> dict[str, dict[str, Any]]:
    schemas = {}
    for name in sorted(EVENT_TYPES):
        schema = json.loads((root / f"{name}.schema.json").read_text(encoding="utf-8"))
        schema.pop("$schema", None)
        schema.pop("$id", None)
        schemas[name] = schema
    return schemas


def asyncapi_document(version: str = "1", schemas: Path = SCHEMAS) -> dict[str, Any]:
    """The AsyncAPI 3.0.0 document of the stream, as JSON-compatible data."""
    generated: dict[str, Any] = _declared(version).to_specification().to_jsonable()
    events = _event_schemas(schemas)
    components = generated.setdefault("components", {})
    messages: dict[str, Any] = {}
    for name in events:
        messages[name] = {
            "name": name,
            "title": name,
            "contentType": "application/json",
            "headers": {"$ref": "#/components/schemas/Headers"},
            "correlationId": {"location": "$message.header#/Ms-Correlation-Id"},
            "payload": {"$ref": f"#/components/schemas/{name}"},
        }
    components["messages"] = messages
    components["schemas"] = {"Headers": HEADERS, **events}
    for key, channel in generated["channels"].items():
        title = key.removesuffix(" events")
        if title in KINDS:  # a publisher: its kind's events
            names = [n for n in events if kind_of(n) == title]
        else:  # a worker: what its filter lets through
            tokens = WORKERS[key][0].split(".")
            kind = tokens[2] if len(tokens) > 2 else "*"
            names = [n for n in events if kind == "*" or kind_of(n) == kind]
        if title in KINDS:
            channel["parameters"] = {
                "namespace": {"description": "The namespace ([a-z0-9_-], at most 32)."},
                "id": {"description": "The aggregate's id as one subject token (=XX escapes)."},
            }
        channel["messages"] = {name: {"$ref": f"#/components/messages/{name}"} for name in names}
    # (FastStream lists them in the order of a set: sorted, the file is the same every time)
    generated["channels"] = dict(sorted(generated["channels"].items()))
    generated["operations"] = dict(sorted(generated["operations"].items()))
    for key, operation in generated["operations"].items():
        channel = generated["channels"][key]
        operation["messages"] = [
            {"$ref": f"#/channels/{_escape(key)}/messages/{name}"} for name in channel["messages"]
        ]
    return generated


def _escape(key: str) -> str:
    """A channel key inside a JSON pointer of a ``$ref`` (as FastStream writes them)."""
    return key.replace("~", "~0").replace("/", "~1").replace(" ", "%20")


def asyncapi_yaml(version: str = "1") -> str:
    """The document as YAML (``docs/asyncapi.yaml``)."""
    import yaml

    header = "# Generated by python -m memstream.workers.log.asyncapi: do not edit by hand.\n"
    text = yaml.safe_dump(asyncapi_document(version), sort_keys=False, allow_unicode=True)
    return header + str(text)


if __name__ == "__main__":
    sys.stdout.write(asyncapi_yaml())
