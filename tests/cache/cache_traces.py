"""Small synthetic traces for the cache tests (imported by them, not a test module): shared system prompts, multi-turn sessions
that repeat the previous prompt and answer, and one-off prompts."""

from __future__ import annotations

import numpy as np

from kvroute.trace.records import BlockPrompt, Request, TokenPrompt


def token_trace(
    n: int, *, seed: int = 0, timed: bool = True, outputs_known: bool = False
) -> list[Request]:
    rng = np.random.default_rng(seed)
    systems = [
        rng.integers(0, 500, size=int(rng.integers(20, 90)), dtype=np.uint32) for _ in range(4)
    ]
    sessions: list[np.ndarray] = []
    out: list[Request] = []
    t = 0.0
    for i in range(n):
        t += float(rng.exponential(0.3))
        r = rng.random()
        if r < 0.35 and sessions:
            k = int(rng.integers(0, len(sessions)))
            prompt = np.concatenate(
                [sessions[k], rng.integers(0, 500, size=int(rng.integers(1, 30)), dtype=np.uint32)]
            )
        elif r < 0.85:
            prompt = np.concatenate(
                [
                    systems[int(rng.integers(0, 4))],
                    rng.integers(0, 500, size=int(rng.integers(0, 40)), dtype=np.uint32),
                ]
            )
        else:
            prompt = rng.integers(0, 500, size=int(rng.integers(1, 120)), dtype=np.uint32)
        if i % 17 == 0 and out:  # exact repeats: fully cached prompts
            prev = out[int(rng.integers(0, len(out)))].prompt
            assert isinstance(prev, TokenPrompt)
            prompt = prev.token_ids.copy()
        n_out = int(rng.integers(1, 40))
        answer = rng.integers(0, 500, size=n_out, dtype=np.uint32)
        if rng.random() < 0.3:
            sessions.append(np.concatenate([prompt, answer]))
        out.append(
            Request(
                prompt=TokenPrompt(prompt),
                arrival_s=t if timed else None,
                end_s=(t + float(rng.exponential(2.0))) if timed and i % 3 else None,
                output_len=n_out,
                output_token_ids=answer if outputs_known else None,
            )
        )
    return out


def block_trace(n: int, *, seed: int = 0, block: int = 8, timed: bool = True) -> list[Request]:
    """Hash-only requests over shared system blocks, with exact repeats. A partial last
    block has an id of its own, as content hashes do."""
    rng = np.random.default_rng(seed)
    next_id = 1
    systems = []
    for _ in range(5):
        k = int(rng.integers(1, 6))
        systems.append(np.arange(next_id, next_id + k, dtype=np.uint64))
        next_id += k
    out: list[Request] = []
    t = 0.0
    for i in range(n):
        t += float(rng.exponential(0.2))
        if i % 11 == 0 and out:
            prev = out[int(rng.integers(0, len(out)))].prompt
            assert isinstance(prev, BlockPrompt)
            ids, tokens = prev.block_hashes.copy(), prev.num_tokens
        else:
            k = int(rng.integers(0, 6))
            ids = np.concatenate(
                [systems[int(rng.integers(0, 5))], np.arange(next_id, next_id + k, dtype=np.uint64)]
            )
            next_id += k
            tokens = len(ids) * block
            if i % 2:
                ids = np.append(ids, np.uint64(next_id))
                next_id += 1
                tokens += int(rng.integers(1, block))
        out.append(
            Request(
                prompt=BlockPrompt(ids, block, tokens),
                arrival_s=t if timed else None,
                output_len=int(rng.integers(1, 30)),
            )
        )
    return out


def pair(unit: int, tokens: list[int], output: int = 0, index: int = 0, *, keep_ids: bool = False):  # type: ignore[no-untyped-def]
    """The prompt/final sequences of one token prompt at ``unit`` tokens per key."""
    from kvroute.cache.replay.seq import SeqBuilder

    req = Request(prompt=TokenPrompt(np.array(tokens, dtype=np.uint32)), output_len=output)
    return SeqBuilder(unit, block_size_tokens=None, keep_token_ids=keep_ids).build(
        [req], [index], [output]
    )[0]
