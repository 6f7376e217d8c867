"""``get_history(leaf_id, limit=N)``: the last N messages of the path (issue 15, item 7)."""

from __future__ import annotations

import pytest

from memstream.client import Memstream
from memstream.domain.errors import InvalidInputError

pytestmark = pytest.mark.both_backends


async def test_the_last_n_messages_of_a_path_overlays_counted_once(ms: Memstream) -> None:
    session = ms.session("limited")
    await session.append_messages(
        [{"id": f"m{i}", "role": "user", "content": f"text {i}"} for i in range(10)]
    )
    await session.append_message({"id": "b", "role": "user", "content": "branch"}, "m4")
    whole = await session.get_history("m9")
    assert [m["id"] for m in await session.get_history("m9", limit=3)] == ["m7", "m8", "m9"]
    assert await session.get_history("m9", limit=100) == whole
    assert await session.get_history("m9", limit=0) == []
    assert [m["id"] for m in await session.get_history(limit=2)] == ["m4", "b"]  # latest leaf
    await session.add_compaction("the middle", "m1", "m7")
    overlaid = await session.get_history("m9")
    assert await session.get_history("m9", limit=3) == overlaid[-3:]
    assert overlaid[-3]["id"].startswith("compaction_")
    for bad in (-1, True, 2.0, "3"):
        with pytest.raises(InvalidInputError, match="limit"):
            await session.get_history(limit=bad)  # type: ignore[arg-type]


async def test_the_typed_shapes_describe_what_reads_return(ms: Memstream) -> None:
    import memstream

    session = ms.session("typed")
    await session.append_message({"id": "m1", "role": "user", "content": "typed dicts"})
    message = (await session.get_history())[0]
    assert memstream.SessionMessage.__required_keys__ <= set(message)
    for part in message["parts"]:
        assert memstream.MessagePart.__required_keys__ <= set(part)
        assert set(part) <= set(memstream.MessagePart.__annotations__)
    hit = (await session.search("typed"))[0]
    assert set(hit) == set(memstream.SearchHit.__annotations__)
