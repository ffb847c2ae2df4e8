"""Capture: records built off the hot path, rotation, the round trip into analyze,
and nothing lost on SIGTERM (a real ``kvroute serve`` process)."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from gateway.fake_upstream import FakeUpstream
from gateway.harness import LoopThread, free_port, running_gateway, serve_subprocess
from kvroute.analyze.run import analyze_requests
from kvroute.engines.state import EngineRecord
from kvroute.errors import InputError
from kvroute.gateway.capture import worker as capture_module
from kvroute.gateway.capture.attrs import _PARSER_KEYS, _PLAIN_KEYS
from kvroute.gateway.capture.files import RotatingTraceFile
from kvroute.gateway.capture.records import (
    CaptureEvent,
    CaptureRecords,
    capture_record,
    capture_records,
)
from kvroute.gateway.capture.worker import TraceCapture
from kvroute.gateway.config.capture import CaptureConfig
from kvroute.gateway.config.gateway import parse_config
from kvroute.gateway.prompts.tokens import PromptTokens
from kvroute.trace.formats.base import ReadOptions, RecordError
from kvroute.trace.formats.openai_log import OpenAILogFormat, structured_output_kind
from kvroute.trace.hashing import chain_hashes
from kvroute.trace.keys import default_key_file, load_or_create_key
from kvroute.trace.readers import read_trace
from kvroute.trace.records import BlockPrompt, StructuredOutput
from kvroute.trace.tokenizer import ChatTokenizer, load_tokenizer
from kvroute.trace.writer import prompt_block_hashes

SYSTEM = (
    "You are a careful assistant for a hardware store. Answer in one short sentence, "
    "name the aisle when you can, and never invent prices or stock levels."
)


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return load_tokenizer()


@pytest.fixture
def prompts(tokenizer: ChatTokenizer) -> PromptTokens:
    return PromptTokens(tokenizer)


def conversations(num_sessions: int, num_turns: int) -> list[tuple[str, list[dict[str, str]]]]:
    """Multi-turn sessions sharing a system prompt: (session id, messages) per request."""
    out: list[tuple[str, list[dict[str, str]]]] = []
    for turn in range(num_turns):
        for s in range(num_sessions):
            messages = [{"role": "system", "content": SYSTEM}]
            for t in range(turn + 1):
                messages.append({"role": "user", "content": f"Session {s}, question {t}: nails?"})
                if t < turn:
                    messages.append({"role": "assistant", "content": f"Aisle {t + s}."})
            out.append((f"user-{s}@example.com", messages))
    return out


def event(body: dict[str, Any], session: str | None = "alice@example.com") -> CaptureEvent:
    return CaptureEvent(
        body=body,
        arrival_unix_s=100.0,
        end_unix_s=101.5,
        session_id=session,
        model="m",
        workload="chat",
        backend="b1",
        status=200,
        prompt_tokens=40,
        completion_tokens=3,
        cached_tokens=16,
    )


def captured_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("capture-*.jsonl"))


def block_hit_tokens(prompts: list[np.ndarray[Any, Any]], block_size_tokens: int) -> int:
    """Infinite-cache reuse counted in whole blocks, computed here from token ids."""
    seen: set[int] = set()
    total = 0
    for ids in prompts:
        hashes = [int(h) for h in chain_hashes(ids, block_size_tokens)]
        hit = 0
        while hit < len(hashes) and hashes[hit] in seen:
            hit += 1
        total += hit * block_size_tokens
        seen.update(hashes)
    return total


def test_record_holds_hashes_not_text(tokenizer: ChatTokenizer, prompts: PromptTokens) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "secret plan"}]}
    rec = capture_record(event(body), prompts, block_size_tokens=16, include_text=False)
    ids = tokenizer.encode_chat(body["messages"])  # type: ignore[arg-type]
    assert rec["input_len"] == ids.shape[0]
    assert rec["hashes"] == prompt_block_hashes(ids, 16).tolist()
    assert (rec["class"], rec["backend"], rec["cached"], rec["output_len"]) == ("chat", "b1", 16, 3)
    assert (rec["t"], rec["end_t"], rec["turn"], rec["messages"]) == (100.0, 101.5, 0, 1)
    text = orjson.dumps(rec).decode()
    assert "secret" not in text and "alice" not in text  # no prompt, no session id
    assert len(rec["session"]) == 16
    with_text = capture_record(event(body), prompts, block_size_tokens=16, include_text=True)
    assert "secret plan" in with_text["prompt_text"]


def test_completion_prompts_text_and_token_ids(
    tokenizer: ChatTokenizer, prompts: PromptTokens
) -> None:
    text_rec = capture_record(
        event({"model": "m", "prompt": "The sky is"}, None),
        prompts,
        block_size_tokens=4,
        include_text=False,
    )
    assert text_rec["input_len"] == tokenizer.encode("The sky is").shape[0]
    assert "session" not in text_rec
    ids_rec = capture_record(
        event({"model": "m", "prompt": [1, 2, 3, 4, 5]}, None),
        prompts,
        block_size_tokens=4,
        include_text=False,
    )
    assert ids_rec["input_len"] == 5 and len(ids_rec["hashes"]) == 2


def test_rotation_by_size_and_age_keeps_every_record(tmp_path: Path) -> None:
    now = [1000.0]
    config = CaptureConfig(directory=str(tmp_path), rotate_bytes=200, rotate_s=60.0)
    files = RotatingTraceFile(tmp_path, config, lambda: now[0])
    line = orjson.dumps({"input_len": 16, "hashes": [1]}) + b"\n"
    for _ in range(10):
        files.write(line)  # ~27 bytes each: rotates after 8
    now[0] += 61.0
    files.write(line)  # too old: rotates
    assert list(tmp_path.glob("*.part"))  # the open file is not yet in place
    files.close()
    paths = captured_files(tmp_path)
    assert len(paths) == 3 and not list(tmp_path.glob("*.part"))
    counts = [sum(1 for _ in read_trace(p)) for p in paths]
    assert counts == [7, 3, 1]


def test_full_queue_drops_and_counts(tmp_path: Path, tokenizer: ChatTokenizer) -> None:
    capture = TraceCapture(
        CaptureConfig(directory=str(tmp_path), max_queue=2), load=lambda _: tokenizer
    )
    body = {"model": "m", "prompt": "x"}
    for _ in range(5):
        capture.submit(event(body))  # not started: nothing drains the queue
    assert capture.num_dropped == 3
    capture.start()
    capture.close()
    assert capture.num_written == 2
    assert sum(1 for _ in read_trace(captured_files(tmp_path)[0])) == 2


@pytest.mark.parametrize("words", ["Same words.", "Same long words. " * 100], ids=["short", "long"])
def test_bodies_alike_but_for_one_field_do_not_share_a_memo_entry(
    tokenizer: ChatTokenizer, words: str
) -> None:
    """The memo keys a body by its JSON, or with long messages by its messages and the
    JSON of everything else: the same messages with tools, a response format, a
    message name or another role are other entries, each with the record that body
    gives alone."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    bodies: list[dict[str, Any]] = [
        {"model": "m", "messages": [{"role": "user", "content": words}]},
        {"model": "m", "messages": [{"role": "user", "content": words}], "tools": [tool]},
        {
            "model": "m",
            "messages": [{"role": "user", "content": words}],
            "response_format": {"type": "json_object"},
        },
        {"model": "m", "messages": [{"role": "user", "content": words, "name": "x"}]},
        {"model": "m", "messages": [{"role": "system", "content": words}]},
        {"model": "m", "messages": [{"content": words, "role": "user"}], "user": "u"},
    ]
    events = [event(orjson.loads(orjson.dumps(b))) for b in bodies * 3]
    made = CaptureRecords(PromptTokens(tokenizer), block_size_tokens=16, include_text=False)
    # One batch for short bodies (the memo, then repeats within the batch); one request
    # per batch for long ones, each sent twice in a row (the last long bodies made).
    if len(words) < 100:
        records = made.records(events)
    else:
        events = [e for e in events[: len(bodies)] for _ in (0, 1)]
        records = [r for e in events for r in made.records([e])]
    for ev, rec in zip(events, records, strict=True):
        assert rec == capture_record(
            ev, PromptTokens(tokenizer), block_size_tokens=16, include_text=False
        )
    # Each body's 2nd and 3rd sighting (short), its 2nd (long): never another's record.
    assert made.num_body_hits == (2 if len(words) < 100 else 1) * len(bodies)


