"""Capture keys its hashes with the trace key (the key file ``kvroute export`` uses), so
a capture cannot be tested against a guessed prompt, yet compares with itself, with
other captures and with exports made with the same key."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import orjson
import pytest

from gateway.capture.test_worker import captured_files, conversations, event
from kvroute.errors import InputError
from kvroute.gateway.capture.records import capture_records
from kvroute.gateway.capture.worker import TraceCapture
from kvroute.gateway.config.capture import CaptureConfig
from kvroute.gateway.prompts.tokens import PromptTokens
from kvroute.trace.hashing import KEYED_HASH_SCHEME, key_id, keyed_hashes
from kvroute.trace.readers import read_trace
from kvroute.trace.records import BlockPrompt
from kvroute.trace.tokenizer import ChatTokenizer, load_tokenizer
from kvroute.trace.writer import prompt_block_hashes

KEY_A = bytes(range(32))
KEY_B = bytes(range(1, 33))


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return load_tokenizer()


def _hashes(tokenizer: ChatTokenizer, key: bytes | None) -> list[list[int]]:
    events = [event({"model": "m", "messages": m}) for _, m in conversations(2, 2)]
    records = capture_records(
        events, PromptTokens(tokenizer), block_size_tokens=16, include_text=False, key=key
    )
    out: list[list[int]] = []
    for rec in records:
        assert not isinstance(rec, Exception)
        out.append(rec["hashes"])
    return out


def test_same_key_same_hashes_other_key_other_hashes(tokenizer: ChatTokenizer) -> None:
    plain = _hashes(tokenizer, None)
    a, a_again, b = _hashes(tokenizer, KEY_A), _hashes(tokenizer, KEY_A), _hashes(tokenizer, KEY_B)
    assert a == a_again
    for p, ka, kb in zip(plain, a, b, strict=True):
        assert len(ka) == len(kb) == len(p)
        assert not set(ka) & set(kb) and not set(ka) & set(p)
        # export's keyed function: a capture and an export made with one key compare
        assert ka == keyed_hashes(np.array(p, dtype=np.uint64), KEY_A).tolist()
    # equal prefixes stay equal: the conversations share a system prompt
    assert a[0][0] == a[1][0] and plain[0][0] == plain[1][0]


def test_the_file_is_keyed_its_header_names_the_key(
    tmp_path: Path, tokenizer: ChatTokenizer
) -> None:
    key_file = tmp_path / "keys" / "trace.key"
    out = tmp_path / "capture"
    body = {"model": "m", "messages": [{"role": "user", "content": "a guessable prompt"}]}
    for run in range(2):  # the key file is made once, then reused
        capture = TraceCapture(
            CaptureConfig(directory=str(out / str(run)), key_file=str(key_file)),
            load=lambda _: tokenizer,
        )
        capture.submit(event(body))
        capture.start()
        capture.close()
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    key = bytes.fromhex(key_file.read_text().strip())
    paths = captured_files(out / "0") + captured_files(out / "1")
    assert len(paths) == 2
    for path in paths:
        header, line = path.read_bytes().splitlines()[:2]
        head = orjson.loads(header)
        assert head["hash_scheme"] == KEYED_HASH_SCHEME and head["key_id"] == key_id(key)
        ids = tokenizer.encode_chat(body["messages"])  # type: ignore[arg-type]
        guessed = prompt_block_hashes(ids, 16)
        written = orjson.loads(line)["hashes"]
        assert written == keyed_hashes(guessed, key).tolist()
        assert not set(written) & set(guessed.tolist())  # the guess does not test
        [req] = list(read_trace(path))  # the reader accepts the keyed header
        assert isinstance(req.prompt, BlockPrompt)


def test_a_bad_key_file_stops_capture_naming_it(tmp_path: Path, tokenizer: ChatTokenizer) -> None:
    key_file = tmp_path / "trace.key"
    key_file.write_text("not a key\n")
    capture = TraceCapture(
        CaptureConfig(directory=str(tmp_path / "c"), key_file=str(key_file)),
        load=lambda _: tokenizer,
    )
    with pytest.raises(InputError) as info:
        capture.start()
    assert str(key_file) in str(info.value) or getattr(info.value, "path", None) == str(key_file)


@pytest.mark.parametrize("one_by_one", [True, False])
def test_prefixes_remembered_are_keyed_too(tokenizer: ChatTokenizer, one_by_one: bool) -> None:
    """Long prompts sharing a system prompt reuse its rendered hashes (the prefix memos):
    what is written is still each prompt's hashes through the keyed function."""
    from kvroute.gateway.capture.records import CaptureRecords

    system = " ".join(f"rule {i}: be brief and exact." for i in range(120))
    bodies = [
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": f"q{i}"},
            ],
        }
        for i in range(12)
    ]
    records = CaptureRecords(
        PromptTokens(tokenizer), block_size_tokens=16, include_text=False, key=KEY_A
    )
    records._hasher.one_by_one = one_by_one
    for batch in (bodies[:6], bodies[6:]):  # the second batch meets remembered prefixes
        events = [event(b) for b in batch]
        lines, _ = records.render(events)
        plain = capture_records(
            events, PromptTokens(tokenizer), block_size_tokens=16, include_text=False
        )
        for line, rec in zip(lines, plain, strict=True):
            assert isinstance(line, bytes) and not isinstance(rec, Exception)
            assert len(rec["hashes"]) > 8 * 2  # long enough for the prefix memos
            want = keyed_hashes(np.array(rec["hashes"], dtype=np.uint64), KEY_A).tolist()
            assert orjson.loads(line)["hashes"] == want
    assert records._hasher.num_prefix_hits > 0
