"""The OpenAI stream reader: which chunk is the first token, usage, timings, faults."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kvroute.bench.client.stream_sink import StreamSink
from kvroute.bench.results.record import ErrorKind, Outcome, RequestRecord
from kvroute.http.client import FailureKind, UpstreamFailure

SSE = {"content-type": "text/event-stream"}


def ev(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def delta(**d: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}


def run_sink(
    pieces: list[tuple[float, bytes]],
    *,
    status: int = 200,
    headers: dict[str, str] = SSE,
    keep_text: bool = False,
    cancel: int | None = None,
) -> tuple[RequestRecord, list[str]]:
    async def go() -> tuple[RequestRecord, list[str]]:
        rec = RequestRecord(index=0, scheduled_s=0.0, sent_s=0.1)
        aborted: list[str] = []
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        sink = StreamSink(rec, done, t0=100.0, keep_text=keep_text, cancel_after_chunks=cancel)
        sink.abort = lambda: aborted.append("abort")
        sink.on_head(status, headers, 100.2)
        for t, data in pieces:
            sink.on_body(data, t)
        sink.on_end(110.0)
        assert done.done()
        return rec, aborted

    return asyncio.run(go())


def test_role_only_chunk_is_not_the_first_token_and_usage_is_read() -> None:
    rec, _ = run_sink(
        [
            (100.3, ev(delta(role="assistant", content=None))),
            (100.5, ev(delta(content="")) + ev(delta(content="Hi"))),
            (100.7, ev(delta(content=" there"))),
            (100.8, ev({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})),
            (
                100.9,
                ev(
                    {
                        "choices": [],
                        "usage": {"prompt_tokens": 30, "completion_tokens": 3},
                        "timings": {"cache_n": 20, "prompt_n": 10},
                    }
                )
                + ev(b"[DONE]"),
            ),
        ]
    )
    assert rec.outcome is Outcome.OK
    assert abs(rec.first_byte_s - 0.2) < 1e-9 and abs(rec.first_token_s - 0.5) < 1e-9
    assert [round(t, 6) for t in rec.chunk_times_s] == [0.5, 0.7]
    assert (rec.prompt_tokens, rec.completion_tokens, rec.finish_reason) == (30, 3, "length")
    assert rec.usage_body == {
        "usage": {"prompt_tokens": 30, "completion_tokens": 3},
        "timings": {"cache_n": 20, "prompt_n": 10},
    }
    assert rec.end_s == 10.0


def test_reasoning_and_tool_call_deltas_count_as_tokens_and_tool_arguments_are_kept() -> None:
    call = [{"index": 0, "id": "c", "function": {"name": "f", "arguments": '{"a": '}}]
    rec, _ = run_sink(
        [
            (101.0, ev(delta(reasoning_content="think"))),
            (102.0, ev(delta(tool_calls=call))),
            (103.0, ev(delta(tool_calls=[{"index": 0, "function": {"arguments": "1}"}}]))),
        ],
        keep_text=True,
    )
    assert rec.first_token_s == 1.0 and len(rec.chunk_times_s) == 3
    assert rec.tool_arguments == '{"a": 1}'


def test_completions_text_chunks() -> None:
    rec, _ = run_sink(
        [(101.0, ev({"choices": [{"index": 0, "text": "abc", "finish_reason": None}]}))],
        keep_text=True,
    )
    assert rec.first_token_s == 1.0 and rec.text == "abc"


def test_cancel_after_k_chunks_aborts() -> None:
    rec, aborted = run_sink(
        [(100.0 + i, ev(delta(content=f"t{i}"))) for i in range(1, 6)], cancel=2
    )
    assert rec.outcome is Outcome.CANCELLED and len(rec.chunk_times_s) == 2 and aborted == ["abort"]
    assert rec.end_s == 2.0


def test_malformed_event_data_fails_the_request_and_drops_the_connection() -> None:
    rec, aborted = run_sink(
        [(101.0, ev(delta(content="a"))), (102.0, ev(b"{not json")), (103.0, ev(b"[1, 2]"))]
    )
    assert rec.outcome is Outcome.ERROR and rec.error_kind is ErrorKind.MALFORMED_STREAM
    assert aborted == ["abort"] and rec.end_s == 2.0


def test_error_object_in_the_stream() -> None:
    rec, _ = run_sink([(101.0, ev({"error": {"message": "oom"}}))])
    assert rec.error_kind is ErrorKind.STREAM_ERROR and "oom" in rec.error_detail


def test_http_error_statuses_and_empty_streams() -> None:
    rec, _ = run_sink(
        [(101.0, b'{"error": "bad"}')], status=400, headers={"content-type": "application/json"}
    )
    assert rec.error_kind is ErrorKind.HTTP_4XX and "HTTP 400" in rec.error_detail
    rec, _ = run_sink([], status=503, headers={})
    assert rec.error_kind is ErrorKind.HTTP_5XX
    rec, _ = run_sink([(101.0, ev(delta(role="assistant")) + ev(b"[DONE]"))])
    assert rec.error_kind is ErrorKind.EMPTY
    rec, _ = run_sink([(101.0, b'data: {"choices": []')])
    assert rec.error_kind is ErrorKind.MALFORMED_STREAM


def test_non_streamed_json_answer() -> None:
    body = json.dumps(
        {
            "choices": [{"message": {"content": "done"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1},
        }
    ).encode()
    rec, _ = run_sink([(101.0, body)], headers={"content-type": "application/json"}, keep_text=True)
    assert rec.outcome is Outcome.OK and rec.first_token_s == 10.0 and rec.text == "done"
    assert rec.completion_tokens == 1


def test_transport_failure_maps_to_kind() -> None:
    async def go() -> RequestRecord:
        rec = RequestRecord(index=0, scheduled_s=0.0)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        sink = StreamSink(rec, done, t0=0.0)
        sink.on_failure(UpstreamFailure(FailureKind.RESET, "closed", response_started=True), 3.0)
        return rec

    rec = asyncio.run(go())
    assert rec.error_kind is ErrorKind.RESET and rec.end_s == 3.0

    async def malformed() -> RequestRecord:
        rec = RequestRecord(index=0, scheduled_s=0.0)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        failure = UpstreamFailure(FailureKind.MALFORMED, "bad chunk", response_started=True)
        StreamSink(rec, done, t0=0.0).on_failure(failure, 1.0)
        return rec

    rec = asyncio.run(malformed())
    assert rec.error_kind is ErrorKind.MALFORMED_HTTP and rec.error_detail == "bad chunk"