def test_long_bodies_repeat_from_the_last_ones_made(tokenizer: ChatTokenizer) -> None:
    """Long bodies have no memo entry; a repeat of one of the last four made is served
    from those without tokenizing, byte for byte what it gives alone, while a body
    that only looks alike (same last message, same count of messages, another system
    prompt or field) and one that left the four are made again."""
    system = "Long rules. " * 120
    alike = system[:-2] + "!!"  # the same length: only a comparison tells them apart
    bodies: list[dict[str, Any]] = [
        {
            "model": "m",
            "messages": [{"role": "system", "content": s}, {"role": "user", "content": u}],
        }
        for s in (system, alike)
        for u in ("Hi.", "Bye.", "Hi again.")
    ]
    bodies.append({**bodies[0], "max_tokens": 5})
    prompts = PromptTokens(tokenizer)
    made = CaptureRecords(prompts, block_size_tokens=16, include_text=False)
    order = [0, 0, 3, 3, 0, 6, 6, 1, 2, 4, 5, 0, 4]  # 0 left the last four before its end
    expected_hits = [
        False,
        True,
        False,
        True,
        True,
        False,
        True,
        False,
        False,
        False,
        False,
        False,
        True,
    ]
    for index, hit in zip(order, expected_hits, strict=True):
        ev = event(orjson.loads(orjson.dumps(bodies[index])))
        misses = prompts.num_piece_misses + prompts.num_piece_hits
        hits_before = made.num_body_hits
        [line], _ = made.render([ev])
        assert line == orjson.dumps(
            capture_record(ev, PromptTokens(tokenizer), block_size_tokens=16, include_text=False)
        )
        assert made.num_body_hits - hits_before == int(hit), index
        # A repeat does not reach the tokenizer's memos at all.
        assert (prompts.num_piece_misses + prompts.num_piece_hits == misses) == hit


