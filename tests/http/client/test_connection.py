"""The HTTP/1.1 response parser: framing, split pieces, and malformed responses."""

from __future__ import annotations

import pytest

from kvroute.bench.http1 import Failure, ResponseParser, Target, request_bytes
from kvroute.errors import UsageError


class Recorder:
    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.body = b""
        self.ended = False
        self.failure: tuple[Failure, str] | None = None

    def on_head(self, status: int, headers: dict[bytes, bytes], t: float) -> None:
        self.status, self.headers = status, headers

    def on_body(self, data: bytes, t: float) -> None:
        self.body += data

    def on_end(self, t: float) -> None:
        self.ended = True

    def on_failure(self, failure: Failure, detail: str, t: float) -> None:
        self.failure = (failure, detail)


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n"
    b"7;ext=1\r\n, world\r\n"
    b"0\r\nX-Trailer: 1\r\n\r\n"
)


def parse(pieces: list[bytes]) -> tuple[Recorder, ResponseParser]:
    rec = Recorder()
    parser = ResponseParser(rec)
    for p in pieces:
        parser.feed(p, 0.0)
    return rec, parser


def test_chunked_whole_and_split_at_every_point() -> None:
    for cut in range(len(CHUNKED) + 1):
        rec, parser = parse([CHUNKED[:cut], CHUNKED[cut:]])
        assert (rec.status, rec.body, rec.ended, rec.failure) == (
            200,
            b"hello, world",
            True,
            None,
        ), cut
        assert parser.done and parser.keep_alive and not parser.leftover


def test_chunked_byte_by_byte() -> None:
    rec, _ = parse([CHUNKED[i : i + 1] for i in range(len(CHUNKED))])
    assert rec.body == b"hello, world" and rec.ended


def test_content_length_and_connection_close() -> None:
    raw = b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\nConnection: close\r\n\r\nboom"
    rec, parser = parse([raw[:20], raw[20:]])
    assert (rec.status, rec.body, rec.ended) == (500, b"boom", True)
    assert not parser.keep_alive


def test_read_until_close() -> None:
    rec, parser = parse([b"HTTP/1.0 200 OK\r\n\r\nsome", b" body"])
    assert not rec.ended
    parser.eof(1.0)
    assert rec.body == b"some body" and rec.ended and not parser.keep_alive


def test_interim_100_continue_is_skipped() -> None:
    rec, _ = parse([b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"])
    assert (rec.status, rec.body, rec.ended) == (200, b"ok", True)


def test_close_mid_chunked_body_is_a_reset() -> None:
    rec, parser = parse([CHUNKED[:80]])
    parser.eof(1.0)
    assert rec.failure is not None and rec.failure[0] is Failure.RESET


@pytest.mark.parametrize(
    "raw",
    [
        b"SPDY/3 200 OK\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbad header line\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX",
        b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n",
    ],
)
def test_malformed_responses_fail_once(raw: bytes) -> None:
    rec, parser = parse([raw])
    assert rec.failure is not None and rec.failure[0] is Failure.MALFORMED
    assert parser.done and not parser.keep_alive


def test_bytes_after_the_response_make_the_connection_unusable() -> None:
    _, parser = parse([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA"])
    assert parser.leftover


def test_target_and_request_bytes() -> None:
    t = Target.parse("http://127.0.0.1:8080/v1/")
    assert (t.host, t.port, t.tls, t.base_path) == ("127.0.0.1", 8080, False, "")
    raw = request_bytes(t, "/v1/chat/completions", b'{"a":1}', api_key="k")
    assert raw.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n")
    assert b"Authorization: Bearer k\r\n" in raw and raw.endswith(
        b'Content-Length: 7\r\n\r\n{"a":1}'
    )
    assert Target.parse("https://example.org/proxy").base_path == "/proxy"
    with pytest.raises(UsageError):
        Target.parse("ftp://x")
