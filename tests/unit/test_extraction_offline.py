"""The offline extractor: which messages yield memories, and what those memories say."""

from __future__ import annotations

from datetime import UTC, datetime

from memstream.domain.extraction.model import ExtractedMemory, SourceMessage
from memstream.domain.extraction.offline import OfflineExtractor

ANCHOR = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def message(
    content: str, role: str = "user", number: int = 1, at: datetime = ANCHOR
) -> SourceMessage:
    return SourceMessage(id=f"m{number}", session_id="s1", role=role, content=content, timestamp=at)


def conversation(*contents: str, role: str = "user") -> list[SourceMessage]:
    return [message(c, role, i) for i, c in enumerate(contents, start=1)]


def extract(*contents: str) -> list[ExtractedMemory]:
    return OfflineExtractor().extract(conversation(*contents))


def test_info_names_the_extractor_and_its_version() -> None:
    info = OfflineExtractor().info
    assert info.name == "offline"
    assert info.version


def test_filler_yields_nothing() -> None:
    # Given greetings, thanks and acknowledgements
    memories = extract("Hi!", "Thanks so much!", "ok", "Sounds good.", "lol", "Good morning!")
    # Then nothing is memorable
    assert memories == []


def test_pure_questions_yield_nothing() -> None:
    assert extract("What's the weather like in Paris?", "How are you?") == []


def test_an_event_with_a_relative_date() -> None:
    # Given a named speaker's turn about yesterday
    [memory] = extract("Caroline: I went to a LGBTQ support group yesterday and it was powerful.")
    # Then it is an event at 7 May 2023, told in the third person with the date resolved
    assert memory.type == "event"
    assert memory.event_time == datetime(2023, 5, 7, tzinfo=UTC)
    assert memory.summary.startswith("Caroline went to a LGBTQ support group on 7 May 2023")
    assert "yesterday" not in memory.summary
    assert memory.content == (
        "Caroline: I went to a LGBTQ support group yesterday and it was powerful."
    )
    assert memory.source_message_ids == ("m1",)
    assert "caroline" in memory.keywords
    assert "support" in memory.keywords
    assert 3 <= len(memory.queries) <= 5
    assert "When did Caroline go to a LGBTQ support group?" in memory.queries
    assert "What did Caroline do on 7 May 2023?" in memory.queries
    assert memory.topic_key.startswith("caroline:")


def test_user_facts_are_rewritten_in_the_third_person() -> None:
    [memory] = extract("I live in Berlin and my sister lives in Rome.")
    assert memory.type == "fact"
    assert memory.topic_key == "user:lives_in"
    assert memory.summary == "User lives in Berlin and User's sister lives in Rome."
    assert "Where does User live?" in memory.queries
    assert memory.event_time is None


def test_one_memory_per_run_of_sentences_of_one_type() -> None:
    # Given a message with a fact, then an instruction
    memories = extract("I live in Berlin. I work at Siemens. Always answer in German.")
    # Then the two facts form one memory and the instruction another
    assert [m.type for m in memories] == ["fact", "instruction"]
    assert memories[1].topic_key == "agent:answer_language"
    assert memories[1].summary == "Instruction from User: always answer in German."


def test_tasks_carry_their_due_date() -> None:
    [memory] = extract("I need to renew my passport by Friday.")
    assert memory.type == "task"
    assert memory.event_time == datetime(2023, 5, 12, tzinfo=UTC)
    assert memory.summary == "User needs to renew User's passport by 12 May 2023."
    assert "What does User need to do?" in memory.queries


def test_a_short_answer_keeps_the_question_as_context() -> None:
    # Given a question from one speaker and a short answer from the other
    memories = extract("Melanie: What's your favorite book?", "Caroline: Becoming Nicole, by far.")
    # Then the answer's memory holds the question and cites both turns
    [memory] = memories
    assert memory.source_message_ids == ("m1", "m2")
    assert (
        memory.content == "Melanie: What's your favorite book?\nCaroline: Becoming Nicole, by far."
    )
    assert "Becoming Nicole" in memory.summary
    assert "favorite" in memory.keywords


def test_system_messages_count_only_for_instructions() -> None:
    memories = OfflineExtractor().extract(
        [
            message("You are a helpful assistant for ACME Corp.", "system", 1),
            message("Always answer in French.", "system", 2),
        ]
    )
    assert [(m.type, m.source_message_ids) for m in memories] == [("instruction", ("m2",))]


def test_plain_assistant_messages_are_skipped() -> None:
    memories = OfflineExtractor().extract([message("I went to Paris yesterday.", "assistant", 1)])
    assert memories == []


def test_extraction_is_deterministic() -> None:
    # Given the same conversation twice (fresh extractors)
    contents = (
        "Caroline: I went to a support group yesterday.",
        "Melanie: Wow! What was it like?",
        "Caroline: The stories were inspiring. I'm keen on counseling now.",
        "Melanie: I painted a lake sunrise last year. Call me Mel.",
    )
    first = OfflineExtractor().extract(conversation(*contents))
    second = OfflineExtractor().extract(conversation(*contents))
    # Then the output is identical
    assert first == second
    assert len(first) >= 3


def test_summaries_stay_within_300_characters() -> None:
    long_text = "I went to the market yesterday and bought " + "apples and pears and " * 40
    [memory] = extract(long_text)
    assert len(memory.summary) <= 300
    assert memory.summary.endswith("…")


def test_remember_always_yields_exactly_one_memory() -> None:
    extractor = OfflineExtractor()
    for content in ["ok", "", "Thanks!", "My favourite colour is blue", "Remind me to call Bob"]:
        memory = extractor.extract_remembered(content, ANCHOR)
        assert memory.source_message_ids == ()
        assert memory.topic_key
        assert memory.summary or content == ""
        assert 3 <= len(memory.queries) <= 5
    assert extractor.extract_remembered("Remind me to call Bob", ANCHOR).type == "task"
    remembered = extractor.extract_remembered("My favourite colour is blue", ANCHOR)
    assert remembered.topic_key == "user:favorite_color"
    assert remembered.summary == "User's favourite colour is blue"


def test_messages_mixing_types_split_only_on_clear_sentences() -> None:
    # Given a message with chit-chat around one clear instruction
    memories = extract("Rejection stinks, but it's fine. Please always answer in French.")
    # Then the chit-chat stays one memory and the instruction is another
    assert [m.type for m in memories] == ["fact", "instruction"]


def test_forms_of_address_and_interjections_leave_the_summary() -> None:
    [memory] = extract("Jon: Btw, Gina, I had to shut down my bank account last week.")
    assert memory.summary == ("Jon had to shut down Jon's bank account in the week of 1 May 2023.")
    assert "When did Jon have to shut down their bank account?" in memory.queries
    assert memory.event_time == datetime(2023, 5, 1, tzinfo=UTC)


def test_a_yes_answer_to_a_question_is_kept_with_its_question() -> None:
    # Given a yes/no question and an answer that starts with "Yes"
    memories = extract(
        "Melanie: Did you go to the pride parade?",
        "Caroline: Yes, I did. It was amazing and I felt so accepted by everyone there.",
    )
    # Then the answer carries the question in its content and sources
    [memory] = memories
    assert memory.source_message_ids == ("m1", "m2")
    assert "pride" in memory.keywords


def test_a_short_reply_to_an_empty_question_is_filler() -> None:
    memories = OfflineExtractor().extract(
        [
            message("Anything else?", "assistant", 1),
            message("Nope, that's all.", "user", 2),
            message("Is there anything more?", "assistant", 3),
            message("Nah.", "user", 4),
        ]
    )
    assert memories == []