def test_repeated_bodies_come_from_the_memo_byte_for_byte(
    tmp_path: Path, tokenizer: ChatTokenizer
) -> None:
    """A stream that repeats bodies (some within one batch, some across batches, one
    after it left the memo) writes what serialising each request's own record gives,
    and the repeats are served from the memo, not tokenized again."""
    bodies: list[dict[str, Any]] = [
        {"model": "m", "messages": messages} for _, messages in conversations(2, 3)
    ]
    bodies += [{"prompt": "x" * 40}, {"prompt": [1, 2, 3]}, {"messages": []}]
    stream = [bodies[i % len(bodies)] for i in range(3 * len(bodies))] + bodies[:2] * 3
    events = [
        event(orjson.loads(orjson.dumps(b)), None if i % 3 else f"s{i % 4}")._replace(
            arrival_unix_s=100.0 + i * 0.0137, end_unix_s=101.0 + i * 0.0731, status=200 + i
        )
        for i, b in enumerate(stream)
    ]
    made = CaptureRecords(
        PromptTokens(tokenizer), block_size_tokens=16, include_text=True, max_bodies=4
    )
    lines: list[bytes | Exception] = []
    for start in range(0, len(events), 5):
        lines += made.render(events[start : start + 5])[0]
    for ev, line in zip(events, lines, strict=True):
        try:
            alone = capture_record(
                ev, PromptTokens(tokenizer), block_size_tokens=16, include_text=True
            )
        except RecordError:
            assert isinstance(line, RecordError)
            continue
        assert line == orjson.dumps(alone)
    assert len(made._memo) <= 4
    # A body seen twice is in the memo: the third time costs no tokenizing at all.
    prompts = PromptTokens(tokenizer)
    unbounded = CaptureRecords(prompts, block_size_tokens=16, include_text=False)
    first = unbounded.render(events[: len(bodies)])[0]
    unbounded.render(events[len(bodies) : 2 * len(bodies)])
    work = prompts.num_piece_hits + prompts.num_piece_misses
    third = unbounded.render(events[2 * len(bodies) : 3 * len(bodies)])[0]
    assert prompts.num_piece_hits + prompts.num_piece_misses == work
    assert [type(x) for x in third] == [type(x) for x in first]


