"""``docs/asyncapi.yaml`` (issue 16, item 7): generated with FastStream's AsyncAPI support from
the workers and the event catalogue, valid AsyncAPI 3.0.0, and in step with the code."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml

from memstream.workers.log.asyncapi import KINDS, WORKERS, asyncapi_yaml, kind_of
from memstream.workers.log.event_contract import EVENT_TYPES

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "docs" / "asyncapi.yaml"
SCHEMA = Path(__file__).resolve().parents[1] / "support" / "asyncapi" / "3.0.0.schema.json"


def test_the_document_is_what_the_code_generates() -> None:
    assert DOCUMENT.read_text(encoding="utf-8") == asyncapi_yaml(), (
        "docs/asyncapi.yaml is stale: python -m memstream.workers.log.asyncapi > docs/asyncapi.yaml"
    )


def test_the_document_is_valid_asyncapi_3() -> None:
    document = yaml.safe_load(DOCUMENT.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
    errors = [f"{list(e.path)}: {e.message[:200]}" for e in validator.iter_errors(document)]
    assert errors == []
    assert document["asyncapi"] == "3.0.0"


def test_every_event_type_every_aggregate_and_every_worker_is_in_it() -> None:
    document = yaml.safe_load(DOCUMENT.read_text(encoding="utf-8"))
    channels, schemas = document["channels"], document["components"]["schemas"]
    assert set(document["components"]["messages"]) == set(EVENT_TYPES)
    for name in EVENT_TYPES:
        # each payload is the catalogue's JSON Schema of the event
        jsonschema.Draft7Validator.check_schema(schemas[name])
        assert schemas[name]["properties"]["type"]["const"] == name
    for kind in KINDS:
        channel = channels[f"{kind} events"]
        assert channel["address"] == f"ms.{{namespace}}.{kind}.{{id}}"
        assert set(channel["messages"]) == {n for n in EVENT_TYPES if kind_of(n) == kind}
        assert document["operations"][f"{kind} events"]["action"] == "send"
    for worker, (subject, _, _) in WORKERS.items():
        assert channels[worker]["address"] == subject
        assert document["operations"][worker]["action"] == "receive"
    assert set(channels["indexer"]["messages"]) == {
        n for n in EVENT_TYPES if n.startswith("memory.")
    }
