"""SSE parsing: events, comments, line endings, and pieces cut anywhere."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from kvroute.http.sse import SSEEvent, SSEParser

STREAM = (
    b": ping\r\n\r\n"
    b'data: {"a": 1}\r\n\r\n'
    b"event: update\ndata: line one\ndata: line two\n\n"
    b"id: 7\rretry: 10\rdata:no-space\r\r"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SSEEvent(b'{"a": 1}'),
    SSEEvent(b"line one\nline two", "update"),
    SSEEvent(b"no-space"),
    SSEEvent(b"[DONE]"),
]


def feed_all(pieces: list[bytes]) -> tuple[list[SSEEvent], SSEParser]:
    parser = SSEParser()
    events = [e for p in pieces for e in parser.feed(p)]
    return events, parser


def test_whole_stream() -> None:
    events, parser = feed_all([STREAM])
    assert events == EXPECTED
    assert parser.num_comments == 1
    assert not parser.pending


def test_every_single_split_point_gives_the_same_events() -> None:
    for cut in range(len(STREAM) + 1):
        events, _ = feed_all([STREAM[:cut], STREAM[cut:]])
        assert events == EXPECTED, cut


def test_byte_by_byte() -> None:
    events, parser = feed_all([STREAM[i : i + 1] for i in range(len(STREAM))])
    assert events == EXPECTED
    assert parser.num_comments == 1


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_cuts(cuts: list[int]) -> None:
    bounds = sorted({0, len(STREAM), *cuts})
    pieces = [STREAM[a:b] for a, b in itertools.pairwise(bounds)]
    assert feed_all(pieces)[0] == EXPECTED


def test_crlf_split_between_cr_and_lf_is_one_line_end() -> None:
    events, _ = feed_all([b"data: x\r", b"\n\r", b"\n"])
    assert events == [SSEEvent(b"x")]


def test_event_without_data_dispatches_nothing_and_unterminated_event_is_pending() -> None:
    events, parser = feed_all([b"event: ping\n\n", b"data: half"])
    assert events == []
    assert parser.pending


def test_utf8_cut_mid_character() -> None:
    raw = "data: héllo ✓\n\n".encode()
    events, _ = feed_all([raw[:9], raw[9:]])
    assert events[0].data.decode() == "héllo ✓"