def test_written_lines_are_the_records(tmp_path: Path, tokenizer: ChatTokenizer) -> None:
    """What the worker writes, and hands to ``on_records``, is each record as
    :func:`capture_records` makes it."""
    handed: list[dict[str, Any]] = []
    bodies = [{"model": "m", "messages": m} for _, m in conversations(2, 2)] * 2
    events = [event(b)._replace(observe=i % 2 == 0) for i, b in enumerate(bodies)]
    expected = run_worker(tmp_path, tokenizer, events, handed.extend)
    assert handed == expected[::2]


def run_worker(
    tmp_path: Path,
    tokenizer: ChatTokenizer,
    events: list[CaptureEvent],
    on_records: Callable[[list[dict[str, Any]]], None],
) -> list[dict[str, Any]]:
    """Queue ``events``, run the worker until it drains, check that the file holds each
    record as :func:`capture_records` makes it with the trace key, in order; return
    the records with the gateway's own (unkeyed) hashes, what the window is handed."""
    capture = TraceCapture(CaptureConfig(directory=str(tmp_path)), load=lambda _: tokenizer)
    capture.on_records = on_records
    for ev in events:
        capture.submit(ev)
    capture.start()
    capture.close()
    key, _ = load_or_create_key(default_key_file())
    written = capture_records(
        events, PromptTokens(tokenizer), block_size_tokens=16, include_text=False, key=key
    )
    lines = captured_files(tmp_path)[0].read_bytes().splitlines()[1:]
    assert lines == [orjson.dumps(r) for r in written]
    plain = capture_records(
        events, PromptTokens(tokenizer), block_size_tokens=16, include_text=False
    )
    return [r for r in plain if not isinstance(r, Exception)]


@pytest.mark.parametrize("max_handover", [512, 10])
def test_a_long_queue_is_written_in_chunks_in_order(
    tmp_path: Path, tokenizer: ChatTokenizer, monkeypatch: pytest.MonkeyPatch, max_handover: int
) -> None:
    """More than a chunk queued: every record is written, in order, and the traffic
    window gets them all in order, at once or in hand-overs of at most a chunk past
    ``MAX_HANDOVER`` (a queue that never empties still feeds the window)."""
    monkeypatch.setattr(capture_module, "MAX_HANDOVER", max_handover)
    calls: list[list[dict[str, Any]]] = []
    bodies = [{"model": "m", "messages": m} for _, m in conversations(8, 5)]
    events = [event(b)._replace(observe=True) for b in bodies]
    assert len(events) > 2 * capture_module.RENDER_CHUNK
    expected = run_worker(tmp_path, tokenizer, events, calls.append)
    assert [r for call in calls for r in call] == expected
    if max_handover > len(events):
        assert len(calls) == 1
    else:
        assert len(calls) > 1
        assert max(len(c) for c in calls) < max_handover + capture_module.RENDER_CHUNK


