"""Topic keys: paraphrases share a key (so a newer fact supersedes the older); questions map to
the keys they ask about."""

from __future__ import annotations

import pytest

from memstream.domain.extraction.model import MemoryType
from memstream.domain.extraction.question_topics import query_topic_keys
from memstream.domain.extraction.topics import topic_key
from memstream.domain.extraction.vocabulary import keywords, normalise_word


@pytest.mark.parametrize(
    ("text", "memory_type", "key"),
    [
        ("My favourite colour is blue", "fact", "user:favorite_color"),
        ("Blue is my favorite color", "fact", "user:favorite_color"),
        ("I live in Berlin", "fact", "user:lives_in"),
        ("I work at Google as an engineer", "fact", "user:works_at"),
        ("I work as a nurse", "fact", "user:occupation"),
        ("I'm a teacher", "fact", "user:occupation"),
        ("Call me Sam", "instruction", "user:name"),
        ("My name is Sam", "fact", "user:name"),
        ("Always answer in French", "instruction", "agent:answer_language"),
        ("Please reply in German from now on", "instruction", "agent:answer_language"),
        ("Keep your answers short", "instruction", "agent:response_length"),
        ("Never use emoji", "instruction", "agent:emoji"),
        ("Don't mention the weather", "instruction", "agent:mention_weather"),
        ("Caroline is a counselor", "fact", "caroline:occupation"),
        ("Caroline lives in Boston", "fact", "caroline:lives_in"),
        ("I love painting landscapes", "fact", "user:likes_painting"),
        ("I have two kids", "fact", "user:has_kid"),
        ("My dog's name is Max", "fact", "user:dog_name"),
        ("I'm married", "fact", "user:relationship_status"),
    ],
)
def test_topic_keys(text: str, memory_type: MemoryType, key: str) -> None:
    assert topic_key(text, memory_type) == key


def test_paraphrases_of_where_i_live_share_a_key() -> None:
    # Given three ways of saying where the user lives
    texts = ["I live in Berlin", "I moved to Berlin", "My home is in Berlin", "I'm based in Paris"]
    # Then they all have one key (so the newest supersedes)
    assert {topic_key(t, "fact") for t in texts} == {"user:lives_in"}


def test_two_facts_on_the_same_topic_get_the_same_key() -> None:
    # Given an old and a new fact about the same attribute
    old = topic_key("My favourite colour is blue", "fact")
    new = topic_key("my favorite colors are green now", "fact")
    # Then the keys are equal, and unrelated facts differ
    assert old == new
    assert topic_key("I live in Rome", "fact") != old


def test_the_speaker_names_the_subject() -> None:
    # Given the same sentence from a named speaker
    # Then the key is under the speaker
    assert topic_key("I live in Berlin", "fact", "Caroline") == "caroline:lives_in"
    assert topic_key("I love hiking", "fact", "Mary Ann") == "mary_ann:likes_hiking"


def test_keys_are_never_empty() -> None:
    for text in ["", "!!!", "ok", "The", "Wow."]:
        for memory_type in ("fact", "event", "instruction", "task"):
            owner, _, predicate = topic_key(text, memory_type).partition(":")
            assert owner, (text, memory_type)
            assert predicate, (text, memory_type)


@pytest.mark.parametrize(
    ("query", "keys"),
    [
        ("Where does Caroline live?", ["caroline:lives_in"]),
        ("What is my favourite colour?", ["user:favorite_color"]),
        ("What is my name?", ["user:name"]),
        ("What should you call me?", ["user:name"]),
        ("What is Caroline's relationship status?", ["caroline:relationship_status"]),
        ("What does Melanie do for a living?", ["melanie:occupation", "melanie:works_at"]),
        ("Where do I work?", ["user:works_at", "user:occupation"]),
        ("What language should you answer in?", ["agent:answer_language"]),
        ("How old is John?", ["john:age"]),
        ("What did Caroline research?", []),
    ],
)
def test_query_topic_keys(query: str, keys: list[str]) -> None:
    assert query_topic_keys(query) == keys


def test_question_and_statement_keys_meet() -> None:
    # Given a stored fact and the question asking about it
    stored = topic_key("My favourite ice cream flavour is mint", "fact")
    # Then the question's keys include the fact's key
    assert stored in query_topic_keys("What is my favorite ice cream flavor?")


def test_normalisation_and_keywords() -> None:
    assert normalise_word("colours") == "color"
    assert normalise_word("children") == "child"
    assert normalise_word("stories") == "story"
    assert normalise_word("glass") == "glass"
    # Keywords: distinct content words in order, possessives and relative time words dropped
    assert keywords("Caroline's dog and the dog's ball, yesterday!") == ["caroline", "dog", "ball"]
    assert len(keywords(" ".join(f"word{i}" for i in range(30)))) == 12
