"""Seeded synthetic conversation messages that state facts, events, preferences and tasks about
varied topics, and questions about them, for the Agent Memory benchmarks."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

PEOPLE = (
    "Alice", "Bruno", "Chen", "Dana", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jonas",
    "Kemi", "Luca", "Maya", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq",
)  # fmt: skip
RELATIONS = (
    "sister", "brother", "cousin", "neighbour", "manager", "colleague", "friend", "aunt",
    "uncle", "flatmate", "mentor", "dentist",
)  # fmt: skip
CITIES = (
    "Lisbon", "Kyoto", "Nairobi", "Oslo", "Montreal", "Valparaiso", "Tbilisi", "Hanoi",
    "Edinburgh", "Cusco", "Ljubljana", "Perth", "Marrakesh", "Reykjavik", "Seville", "Busan",
)  # fmt: skip
HOBBIES = (
    "pottery", "bouldering", "sourdough baking", "the cello", "birdwatching", "chess",
    "woodworking", "salsa dancing", "astrophotography", "beekeeping", "kayaking", "knitting",
    "Mandarin", "watercolour painting", "trail running", "stand-up comedy",
)  # fmt: skip
FOODS = (
    "green tea", "oat milk lattes", "spicy ramen", "dark chocolate", "lentil soup", "mango",
    "sparkling water", "black coffee", "goat cheese", "sushi", "falafel", "blueberry pie",
)  # fmt: skip
ALLERGIES = ("peanuts", "shellfish", "cat hair", "pollen", "penicillin", "latex", "gluten")
PROJECTS = (
    "the billing migration", "the mobile app redesign", "the quarterly report",
    "the data warehouse", "the onboarding wiki", "the search service", "the grant proposal",
    "the kitchen renovation", "the wedding playlist", "the garden shed",
)  # fmt: skip
ITEMS = (
    "a used bicycle", "a standing desk", "noise-cancelling headphones", "a cast-iron pan",
    "a vintage camera", "hiking boots", "a second-hand piano", "an e-reader", "a tent",
)  # fmt: skip
PETS = ("a beagle", "two cats", "a parrot", "a rescue greyhound", "a tortoise", "goldfish")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
CHORES = (
    "renew the passport", "call the landlord about the boiler", "book the car service",
    "send the invoice to the client", "pick up the dry cleaning", "water the tomatoes",
    "file the expense report", "buy a birthday present", "back up the laptop",
)  # fmt: skip


def _one(rng: random.Random) -> tuple[str, str]:
    """(statement, a question it answers)."""
    person, relation, city = rng.choice(PEOPLE), rng.choice(RELATIONS), rng.choice(CITIES)
    hobby, food, project = rng.choice(HOBBIES), rng.choice(FOODS), rng.choice(PROJECTS)
    day, years = rng.choice(DAYS), rng.randint(2, 15)
    templates = (
        (
            f"My {relation} {person} moved to {city} last month and started a new job there "
            f"at a {rng.choice(('hospital', 'bakery', 'startup', 'museum', 'law firm'))}.",
            f"Where did my {relation} {person} move to?",
        ),
        (
            f"I've been learning {hobby} for about {years} months now; I go to a class every "
            f"{day} evening near the old station.",
            f"What hobby am I learning on {day} evenings?",
        ),
        (
            f"I really prefer {food} over {rng.choice(FOODS)}, especially in the mornings "
            f"before work.",
            f"What do I prefer to have in the mornings, {food}?",
        ),
        (
            f"Heads up: I'm allergic to {rng.choice(ALLERGIES)}, so please never suggest "
            f"recipes or places that involve it.",
            "What am I allergic to?",
        ),
        (
            f"Remember to {rng.choice(CHORES)} before {day}; I keep forgetting and it is "
            f"getting urgent.",
            f"What do I need to do before {day}?",
        ),
        (
            f"We finally shipped {project} yesterday after {years} weeks of work, and "
            f"{person} from my team did most of the testing.",
            f"When did we ship {project}?",
        ),
        (
            f"I bought {rng.choice(ITEMS)} from {person} for {rng.randint(20, 900)} euros; "
            f"it was a good deal.",
            f"What did I buy from {person}?",
        ),
        (
            f"Our family has {rng.choice(PETS)}; {person} looks after them when we travel to "
            f"{city}.",
            f"Who looks after our pets when we travel to {city}?",
        ),
        (
            f"Please always answer me in short bullet points when I ask about {project}; long "
            f"paragraphs are hard to read on my phone.",
            f"How should you format answers about {project}?",
        ),
        (
            f"I ran a half marathon in {city} in {rng.randint(1, 3)} hours and "
            f"{rng.randint(1, 59)} minutes, my best time in {years} years.",
            f"How long did my half marathon in {city} take?",
        ),
    )
    return rng.choice(templates)


def messages(count: int, seed: int = 7) -> list[dict[str, object]]:
    """``count`` distinct user messages, an hour apart from 1 January 2026."""
    rng = random.Random(seed)
    texts: dict[str, None] = {}
    while len(texts) < count:
        texts[_one(rng)[0]] = None
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        {"role": "user", "content": text, "timestamp": start + timedelta(hours=index)}
        for index, text in enumerate(texts)
    ]


def questions(count: int, seed: int = 11) -> list[str]:
    """``count`` distinct questions about the same topics (distinct: no query-cache hits)."""
    rng = random.Random(seed)
    found: dict[str, None] = {}
    misses = 0
    while len(found) < count:
        question = _one(rng)[1]
        misses = misses + 1 if question in found else 0
        if misses > 10_000:  # the templates make fewer distinct questions than asked for
            raise ValueError(f"only {len(found)} distinct questions; {count} asked for")
        found[question] = None
    return list(found)