@pytest.mark.parametrize(
    "routes", ["", "routes: [{name: r, pool: default, policy: cache_aware}]\n"]
)
def test_capture_to_analyze_round_trip(
    loop_thread: LoopThread,
    fake: FakeUpstream,
    tmp_path: Path,
    tokenizer: ChatTokenizer,
    routes: str,
) -> None:
    """Through the gateway (fake upstream): every request is in the trace, with the
    gateway's class and backend, and analyze finds the overlap computed here; the same
    when a cache_aware route tokenizes and capture takes its token ids."""
    config = (
        f"backends: [{{name: f1, url: '{fake.url}', engine: vllm}}]\n"
        f"capture: {{directory: '{tmp_path}', block_size_tokens: 16}}\n" + routes
    )
    requests = conversations(num_sessions=3, num_turns=3)
    with running_gateway(loop_thread, config) as gw:
        with httpx.Client(base_url=gw.url) as client:
            for i, (session, messages) in enumerate(requests):
                body = {"model": "m", "messages": messages, "stream": i % 2 == 0}
                r = client.post(
                    "/v1/chat/completions", json=body, headers={"x-session-id": session}
                )
                assert r.status_code == 200
        metrics = gw.gateway.metrics
        capture_records = gw.gateway.capture._records if gw.gateway.capture else None
        capture_prompts = capture_records.prompts if capture_records else None
    if routes:  # the route's token ids were taken: capture tokenized nothing itself
        assert capture_prompts is not None
        assert capture_prompts.num_piece_hits + capture_prompts.num_piece_misses == 0
    num_answered = int(sum(metrics.requests.values.values()))
    [path] = captured_files(tmp_path)
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()[1:]]
    assert all((r["backend"], r["class"], r["status"]) == ("f1", "chat", 200) for r in records)
    assert all(r["usage_prompt_tokens"] == 7 for r in records)  # the fake's usage, per request
    result = analyze_requests(
        read_trace(path), trace_path=str(path), trace_format="kvroute", tokenizer_name=None
    )
    prompts = [tokenizer.encode_chat(m) for _, m in requests]
    assert result.trace.num_requests == num_answered == len(requests)
    assert result.overlap.prompt_tokens == sum(p.shape[0] for p in prompts)
    assert result.overlap.block_reusable_tokens == block_hit_tokens(prompts, 16) > 0
    assert result.sessions.num_sessions == 3


@pytest.mark.engine
@pytest.mark.llamacpp
def test_capture_reproduces_the_gateways_counters_on_llama_server(
    loop_thread: LoopThread, llamacpp_server: EngineRecord, tmp_path: Path
) -> None:
    """Against a real engine the captured prompt lengths are the engine's own counts:
    analyze's prompt tokens equal the gateway's usage-based counter, and its cached
    tokens the engine-reported ones."""
    config = (
        f"backends: [{{name: l1, url: '{llamacpp_server.base_url}', engine: llamacpp}}]\n"
        f"capture: {{directory: '{tmp_path}'}}\n"
    )
    with running_gateway(loop_thread, config) as gw:
        with httpx.Client(base_url=gw.url, timeout=120) as client:
            for i, (session, messages) in enumerate(conversations(2, 2)):
                body: dict[str, Any] = {"model": llamacpp_server.model_name, "messages": messages}
                body |= {"max_tokens": 4, "stream": i % 2 == 1, "temperature": 0}
                r = client.post(
                    "/v1/chat/completions", json=body, headers={"x-session-id": session}
                )
                assert r.status_code == 200
        metrics = gw.gateway.metrics
    [path] = captured_files(tmp_path)
    result = analyze_requests(
        read_trace(path), trace_path=str(path), trace_format="kvroute", tokenizer_name=None
    )
    assert result.trace.num_requests == int(sum(metrics.requests.values.values())) == 4
    assert result.overlap.prompt_tokens == int(sum(metrics.prompt_tokens.values.values()))
    assert result.overlap.reported_cached_tokens == int(sum(metrics.cached_tokens.values.values()))


# -- a real `kvroute serve` process, stopped with SIGTERM --------------------------------


