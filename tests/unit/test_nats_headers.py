"""memstream's NATS header parser gives what nats-py's own parser gives, faster."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.errors import BadHeaderError

from memstream.workers.log.nats_client import MemstreamNatsClient

_names = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1)
_values = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=40
)


def test_typical_event_headers_parse_the_same() -> None:
    raw = (
        b"Ms-Topic: memstream.domain.session:Session.MessageAppended\r\n"
        b"Ms-Originator-Version: 12\r\nNats-Msg-Id:  abc \r\nBad Key: x\r\n"
        b"Caf\xc3\xa9: skipped\r\nEmpty:\r\nX-Tab:\tv\t\r\nMs-Actor: b\xc3\xa9a\r\n\r\n"
    )
    assert MemstreamNatsClient._parse_header_lines(raw) == Client._parse_header_lines(raw)


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_any_bytes_parse_the_same(raw: bytes) -> None:
    # Whatever the block holds (control bytes, bare LF, non-ASCII names, missing colons)
    assert MemstreamNatsClient._parse_header_lines(raw) == Client._parse_header_lines(raw)


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([b"Name", b" N\x1ce ", b"A b", b"\xc3\xa9", b"", b"\tT\x0b"]),
            st.binary(max_size=20),
        ),
        max_size=8,
    )
)
def test_odd_names_and_byte_values_parse_the_same(pairs: list[tuple[bytes, bytes]]) -> None:
    raw = b"".join(n + b":" + v + b"\r\n" for n, v in pairs) + b"\r\n"
    assert MemstreamNatsClient._parse_header_lines(raw) == Client._parse_header_lines(raw)


@settings(max_examples=300)
@given(st.lists(st.tuples(_names, _values), max_size=12))
def test_any_well_formed_header_block_parses_the_same(pairs: list[tuple[str, str]]) -> None:
    # Given header lines as NATS sends them (names without ":"; values without line breaks)
    pairs = [(name.replace(":", ""), value) for name, value in pairs if name.replace(":", "")]
    raw = b"".join(f"{n}: {v}\r\n".encode() for n, v in pairs) + b"\r\n"
    # Then both parsers agree exactly
    assert MemstreamNatsClient._parse_header_lines(raw) == Client._parse_header_lines(raw)


async def _sent(client: Client, headers: dict[str, str] | None) -> bytes:
    """The protocol bytes ``client`` queues for one publish (nothing is connected)."""
    sent: list[bytes] = []

    async def capture(command: bytes, priority: bool = False) -> None:
        sent.append(command)

    client._send_command = capture  # type: ignore[method-assign]
    await client._send_publish("ms.default.session.s", "_INBOX.x", b'{"a":1}', 7, headers)
    assert client.stats["out_msgs"] == 1
    assert client.stats["out_bytes"] == 7
    return b"".join(sent)


_header_names = st.text(
    alphabet=st.sampled_from("ABCxyz-_.!#$%&'*+^`|~09 \t"), min_size=0, max_size=12
)


@settings(max_examples=300)
@given(st.dictionaries(_header_names, st.text(alphabet=st.characters(blacklist_categories=("Cs",)),
                                              max_size=30), max_size=12))  # fmt: skip
async def test_publish_sends_the_bytes_nats_py_sends(headers: dict[str, str]) -> None:
    # Given any header dict (names with spaces or odd characters, values with CR/LF/blanks)
    try:
        expected: bytes | type[Exception] = await _sent(Client(), headers)
    except BadHeaderError:
        expected = BadHeaderError
    # Then our client queues exactly the same command, or refuses the same headers
    ours = MemstreamNatsClient()
    for _ in range(2):  # the second time from its cache of validated names
        if expected is BadHeaderError:
            with pytest.raises(BadHeaderError):
                await _sent(ours, headers)
        else:
            ours.stats["out_msgs"] = ours.stats["out_bytes"] = 0
            assert await _sent(ours, headers) == expected


async def test_typical_event_headers_and_no_headers_publish_the_same() -> None:
    event = {
        "Ms-Topic": "memstream.domain.session:Session.MessageAppended",
        "Ms-Originator-Version": "12",
        "Nats-Msg-Id": " abc\r\n ",
        "Ms-Actor": "bé a",
    }
    assert await _sent(MemstreamNatsClient(), event) == await _sent(Client(), event)
    assert await _sent(MemstreamNatsClient(), None) == await _sent(Client(), None)
    with pytest.raises(BadHeaderError):
        await _sent(MemstreamNatsClient(), {"Bad Key": "x"})
