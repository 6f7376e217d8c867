"""The offline extractor: deterministic memories from a conversation without a model service."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from memstream.domain.extraction.classify import (
    CONFIDENT_MARGIN,
    best_type,
    classify,
    margin,
    rule_scores,
    type_scores,
)
from memstream.domain.extraction.dates import find_time_mentions, render_mention
from memstream.domain.extraction.model import (
    MEMORY_TYPES,
    Embed,
    ExtractedMemory,
    ExtractorInfo,
    MemoryType,
    SourceMessage,
)
from memstream.domain.extraction.queries import search_queries
from memstream.domain.extraction.sentences import split_sentences
from memstream.domain.extraction.summaries import clip, split_speaker, summarise
from memstream.domain.extraction.topics import subject_slug, topic_key
from memstream.domain.extraction.vocabulary import content_words, keywords

VERSION: Final = "1"
MAX_CONTENT_CHARS: Final = 4_000
# An answer this short (in words) to the previous turn's question keeps the question as context.
SHORT_ANSWER_WORDS: Final = 15
MIN_CONTENT_WORDS: Final = 2
# A sentence of a clearly different type (by this score lead) starts a memory of its own.
SPLIT_MARGIN: Final = 0.4

_ANSWER_START: Final = re.compile(
    r"^(?:yes|yeah|yep|yup|no|nope|nah|sure|definitely|absolutely|totally|of course|not yet|"
    r"it was|i did|i do|i have)\b",
    re.IGNORECASE,
)

_FILLER_MESSAGE: Final = re.compile(
    r"^(?:hi|hey|hello|hiya|yo|thanks|thank you|thx|ty|ok|okay|k|sure|great|cool|nice|lol|haha|"
    r"bye|goodbye|good night|good morning|got it|sounds good|awesome|wow|np|no problem|"
    r"you're welcome|welcome|cheers|alright|all right|yes|yeah|yep|no|nope|right|indeed|"
    r"perfect|noted|agreed|same|me too|great thanks|ok thanks|okay thanks|that's all|"
    r"that's it|nothing else|all good|not really|no thanks|nope that's all|no that's all)"
    r"(?:[\s,]+(?:so much|a lot|again|there|everyone|all|man|dude))*[\s!.,?:;)(]*$",
    re.IGNORECASE,
)
_FILLER_SENTENCE: Final = re.compile(
    r"^(?:(?:hey|hi|hello|oh|wow|aw+|yay|omg|haha|lol)\b.{0,30}[!.]?$|thanks\b|thank you\b|"
    r"congrats|congratulations|good luck|take care|talk (?:to you )?(?:soon|later)|see you|bye|"
    r"have (?:a|fun)|that's (?:so |really |very |super )?(?:great|awesome|cool|sweet|amazing|"
    r"nice|wonderful|lovely|fantastic|good|true|interesting|exciting|tough|hard)\b.{0,25}$|"
    r"(?:i'm|i am) (?:so )?(?:glad|happy) (?:to hear|for you)|sounds (?:great|good|fun|awesome|"
    r"amazing|lovely|like)|no problem|you're welcome|me too|same here|good to (?:see|hear)|"
    r"nice to (?:see|hear|meet)|how (?:are|have) you|what about you|you too|keep it up|"
    r"good for you|i see\b|i agree\b|totally agree|exactly\b|no worries|long time no|"
    r"(?:it|that|this|your \w+(?: \w+)?) (?:really )?means? (?:so much|a lot)[\w\s,]{0,12}[.!]*$|"
    r"you got this|"
    r"you can do it|i'm here for you|i (?:really )?appreciate (?:it|that|you|your)|"
    r"(?:so )?sorry (?:to hear|about)|(?:i )?hope (?:you|it|that|things|everything))",
    re.IGNORECASE,
)
_QUESTION: Final = re.compile(r"\?[\"'”’)]*$")


@dataclass(frozen=True, slots=True)
class _Speaker:
    name: str  # display name: "Caroline", "User"
    key: str  # topic-key subject: "caroline", "user"
    named: bool  # named by a "Name: " prefix (a conversation between people)


class OfflineExtractor:
    """Extracts typed memories from conversations with rules (and, optionally, an embedding
    function for prototype classification). Deterministic: the same input gives the same
    memories, so re-extraction after a replay changes nothing."""

    info: ExtractorInfo

    def __init__(self) -> None:
        self.info = ExtractorInfo(name="offline", version=VERSION)

    def extract(
        self, messages: Sequence[SourceMessage], embed: Embed | None = None
    ) -> list[ExtractedMemory]:
        """The memories of a conversation, in message order.

        Greetings, thanks, filler and pure questions yield nothing; each informative message
        yields one memory per run of consecutive sentences of the same type. Assistant
        messages count only under a "Name: " prefix (a named participant); system messages
        only for their instructions.
        """
        memories: list[ExtractedMemory] = []
        previous: SourceMessage | None = None
        embed = None if embed is None else _batched(embed, messages)
        for message in messages:
            memories.extend(self._from_message(message, previous, embed))
            previous = message
        return memories

    def extract_remembered(
        self, content: str, timestamp: datetime, embed: Embed | None = None
    ) -> ExtractedMemory:
        """Exactly one memory for an explicit ``remember(content)``, never skipped."""
        name, body = split_speaker(content)
        speaker = _speaker("user", name)
        sentences = split_sentences(body) or [body.strip() or content]
        informative = [s for s in sentences if _informative(s)] or sentences
        memory_type = classify(" ".join(informative), embed, speaker.named)
        return self._memory(memory_type, informative, content, (), speaker, timestamp, "")

    def _from_message(
        self, message: SourceMessage, previous: SourceMessage | None, embed: Embed | None
    ) -> list[ExtractedMemory]:
        name, body = split_speaker(message.content)
        if message.role == "assistant" and name is None:
            return []
        speaker = _speaker(message.role, name)
        if _FILLER_MESSAGE.match(body.strip()):
            return []
        sentences = split_sentences(body)
        informative = [s for s in sentences if _informative(s)]
        question = _asked(previous, message)
        answers = question is not None and (
            len(body.split()) <= SHORT_ANSWER_WORDS or bool(_ANSWER_START.match(body.strip()))
        )
        if not informative and answers:
            informative = [s for s in sentences if not _QUESTION.search(s)]
        if not informative:
            return []
        context = question if answers else None
        content = message.content if context is None else f"{context.content}\n{message.content}"
        ids = (message.id,) if context is None else (context.id, message.id)
        question_text = "" if context is None else _question_sentence(context)
        short = len(body.split()) <= SHORT_ANSWER_WORDS
        runs: list[tuple[MemoryType, list[str]]] = []
        per_sentence = [type_scores(s, embed, speaker.named) for s in informative]
        # The message's type: its sentences' scores, each weighted by how clear it is.
        overall = best_type(
            {t: sum(margin(sc) * sc[t] for sc in per_sentence) for t in MEMORY_TYPES}
        )
        for sentence, scores in zip(informative, per_sentence, strict=True):
            # A sentence leaves the message's type only when its own type is clear, and joins
            # an instruction or a task only when it is one itself.
            memory_type = best_type(scores)
            if margin(scores) < SPLIT_MARGIN and overall in {"fact", "event"}:
                memory_type = overall
            if runs and runs[-1][0] == memory_type:
                runs[-1][1].append(sentence)
            else:
                runs.append((memory_type, [sentence]))
        memories: list[ExtractedMemory] = []
        for memory_type, run in runs:
            if message.role == "system" and memory_type != "instruction":
                continue
            memory = self._memory(
                memory_type, run, content, ids, speaker, message.timestamp, question_text, short
            )
            if all(m.summary != memory.summary for m in memories):
                memories.append(memory)
        return memories

    def _memory(
        self,
        memory_type: MemoryType,
        sentences: list[str],
        content: str,
        ids: tuple[str, ...],
        speaker: _Speaker,
        anchor: datetime,
        question: str,
        short_answer: bool = True,
    ) -> ExtractedMemory:
        text = " ".join(sentences)
        key = topic_key(text, memory_type, speaker.key)
        mentions = find_time_mentions(text, anchor)
        event_time = mentions[0].start if mentions and memory_type != "instruction" else None
        when = render_mention(mentions[0]) if mentions else None
        asked = question if short_answer else ""
        summary = _summary(memory_type, sentences, speaker.name, anchor, asked)
        words = keywords(f"{speaker.name if speaker.named else ''} {text} {question}")
        return ExtractedMemory(
            type=memory_type,
            topic_key=key,
            summary=summary,
            content=clip(content, MAX_CONTENT_CHARS),
            keywords=tuple(words),
            queries=search_queries(memory_type, key, speaker.name, text, words, when),
            source_message_ids=ids,
            event_time=event_time,
        )


def _batched(embed: Embed, messages: Sequence[SourceMessage]) -> Embed:
    """``embed`` with the sentences of ``messages`` that the rules are not sure of embedded ahead
    in one call (a model call per sentence costs several times a batched one; a sentence the
    rules are sure of is never embedded); any other text is embedded when asked."""
    unsure: dict[str, None] = {}
    for message in messages:
        name, body = split_speaker(message.content)
        for sentence in split_sentences(body):
            if margin(rule_scores(sentence, name is not None)) < CONFIDENT_MARGIN:
                unsure.setdefault(sentence, None)
    sentences = list(unsure)
    known = dict(zip(sentences, embed(sentences), strict=True)) if sentences else {}

    def ahead(texts: Sequence[str]) -> Sequence[Sequence[float]]:
        missing = [t for t in texts if t not in known]
        if missing:
            known.update(zip(missing, embed(missing), strict=True))
        return [known[t] for t in texts]

    return ahead


def _speaker(role: str, name: str | None) -> _Speaker:
    if name is not None:
        return _Speaker(name=name, key=subject_slug(name), named=True)
    return _Speaker(name="System" if role == "system" else "User", key="user", named=False)


def _summary(
    memory_type: MemoryType, sentences: list[str], name: str, anchor: datetime, question: str
) -> str:
    if question:
        # The question stays as asked: its "I" is the other speaker.
        asked = clip(question.strip(), 120)
        return summarise(sentences, name, anchor, prefix=f'Asked "{asked}", {name} said: ')
    if memory_type == "instruction":
        called = re.match(r"^(?:please\s+)?call me\s+([\w'’-]+)", sentences[0], re.IGNORECASE)
        if called and len(sentences) == 1:
            return f"{name} wants to be called {called[1]}."
        return summarise(sentences, name, anchor, prefix=f"Instruction from {name}: ")
    return summarise(sentences, name, anchor)


def _informative(sentence: str) -> bool:
    text = sentence.strip()
    if _QUESTION.search(text) or _FILLER_SENTENCE.match(text):
        return False
    return len(content_words(text)) >= MIN_CONTENT_WORDS or bool(re.search(r"\d", text))


def _question_sentence(message: SourceMessage) -> str:
    """The last question a message asks (its whole text if none ends with "?")."""
    body = split_speaker(message.content)[1]
    questions = [s for s in split_sentences(body) if _QUESTION.search(s)]
    return questions[-1] if questions else body


def _asked(previous: SourceMessage | None, message: SourceMessage) -> SourceMessage | None:
    """The previous message, if it asked a question of someone else."""
    if previous is None or previous.role == "system":
        return None
    if split_speaker(previous.content)[0] == split_speaker(message.content)[0] and (
        previous.role == message.role
    ):
        return None
    if "?" not in previous.content:
        return None
    # "Anything else?" asks nothing a short answer could inform.
    informative = len(content_words(_question_sentence(previous))) >= MIN_CONTENT_WORDS
    return previous if informative else None
