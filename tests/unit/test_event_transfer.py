"""Export lines read back for import (issue 16, item 1): batches never split what a source
wrote all or none; headers come back as stored, or rebuilt from an older export's audit view."""

from __future__ import annotations

import json

import pytest

from memstream.domain.errors import InvalidInputError
from memstream.workers.admin import event_transfer
from memstream.workers.admin.event_transfer import batches, parse_line


def _line(seq: int, batch: str | None = None, **extra: object) -> str:
    headers = {"Ms-Schema": "1", "Nats-Msg-Id": f"cmd{seq}", "Ms-Actor": "a"}
    if batch is not None:
        headers |= {"Nats-Batch-Id": batch, "Nats-Batch-Sequence": "1"}
    return json.dumps(
        {
            "seq": seq,
            "subject": "src.default.session.s1",
            "nats_headers": headers | {"Nats-Expected-Last-Subject-Sequence": "3"},
            "payload": {"type": "session.message_appended", "version": seq, "text": "ü"},
            **extra,
        },
        ensure_ascii=False,
    )


def test_a_line_keeps_its_headers_and_payload_bytes_under_the_targets_prefix() -> None:
    event = parse_line(_line(4), 9, "ms")
    assert event.subject == "ms.default.session.s1"
    assert event.headers == {"Ms-Schema": "1", "Nats-Msg-Id": "cmd4", "Ms-Actor": "a"}
    assert event.payload == '{"type":"session.message_appended","version":4,"text":"ü"}'.encode()
    assert (event.line, event.msg_id, event.group) == (9, "cmd4", "cmd4")


def test_batches_cut_between_groups_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_transfer, "IMPORT_BATCH", 3)
    events = [
        parse_line(_line(seq, batch="b1" if seq in (2, 3, 4, 5) else None), seq, "ms")
        for seq in range(1, 9)
    ]
    cut = [[e.line for e in batch] for batch in batches(events)]
    assert cut == [[1, 2, 3, 4, 5], [6, 7, 8]]
    assert [line for batch in cut for line in batch] == list(range(1, 9))


def test_an_older_exports_audit_view_rebuilds_the_headers() -> None:
    line = json.dumps(
        {
            "subject": "ms.default.session.s1",
            "headers": {
                "command_id": "c1",
                "causation_id": "c0",
                "correlation_id": "c1",
                "actor": "agent",
                "msg_id": "c1:1",
                "schema": "1",
            },
            "payload": {"type": "session.message_appended"},
        }
    )
    event = parse_line(line, 1, "ms")
    assert event.headers == {
        "Ms-Schema": "1",
        "Nats-Msg-Id": "c1:1",
        "Ms-Actor": "agent",
        "Ms-Causation-Id": "c0",
    }


def test_a_payload_that_was_not_json_goes_back_as_its_text() -> None:
    line = json.dumps(
        {"subject": "ms.d.session.s", "nats_headers": {"Nats-Msg-Id": "x"}, "payload": "{oops"}
    )
    assert parse_line(line, 1, "ms").payload == b"{oops"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[1]", "a JSON list, not an object"),
        ('{"subject": "ms.d.session.s"}', "no 'payload'"),
        ('{"subject": "ms.d.*.s", "payload": {}}', "is not <prefix>"),
        ('{"subject": "ms.d.s.s", "payload": {}, "nats_headers": {"a": 1}}', "object of strings"),
        ('{"subject": "ms.d.s.s", "payload": {}}', "no 'nats_headers'"),
    ],
)
def test_bad_lines_name_the_line_and_the_fault(text: str, reason: str) -> None:
    with pytest.raises(InvalidInputError, match="import line 7") as caught:
        parse_line(text, 7, "ms")
    assert reason in str(caught.value)
