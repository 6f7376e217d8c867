"""The catalogue of the event contract (docs/events.md and docs/schemas/) agrees with the events
memstream writes: adding an event type or a field without documenting it fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
from support.events import every_event

from memstream.workers.log.codec import CommandMeta, encode_event
from memstream.workers.log.event_contract import EVENT_TYPES

DOCS = Path(__file__).resolve().parents[2] / "docs"
COMMON = ("type", "version", "time")


def payloads() -> dict[str, dict[str, Any]]:
    """The payload of one event of every type, by type."""
    meta = CommandMeta()
    found: dict[str, dict[str, Any]] = {}
    for event in every_event():
        payload, _ = encode_event(event, meta, meta.command_id)
        data = json.loads(payload)
        found[data["type"]] = data
    return found


def sections() -> dict[str, list[str]]:
    """The fields each ``### <type>`` section of docs/events.md lists in its table."""
    text = (DOCS / "events.md").read_text()
    found: dict[str, list[str]] = {}
    for block in re.split(r"^### ", text, flags=re.MULTILINE)[1:]:
        name, _, body = block.partition("\n")
        body = body.split("\n## ", 1)[0]
        found[name.strip()] = re.findall(r"^\| `([a-z_]+)` \|", body, flags=re.MULTILINE)
    return found


def test_every_event_type_is_documented_with_exactly_its_fields() -> None:
    written, documented = payloads(), sections()
    assert set(written) == set(EVENT_TYPES)
    assert set(documented) == set(EVENT_TYPES), "docs/events.md has a section per event type"
    for name, payload in written.items():
        own = [field for field in payload if field not in COMMON]
        assert documented[name] == own, f"docs/events.md, section {name}"


def test_the_common_fields_and_headers_are_documented() -> None:
    text = (DOCS / "events.md").read_text()
    for field in COMMON:
        assert f"| `{field}` |" in text
    for header in ("Ms-Schema", "Nats-Msg-Id", "Ms-Actor", "Ms-Command-Id", "Ms-Causation-Id"):
        assert f"| `{header}` |" in text


def test_every_event_type_has_a_json_schema_its_payloads_meet() -> None:
    files = {p.name.removesuffix(".schema.json") for p in (DOCS / "schemas").glob("*.json")}
    assert files == set(EVENT_TYPES)
    for name, payload in payloads().items():
        schema = json.loads((DOCS / "schemas" / f"{name}.schema.json").read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        validator = jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        )
        validator.validate(payload)
        assert list(schema["properties"]) == list(payload), name
        # A field of the wrong type is caught
        bad = {**payload, "version": "one"}
        assert not validator.is_valid(bad)