@pytest.fixture
def serve_process(
    fake: FakeUpstream, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    path = tmp_path / "gw.yaml"
    path.write_text(
        f"listener: {{port: {port}, drain_timeout_s: 5}}\n"
        f"backends: [{{name: f1, url: '{fake.url}', engine: vllm}}]\n"
        f"capture: {{directory: '{tmp_path / 'capture'}', include_text: true}}\n"
        "health: {interval_s: 60}\n"
    )
    with serve_subprocess(path, port, "--quiet", stderr=subprocess.PIPE) as proc:
        yield proc, port


def test_sigterm_loses_no_answered_request(
    fake: FakeUpstream,
    serve_process: tuple[subprocess.Popen[str], int],
    tmp_path: Path,
) -> None:
    proc, port = serve_process
    fake.token_interval_s = 0.01  # streams still running when the signal comes
    answered: list[str] = []
    stop = threading.Event()

    def client(worker: int) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            for i in range(10_000):
                if stop.is_set():
                    return
                text = f"worker {worker} request {i}"
                body: dict[str, Any] = {"model": "m", "stream": i % 2 == 0}
                body["messages"] = [{"role": "user", "content": text}]
                try:
                    r = http.post("/v1/chat/completions", json=body)
                    r.read()
                except httpx.TransportError:
                    return  # the gateway stopped listening
                if r.status_code == 200 and r.text.rstrip().endswith(("[DONE]", "}")):
                    answered.append(text)

    workers = [threading.Thread(target=client, args=(w,)) for w in range(4)]
    for w in workers:
        w.start()
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    stop.set()
    for w in workers:
        w.join(10)
    texts = [
        orjson.loads(line)["prompt_text"]
        for path in captured_files(tmp_path / "capture")
        for line in path.read_bytes().splitlines()[1:]
    ]
    assert len(answered) > 10
    assert all(any(a in t for t in texts) for a in answered)
    assert not list((tmp_path / "capture").glob("*.part"))
    assert isinstance(
        read_trace(captured_files(tmp_path / "capture")[0]).__next__().prompt, BlockPrompt
    )


def test_config_section(tmp_path: Path) -> None:
    config = parse_config(
        "backends: [{name: a, url: 'http://127.0.0.1:1', engine: vllm}]\n"
        f"capture: {{directory: '{tmp_path}', rotate_bytes: 1000, include_text: true}}\n",
        "gw.yaml",
    )
    assert config.capture.enabled and config.capture.rotate_bytes == 1000
    assert not parse_config(
        "backends: [{name: a, url: 'http://127.0.0.1:1', engine: vllm}]\n", "gw.yaml"
    ).capture.enabled


def test_batch_hashes_equal_the_writers(tokenizer: ChatTokenizer, prompts: PromptTokens) -> None:
    bodies: list[dict[str, Any]] = [{"prompt": "x" * n} for n in (0, 1, 15, 16, 17, 40, 64, 100)]
    bodies += [{"prompt": list(range(1, n + 1))} for n in (1, 16, 33)]
    records = capture_records(
        [event(b, None) for b in bodies], prompts, block_size_tokens=16, include_text=False
    )
    for body, rec in zip(bodies, records, strict=True):
        assert isinstance(rec, dict)
        prompt = body["prompt"]
        ids = tokenizer.encode(prompt) if isinstance(prompt, str) else np.array(prompt, np.uint32)
        assert rec["hashes"] == prompt_block_hashes(ids, 16).tolist()


ATTR_BODIES: list[dict[str, Any]] = [
    {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    {
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": "q2"},
        ]
    },
    {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
    {"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}]},
    {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}},
    {"messages": [{"role": "user", "content": "x"}], "extra_body": {"guided_regex": "a+"}},
    {"messages": [{"role": "user", "content": "x"}], "user": "u1", "metadata": {"session_id": 3}},
    {"messages": [{"role": "user", "content": "x"}], "user": 7},
    {"messages": [{"role": "user", "content": "x"}], "timestamp": "yesterday"},  # rejected
    {"messages": [{"role": "user", "content": "x"}], "tools": {"not": "a list"}},  # rejected
    {"messages": [{"content": "no role"}]},  # rejected
    {"messages": []},  # rejected
]


@pytest.mark.parametrize("body", ATTR_BODIES)
def test_records_are_those_of_the_format_parser(
    tokenizer: ChatTokenizer, prompts: PromptTokens, body: dict[str, Any]
) -> None:
    """The short path for plain chat bodies keeps what the trace format reads and
    refuses; routing's token ids, handed over, give the same record."""
    try:
        parsed = OpenAILogFormat().parse(dict(body), 0, 0, ReadOptions())[0]
    except RecordError:
        with pytest.raises(RecordError):
            capture_record(event(body), prompts, block_size_tokens=16, include_text=False)
        return
    rec = capture_record(event(body), prompts, block_size_tokens=16, include_text=False)
    attrs = parsed.attrs
    assert (rec["turn"], rec["messages"]) == (attrs.turn_index, attrs.num_messages)
    assert rec.get("tools", False) == attrs.has_tools
    assert rec.get("structured", "none") == attrs.structured_output.value
    ids = tokenizer.encode_chat(body["messages"], body.get("tools"))
    assert rec["hashes"] == prompt_block_hashes(ids, 16).tolist()
    handed = event(body)._replace(token_ids=(tokenizer.name, ids))
    assert capture_record(handed, prompts, block_size_tokens=16, include_text=False) == rec
    # ids from another tokenizer are not taken
    foreign = event(body)._replace(token_ids=("another-model", ids[:1]))
    assert capture_record(foreign, prompts, block_size_tokens=16, include_text=False) == rec


def test_plain_keys_never_ask_for_structured_output() -> None:
    """Bodies whose keys are all in ``_PLAIN_KEYS`` skip the structured-output check:
    no such key may make the format see structured output, whatever its value."""
    values: list[Any] = [{"type": "json_object"}, {"type": "json_schema"}, "a+", ["a"], 1]
    for key in _PLAIN_KEYS:
        assert key not in _PARSER_KEYS
        for value in values:
            assert structured_output_kind({key: value}) is StructuredOutput.NONE, key


# -- write failures at run time: counted, logged once, then capture resumes -------------


def _wait_for(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _capture_messages(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == "kvroute.gateway.capture" and "skipped" not in r.getMessage()
    ]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_disk_full_loses_the_batch_visibly_and_capture_resumes(
    tmp_path: Path, tokenizer: ChatTokenizer, caplog: pytest.LogCaptureFixture
) -> None:
    """The second file lands on a full disk (/dev/full: writes fail with ENOSPC)."""
    config = CaptureConfig(directory=str(tmp_path), rotate_bytes=1, flush_interval_s=0.01)
    capture = TraceCapture(config, load=lambda _: tokenizer, wall_clock=lambda: 1000.0)
    (tmp_path / "capture-19700101T001640Z-0002.jsonl.part").symlink_to("/dev/full")
    body = {"model": "m", "prompt": "x"}
    capture.start()
    try:
        for expected in ((1, 0), (1, 1), (2, 1)):
            capture.submit(event(body))
            _wait_for(lambda e=expected: (capture.num_written, capture.num_failed) == e)
    finally:
        capture.close()
    messages = _capture_messages(caplog)
    assert [level for level, _ in messages] == ["ERROR", "WARNING"]
    assert "No space left on device" in messages[0][1] and "again" in messages[1][1]
    paths = captured_files(tmp_path)
    assert [p.name[-10:] for p in paths] == ["0001.jsonl", "0003.jsonl"]
    assert [sum(1 for _ in read_trace(p)) for p in paths] == [1, 1]
    assert not list(tmp_path.glob("*.part"))


def test_removed_directory_is_counted_logged_once_and_recreated(
    tmp_path: Path, tokenizer: ChatTokenizer, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "cap"
    config = CaptureConfig(directory=str(directory), rotate_bytes=1, flush_interval_s=0.01)
    capture = TraceCapture(config, load=lambda _: tokenizer)
    body = {"model": "m", "prompt": "x"}
    capture.start()
    try:
        capture.submit(event(body))
        _wait_for(lambda: capture.num_written == 1)
        directory.rename(tmp_path / "moved")
        directory.write_text("a file where the directory was\n")
        for num_failed in (1, 2):  # rotating into the lost directory; creating it again
            capture.submit(event(body))
            _wait_for(lambda n=num_failed: capture.num_failed == n)
        directory.unlink()
        capture.submit(event(body))
        _wait_for(lambda: capture.num_written == 2)
        assert capture._thread is not None and capture._thread.is_alive()
    finally:
        capture.close()
    assert [level for level, _ in _capture_messages(caplog)] == ["ERROR", "WARNING"]
    [path] = captured_files(directory)
    assert sum(1 for _ in read_trace(path)) == 1


def test_start_refuses_an_unwritable_directory(tmp_path: Path, tokenizer: ChatTokenizer) -> None:
    (tmp_path / "file").write_text("")
    config = CaptureConfig(directory=str(tmp_path / "file" / "cap"))
    with pytest.raises(InputError, match=r"capture.directory.*exists and is not a directory"):
        TraceCapture(config, load=lambda _: tokenizer).start()
