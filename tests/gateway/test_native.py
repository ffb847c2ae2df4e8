"""The compiled build of capture, prompt tokenizing and the traffic window
(``scripts/build-native``) gives the Python sources' results, and falls back to them when
stale.

Each side runs in its own interpreter (``KVROUTE_NATIVE=0`` forces the sources): the
same mixed stream of request bodies (repeated and new, system prompts, conversations,
tools, structured output, odd text, completions, token ids, bodies the trace cannot
hold) through :class:`CaptureRecords` and :class:`PromptTokens`, then the observed records
into a small :class:`TrafficShape`: every line, observed record, token id and window
state compared exactly.
"""

from __future__ import annotations

import pytest

from kvroute import _accel
from native_builds import assert_same, outcomes

OUTCOMES = r"""
import hashlib, json, random
import numpy as np, orjson
from kvroute import _accel
_accel.enable()
from kvroute.gateway.capture.records import CaptureEvent, CaptureRecords
from kvroute.gateway.prompts.tokens import PromptTokens
from kvroute.gateway.traffic.shape import TrafficShape
from kvroute.gateway.config.traffic import TrafficConfig
from kvroute.trace.tokenizer import load_tokenizer

rng = random.Random(5)
system = " ".join(f"rule{i % 97} applies" for i in range(200))
tools = [{"type": "function", "function": {"name": "get", "parameters": {}}}]
odd = ["naïve 日本語 🙂", "  padded  ", "a<|im_end|>b", "x\n\ny", "", "{{ x }}", "Request 12.5"]

def body(i):
    k = rng.randrange(9)
    user = {"role": "user", "content": f"Say hello. Request {i % (3 if k == 0 else 10**6)}."}
    if k <= 1:
        return {"model": "m", "messages": [user], "stream": True}
    if k == 2:
        return {"model": "m", "messages": [{"role": "system", "content": system}, user]}
    if k == 3:
        turns = [{"role": r, "content": f"{r} {t}"} for t in range(i % 5) for r in ("user", "assistant")]
        return {"model": "m", "messages": [{"role": "system", "content": system}, *turns, user]}
    if k == 4:
        return {"model": "m", "messages": [{"role": "user", "content": rng.choice(odd)}], "tools": tools}
    if k == 5:
        return {"model": "m", "messages": [user], "response_format": {"type": "json_object"}}
    if k == 6:
        return {"model": "m", "prompt": f"Once upon a time {i}"} if i % 2 else {"prompt": [1, 2, i]}
    if k == 7:
        return {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    return {"model": "m", "messages": "not a list"}

bodies = [body(i) for i in range(600)]
tok = load_tokenizer()
out = {"compiled": _accel.active("gateway")}
window = TrafficShape(TrafficConfig(window_requests=60, window_s=40.0, min_requests=5, band_hold_s=3.0))
states = []
for include_text in (False, True):
    records = CaptureRecords(PromptTokens(tok, check_every=5), block_size_tokens=16, include_text=include_text)
    lines, seen = [], []
    for start in range(0, len(bodies), 97):
        events = [
            CaptureEvent(orjson.loads(orjson.dumps(b)), 10.0 + i, 11.5 + i, f"s{i % 4}" if i % 3 else None,
                         "m", "chat", "b0", 200, 40, 16, i % 7 or None, None, i % 2 == 0)
            for i, b in enumerate(bodies[start:start + 97], start)
        ]
        got, observed = records.render(events, observed=True)
        lines += [repr(x) if isinstance(x, Exception) else x.decode() for x in got]
        seen.append(orjson.dumps(observed).decode())
        window.observe_records(observed, 10.0 + start / 8 + 100 * include_text)
        window.observe(20.0 + start / 8 + 100 * include_text, workload="agent", backend="b1",
                       block_hashes=np.array([2**63 + start % 3, start], dtype=np.uint64),
                       num_tokens=40, usage_prompt_tokens=40, reported_cached_tokens=16,
                       predicted_cached_tokens=32)
        states.append([window.num_requests, window.num_tokens, window.matched_tokens,
                       window.num_tokenized, window.class_shares(), window.band and window.band.value,
                       {k: [b.num_requests, b.prompt_tokens, b.cached_tokens, b.abs_error_tokens]
                        for k, b in sorted(window.backends.items())}])
    out[f"lines/{include_text}"] = lines
    out[f"observed/{include_text}"] = seen
prompts = PromptTokens(tok)
ids = [prompts.token_ids(b) for b in bodies if isinstance(b.get("messages"), list)]
out["ids"] = [None if x is None else x.tolist() for x in ids]
out["window"] = states
print(json.dumps(out))
"""


@pytest.mark.skipif(
    not _accel.GATEWAY.status()[0], reason=f"compiled build: {_accel.GATEWAY.status()[1]}"
)
def test_compiled_and_python_builds_capture_identically() -> None:
    python = outcomes(OUTCOMES, compiled=False)
    assert_same(outcomes(OUTCOMES, compiled=True), python)
    # The stream exercises the paths: records written, bodies refused, ids found.
    lines = python["lines/False"]
    assert isinstance(lines, list)
    assert any(line.startswith("{") for line in lines)
    assert any(not line.startswith("{") for line in lines)
    # The traffic window took the observed records, expired old ones and matched blocks.
    states = python["window"]
    assert isinstance(states, list)
    assert any(state[2] > 0 for state in states)
    assert max(state[0] for state in states) == 60
