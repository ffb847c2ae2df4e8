from __future__ import annotations

import json

from kvroute.gateway.proxy.sse_relay import SseRelay

CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
USAGE_ONLY = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
USAGE_ON_LAST = b'data: {"choices":[{"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":3},"timings":{"cache_n":2}}\n\n'
DONE = b"data: [DONE]\n\n"


def run(relay: SseRelay, pieces: list[bytes]) -> bytes:
    return b"".join(relay.feed(p) for p in pieces) + relay.finish()


def test_untouched_without_usage() -> None:
    assert run(SseRelay(strip_usage=True), [CHUNK, CHUNK, DONE]) == CHUNK + CHUNK + DONE


def test_strips_the_usage_only_chunk_and_keeps_the_reading() -> None:
    relay = SseRelay(strip_usage=True)
    assert run(relay, [CHUNK, USAGE_ONLY + DONE]) == CHUNK + DONE
    assert relay.usage == {"prompt_tokens": 3, "completion_tokens": 1}


def test_removes_usage_riding_on_a_chunk_with_choices() -> None:
    relay = SseRelay(strip_usage=True)
    out = run(relay, [USAGE_ON_LAST, DONE])
    first = json.loads(out.split(b"\n\n")[0][6:])
    assert "usage" not in first and first["timings"] == {"cache_n": 2}
    assert relay.usage_event is not None and relay.usage_event["timings"] == {"cache_n": 2}


def test_keeps_usage_when_the_client_asked() -> None:
    relay = SseRelay(strip_usage=False)
    assert run(relay, [USAGE_ONLY, DONE]) == USAGE_ONLY + DONE
    assert relay.usage is not None


def test_events_split_anywhere_arrive_whole() -> None:
    stream = CHUNK + USAGE_ONLY + DONE
    for cut in range(1, len(stream)):
        relay = SseRelay(strip_usage=True)
        out = [relay.feed(stream[:cut]), relay.feed(stream[cut:]), relay.finish()]
        assert b"".join(out) == CHUNK + DONE
        assert all(not piece or piece.endswith(b"\n\n") for piece in out)


def test_crlf_and_cr_framed_events_are_forwarded_at_once() -> None:
    # SSE allows CRLF and lone CR line ends; an event so framed is complete when its
    # blank line arrives and must not wait in the relay for more bytes.
    for end in (b"\r\n", b"\r", b"\n\r\n"):
        event = CHUNK[:-2] + end + (b"" if end == b"\n\r\n" else end)
        relay = SseRelay(strip_usage=True)
        assert relay.feed(event) == event


def test_crlf_framed_usage_chunk_is_read_and_stripped() -> None:
    relay = SseRelay(strip_usage=True)
    crlf = CHUNK.replace(b"\n", b"\r\n")
    usage = USAGE_ONLY.replace(b"\n", b"\r\n")
    done = DONE.replace(b"\n", b"\r\n")
    assert run(relay, [crlf, usage + done]) == crlf + done
    assert relay.usage == {"prompt_tokens": 3, "completion_tokens": 1}
    riding = SseRelay(strip_usage=True)
    out = riding.feed(USAGE_ON_LAST.replace(b"\n", b"\r\n"))
    assert out.endswith(b"\r\n\r\n") and b"usage" not in out


def test_crlf_events_split_anywhere_arrive_whole() -> None:
    stream = (CHUNK + USAGE_ONLY + DONE).replace(b"\n", b"\r\n")
    want = (CHUNK + DONE).replace(b"\n", b"\r\n")
    for cut in range(1, len(stream)):
        relay = SseRelay(strip_usage=True)
        out = [relay.feed(stream[:cut]), relay.feed(stream[cut:]), relay.finish()]
        assert b"".join(out) == want
