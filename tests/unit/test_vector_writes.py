"""What the indexer embeds of a memory (projections/vector_projector.py)."""

from __future__ import annotations

from memstream.projections.vector_projector import TEXT_MAX_CHARS, memory_text

QUERIES = ["Where does Ada live?", "Where did Ada move to?"]


def test_a_memory_from_messages_is_embedded_without_its_content() -> None:
    # Its content is the messages' text, which have vectors of their own (mapped back to the
    # memory by recall): the memory's vector holds what extraction added.
    memory = {
        "summary": "Ada lives in Lisbon.",
        "queries": QUERIES,
        "content": "Ada: I moved to Lisbon last spring and I love it here.",
        "source_message_ids": ["m1"],
    }
    assert (
        memory_text(memory) == "Ada lives in Lisbon.\nWhere does Ada live?\nWhere did Ada move to?"
    )


def test_a_remembered_memory_is_embedded_with_its_content() -> None:
    memory = {
        "summary": "Ada lives in Lisbon.",
        "queries": QUERIES,
        "content": "Ada moved to Lisbon in 2024.",
        "source_message_ids": [],
    }
    text = memory_text(memory)
    assert text.startswith("Ada lives in Lisbon.\nWhere does Ada live?")
    assert text.endswith("\nAda moved to Lisbon in 2024.")


def test_the_embedded_text_is_cut_to_what_the_model_reads() -> None:
    memory = {"summary": "s " * 3000, "queries": [], "content": "c", "source_message_ids": []}
    assert len(memory_text(memory)) == TEXT_MAX_CHARS
