"""Events of every type, as the domain decides them (for tests of the event contract)."""

from __future__ import annotations

from typing import Any

from support.messages import msg

from memstream.domain.context import ContextDocument, SearchIndex, document_id
from memstream.domain.session import Session


def every_event() -> list[Any]:
    """One event of every type the domain decides, in the order a session would have them."""
    session = Session.empty("default", "s")
    events: list[Any] = []

    def take(decided: list[Any]) -> None:
        for event in decided:
            event.mutate(session)
            events.append(event)

    take(session.append_message(msg("m1", 'héllo "quoted" ✓')))
    take(session.append_messages([msg("m2"), msg("m3")]))
    take(session.update_message(msg("m2", "changed")))
    take(session.add_compaction("a summary", "m1", "m2"))
    take(session.freeze_system_prompt("the prompt"))
    take(session.load_skill("docs", "a"))
    take(session.unload_skill("docs", "a"))
    take(session.delete_messages(["m3"]))
    take(session.clear_messages())
    document = ContextDocument.empty("default", document_id("notes", "s"))
    events += document.replace("some notes")
    index = SearchIndex.empty("default", "kb")
    events += index.index("k1", "an entry")
    return events
