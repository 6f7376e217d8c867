"""memstream's NATS header parser gives what nats-py's own parser gives, faster."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.client import Client

from memstream.workers.event_log import MemstreamNatsClient

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
