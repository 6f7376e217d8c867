"""Write ``docs/schemas/<type>.schema.json``, the JSON Schema of every event type of the public
event contract (version 1), from the field table below: ``python tools/event_schemas.py``.

``tests/unit/test_event_catalogue.py`` checks that the schemas, ``docs/events.md`` and the
events the code writes agree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "docs" / "schemas"

STRING: dict[str, Any] = {"type": "string"}
NULLABLE_STRING: dict[str, Any] = {"type": ["string", "null"]}
MESSAGE: dict[str, Any] = {
    "type": "object",
    "description": "The stored message: its id, role and parts, and any other fields it had.",
    "required": ["id", "role", "parts"],
    "properties": {
        "id": STRING,
        "role": STRING,
        "parts": {"type": "array", "items": {"type": "object"}},
    },
}
SESSION = {"session_id": STRING}
PROFILE = {"profile": STRING}
RAW_MESSAGE: dict[str, Any] = {
    "type": "object",
    "description": "A raw message of an ingest: its content address, role, text and time.",
    "additionalProperties": False,
    "required": ["id", "role", "content", "timestamp"],
    "properties": {
        "id": STRING,
        "role": {"enum": ["system", "user", "assistant"]},
        "content": STRING,
        "timestamp": {"type": "string", "format": "date-time"},
    },
}
MEMORY: dict[str, Any] = {
    "type": "object",
    "description": "One extracted memory.",
    "additionalProperties": False,
    "required": [
        "id",
        "type",
        "topic_key",
        "summary",
        "content",
        "keywords",
        "queries",
        "source_message_ids",
        "event_time",
        "session_id",
    ],
    "properties": {
        "id": STRING,
        "type": {"enum": ["fact", "event", "instruction", "task"]},
        "topic_key": STRING,
        "summary": STRING,
        "content": STRING,
        "keywords": {"type": "array", "items": STRING},
        "queries": {"type": "array", "items": STRING},
        "source_message_ids": {"type": "array", "items": STRING},
        "event_time": {"type": ["string", "null"], "format": "date-time"},
        "session_id": NULLABLE_STRING,
    },
}
COUNT: dict[str, Any] = {"type": "integer", "minimum": 0}

FIELDS: dict[str, dict[str, dict[str, Any]]] = {
    "session.message_appended": {**SESSION, "parent_id": NULLABLE_STRING, "message": MESSAGE},
    "session.messages_appended": {
        **SESSION,
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["parent_id", "message"],
                "properties": {"parent_id": NULLABLE_STRING, "message": MESSAGE},
            },
        },
    },
    "session.message_updated": {**SESSION, "message": MESSAGE},
    "session.messages_deleted": {
        **SESSION,
        "message_ids": {"type": "array", "items": STRING},
    },
    "session.messages_cleared": {**SESSION},
    "session.compaction_added": {
        **SESSION,
        "compaction_id": STRING,
        "summary": STRING,
        "from_message_id": STRING,
        "to_message_id": STRING,
    },
    "session.system_prompt_frozen": {**SESSION, "prompt": STRING, "refreshed": {"type": "boolean"}},
    "session.system_prompt_cleared": {**SESSION},
    "session.skill_loaded": {**SESSION, "label": STRING, "key": STRING},
    "session.skill_unloaded": {**SESSION, "label": STRING, "key": STRING},
    "context.block_written": {
        "key": STRING,
        "label": STRING,
        "session_id": NULLABLE_STRING,
        "content": STRING,
    },
    "context.block_deleted": {"key": STRING, "label": STRING, "session_id": NULLABLE_STRING},
    "context.search_entry_indexed": {"key": STRING, "entry_key": STRING, "content": STRING},
    "registry.session_created": {
        **SESSION,
        "name": STRING,
        "model": NULLABLE_STRING,
        "source": NULLABLE_STRING,
        "parent_session_id": NULLABLE_STRING,
        "forked_from_message_id": NULLABLE_STRING,
    },
    "registry.session_renamed": {**SESSION, "name": STRING},
    "registry.usage_added": {
        **SESSION,
        "input_tokens": COUNT,
        "output_tokens": COUNT,
        "cost": {"type": "number", "minimum": 0},
    },
    "registry.session_ended": {**SESSION, "end_reason": STRING},
    "registry.session_deleted": {**SESSION},
    "memory.profile_created": {**PROFILE},
    "memory.conversation_ingested": {
        **PROFILE,
        "ingest_id": STRING,
        "session_id": STRING,
        "part": {"type": "integer", "minimum": 1},
        "parts": {"type": "integer", "minimum": 1},
        "messages": {"type": "array", "minItems": 1, "items": RAW_MESSAGE},
    },
    "memory.memory_remembered": {
        **PROFILE,
        "memory_id": STRING,
        "content": STRING,
        "session_id": NULLABLE_STRING,
    },
    "memory.memories_extracted": {
        **PROFILE,
        "source": STRING,
        "extractor": {
            "type": "object",
            "description": "Who extracted: name, version (and error, for a failed source).",
            "required": ["name", "version"],
            "properties": {"name": STRING, "version": STRING, "error": STRING},
        },
        "memories": {"type": "array", "items": MEMORY},
    },
    "memory.memory_superseded": {**PROFILE, "memory_id": STRING, "superseded_by": STRING},
    "memory.memory_deleted": {
        **PROFILE,
        "memory_id": STRING,
        "message_ids": {"type": "array", "items": STRING},
    },
    "memory.session_forgotten": {**PROFILE, "session_id": STRING},
    "memory.profile_deleted": {**PROFILE},
    "purge.events_purged": {
        "sequences": {"type": "array", "items": {"type": "integer", "minimum": 1}},
        "subjects": {"type": "integer", "minimum": 0},
        "events": {"type": "integer", "minimum": 0},
        "sessions": {"type": "integer", "minimum": 0},
        "profiles": {"type": "integer", "minimum": 0},
        "older_than": STRING,
        "deleted_before": {"type": "string", "format": "date-time"},
    },
}


def schema(name: str) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "type": {"const": name},
        "version": {"type": "integer", "minimum": 1},
        "time": {"type": "string", "format": "date-time"},
        **FIELDS[name],
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://memstream.dev/schemas/events/v1/{name}.schema.json",
        "title": name,
        "description": f"Payload of a {name} event (event contract version 1; docs/events.md).",
        "type": "object",
        "additionalProperties": False,
        "required": list(properties),
        "properties": properties,
    }


def main() -> None:
    SCHEMAS.mkdir(parents=True, exist_ok=True)
    for name in FIELDS:
        text = json.dumps(schema(name), indent=2) + "\n"
        (SCHEMAS / f"{name}.schema.json").write_text(text)


if __name__ == "__main__":
    main()
