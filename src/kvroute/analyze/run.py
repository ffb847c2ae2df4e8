"""Run every analysis over a stream of tokenized requests in one pass.

Requests are taken in chunks so hashing is vectorised, then fed one by one to the
accumulators (prefix index, reuse tracker, sessions, pair sampler, groups). Memory is
bounded by unique blocks and the fixed-size samples, never by the trace length times
the prompt length.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

import numpy as np

from kvroute.analyze.drift import DriftTracker
from kvroute.analyze.groups import GroupTracker
from kvroute.analyze.pairwise import PairSampler
from kvroute.analyze.prefix_index import PrefixIndex
from kvroute.analyze.result import (
    SCHEMA,
    AnalysisResult,
    Granularity,
    Groups,
    Overlap,
    SharedPrefix,
    TraceInfo,
)
from kvroute.analyze.reuse import ReuseTracker
from kvroute.analyze.sessions import SessionTracker
from kvroute.analyze.shape import shape_of
from kvroute.analyze.verdict import verdict_for
from kvroute.errors import EmptyTraceError, InputError
from kvroute.stats import describe
from kvroute.trace.hashing import DEFAULT_SEED, chain_hashes_batch, rechain_ids
from kvroute.trace.records import BlockPrompt, ChatPrompt, Request, TokenPrompt

Progress = Callable[[int], None]
Decode = Callable[[list[int]], str]


@dataclass(frozen=True, slots=True)
class AnalyzeOptions:
    block_size_tokens: int = 16
    """Block granularity for the vLLM-style figures (token traces); hash-only traces use their own."""
    top_groups: int = 10
    seed: int = 0
    chunk_requests: int = 1024
    reuse_max_samples: int = 1_000_000
    pair_reservoir: int = 1000
    num_pairs: int = 5_000
    drift_window_requests: int = 200
    """Requests per window of the prompt-drift detector (drift.py)."""
    drift_min_share: float = 0.1


def _chunks(requests: Iterable[Request], n: int) -> Iterator[list[Request]]:
    it = iter(requests)
    while chunk := list(islice(it, n)):
        yield chunk


def _capacity_grid(total_tokens: int, block: int) -> list[int]:
    grid = []
    c = max(block, 256)
    while c < max(total_tokens, 1) * 2:
        grid.append(c)
        c *= 2
    return grid or [c]


class _Columns:
    """Per-request columns, appended a chunk at a time (NaN where unknown)."""

    def __init__(self) -> None:
        self.prompt_len: list[int] = []
        self.output_len: list[float] = []
        self.arrival: list[float] = []
        self.end: list[float] = []
        self.tools: list[bool] = []
        self.structured: list[str] = []
        self.chat: list[bool] = []
        self.lcp: list[int] = []
        self.lcp_blocks_tokens: list[int] = []
        self.reported: list[int] = []
        self.models: dict[str, int] = {}

    def add_chunk(
        self, chunk: list[Request], num_tokens: list[int], lcp: list[int], block_lcp: list[int]
    ) -> list[float]:
        """Append a chunk; returns its arrival times for reuse."""
        nan = float("nan")
        arrivals = [nan if r.arrival_s is None else r.arrival_s for r in chunk]
        self.prompt_len += num_tokens
        self.lcp += lcp
        self.lcp_blocks_tokens += block_lcp
        self.arrival += arrivals
        self.output_len += [nan if r.output_len is None else float(r.output_len) for r in chunk]
        self.end += [nan if r.end_s is None else r.end_s for r in chunk]
        self.tools += [r.attrs.has_tools for r in chunk]
        self.structured += [r.attrs.structured_output.value for r in chunk]
        self.chat += [r.attrs.num_messages is not None for r in chunk]
        self.reported += [
            r.reported_cached_tokens for r in chunk if r.reported_cached_tokens is not None
        ]
        for r in chunk:
            if r.model:
                self.models[r.model] = self.models.get(r.model, 0) + 1
        return arrivals


@dataclass(slots=True)
class _Accumulators:
    """Everything one pass updates; the granularity is fixed by the first request."""

    mode: Granularity
    block_size_tokens: int
    index: PrefixIndex
    reuse: ReuseTracker
    groups: GroupTracker
    sessions: SessionTracker
    pairs: PairSampler
    cols: _Columns
    drift: DriftTracker

    @classmethod
    def for_first(
        cls, first: Request, opts: AnalyzeOptions, rng: np.random.Generator
    ) -> _Accumulators:
        mode, bs = Granularity.TOKEN, opts.block_size_tokens
        if isinstance(first.prompt, BlockPrompt):
            mode, bs = Granularity.BLOCK, first.prompt.block_size_tokens
        return cls(
            mode=mode,
            block_size_tokens=bs,
            index=PrefixIndex(bs, keep_tokens=mode is Granularity.TOKEN),
            reuse=ReuseTracker(bs, max_samples=opts.reuse_max_samples),
            groups=GroupTracker(bs),
            sessions=SessionTracker(),
            pairs=PairSampler(rng, reservoir_size=opts.pair_reservoir, num_pairs=opts.num_pairs),
            cols=_Columns(),
            drift=DriftTracker(
                bs, window_requests=opts.drift_window_requests, min_share=opts.drift_min_share
            ),
        )


def analyze_requests(
    requests: Iterable[Request],
    *,
    trace_path: str,
    trace_format: str,
    tokenizer_name: str | None,
    options: AnalyzeOptions | None = None,
    num_skipped: Callable[[], int] = lambda: 0,
    decode: Decode | None = None,
    progress: Progress | None = None,
) -> AnalysisResult:
    """Analyse tokenized requests (token or block-hash prompts) in one streaming pass.

    ``decode`` turns token ids into text for prefix previews (``None``: no text in the
    result). ``progress`` is called with the number of requests done after each chunk.
    Raises ``EmptyTraceError`` for no requests and ``InputError`` when a trace mixes
    token and block-hash prompts or block sizes.
    """
    opts = options or AnalyzeOptions()
    started = time.perf_counter()
    rng = np.random.default_rng(opts.seed)
    acc: _Accumulators | None = None
    done = 0
    for chunk in _chunks(requests, opts.chunk_requests):
        if acc is None:
            acc = _Accumulators.for_first(chunk[0], opts, rng)
        if acc.mode is Granularity.TOKEN:
            _token_chunk(chunk, acc)
        else:
            _block_chunk(chunk, acc)
        done += len(chunk)
        if progress is not None:
            progress(done)
    if acc is None:
        raise EmptyTraceError("the trace has no requests", path=trace_path)
    mode, bs, index, reuse, groups = (
        acc.mode,
        acc.block_size_tokens,
        acc.index,
        acc.reuse,
        acc.groups,
    )
    sessions, pairs, cols = acc.sessions, acc.pairs, acc.cols

    prompt_len = np.array(cols.prompt_len, dtype=np.float64)
    lcp = np.array(cols.lcp, dtype=np.float64)
    total = int(prompt_len.sum())
    reusable = int(lcp.sum())
    block_reusable = int(np.sum(cols.lcp_blocks_tokens))
    per_req = np.divide(lcp, prompt_len, out=np.zeros_like(lcp), where=prompt_len > 0)
    reported = int(np.sum(cols.reported)) if cols.reported else None
    overlap = Overlap(
        granularity=mode,
        prompt_tokens=total,
        reusable_tokens=reusable,
        hit_ratio=reusable / total if total else 0.0,
        block_size_tokens=bs,
        block_reusable_tokens=block_reusable,
        block_hit_ratio=block_reusable / total if total else 0.0,
        share_requests_with_reuse=float(np.mean(lcp > 0)),
        per_request_hit=describe(per_req, bins=np.linspace(0, 1, 11)),
        lcp_tokens=describe(lcp, log_bins=True),
        lcp_share=describe(per_req, bins=np.linspace(0, 1, 21)),
        reported_cached_tokens=reported,
        reported_hit_ratio=(
            reported / total
            if reported is not None and total and len(cols.reported) == len(cols.lcp)
            else None
        ),
    )
    num_groups, top = groups.top(opts.top_groups)

    def preview(hashes: list[int]) -> str | None:
        ids = index.block_token_ids(hashes) if decode is not None and hashes else None
        return decode(ids) if decode is not None and ids else None

    shared = [
        SharedPrefix(
            rank=i + 1,
            num_requests=g.num_requests,
            start_tokens=g.start_tokens,
            prefix_tokens=g.prefix_tokens,
            tokens_saved=g.tokens_saved,
            share_of_reuse=g.share_of_reuse,
            share_of_prompt_tokens=g.tokens_saved / total if total else 0.0,
            preview_head=preview(g.head_block_hashes),
            preview_tail=preview(g.tail_block_hashes),
            sub_block=g.sub_block,
        )
        for i, g in enumerate(top)
    ]
    groups_res = Groups(num_groups, shared, sum(g.share_of_reuse for g in shared))
    shape = shape_of(
        prompt_len,
        np.array(cols.output_len, dtype=np.float64),
        np.array(cols.arrival, dtype=np.float64),
        np.array(cols.end, dtype=np.float64),
        np.array(cols.tools, dtype=bool),
        cols.structured,
        np.array(cols.chat, dtype=bool),
    )
    sess = sessions.finish()
    unit = 1 if mode is Granularity.TOKEN else bs
    return AnalysisResult(
        schema=SCHEMA,
        trace=TraceInfo(
            path=trace_path,
            format=trace_format,
            num_requests=done,
            num_skipped=num_skipped(),
            prompt_form="tokens" if mode is Granularity.TOKEN else "block_hashes",
            tokenizer=tokenizer_name if mode is Granularity.TOKEN else None,
            block_size_tokens=bs,
            models=cols.models,
        ),
        overlap=overlap,
        groups=groups_res,
        pairwise=pairs.finish(unit, bs),
        sessions=sess,
        shape=shape,
        reuse=reuse.finish(_capacity_grid(total, bs), overlap.block_hit_ratio),
        verdict=verdict_for(overlap, groups_res, sess, shape),
        elapsed_s=time.perf_counter() - started,
        drift=acc.drift.finish(preview),
    )


def _token_chunk(chunk: list[Request], acc: _Accumulators) -> None:
    bs, index, sessions, pairs, groups = (
        acc.block_size_tokens,
        acc.index,
        acc.sessions,
        acc.pairs,
        acc.groups,
    )
    prompts = []
    for req in chunk:
        if not isinstance(req.prompt, TokenPrompt):
            kind = "block hashes" if isinstance(req.prompt, BlockPrompt) else "untokenized text"
            if isinstance(req.prompt, ChatPrompt):
                kind = "untokenized chat"
            raise InputError(f"a token trace cannot mix in {kind} prompts", line=req.source_line)
        prompts.append(req.prompt.token_ids)
    lengths = [p.shape[0] for p in prompts]
    offsets = np.zeros(len(prompts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.concatenate(prompts) if prompts else np.empty(0, dtype=np.uint32)
    hashes, block_offsets = chain_hashes_batch(tokens, offsets, bs, DEFAULT_SEED)
    lcp: list[int] = []
    block_lcp: list[int] = []
    bounds = block_offsets.tolist()
    for i, req in enumerate(chunk):
        toks = prompts[i]
        n = lengths[i]
        keys = hashes[bounds[i] : bounds[i + 1]]
        match = index.match_and_insert(keys, n, toks)
        if req.session_id is not None:
            sessions.add(req.session_id, toks, n, req.output_token_ids, 1)
        pairs.add(toks, n)
        groups.add(keys, match.matched_blocks, match.matched_tokens)
        acc.drift.add(keys, n, match.matched_tokens, req.arrival_s, req.session_id)
        lcp.append(match.matched_tokens)
        block_lcp.append(match.matched_blocks * bs)
    arrivals = acc.cols.add_chunk(chunk, lengths, lcp, block_lcp)
    per_block = np.diff(block_offsets)
    acc.reuse.add_chunk(
        hashes,
        np.full(hashes.shape[0], float(bs)),
        np.repeat(np.array(arrivals, dtype=np.float64), per_block),
        int(offsets[-1]),
    )


def _block_chunk(chunk: list[Request], acc: _Accumulators) -> None:
    bs, index, sessions, pairs, groups = (
        acc.block_size_tokens,
        acc.index,
        acc.sessions,
        acc.pairs,
        acc.groups,
    )
    prompts: list[BlockPrompt] = []
    for req in chunk:
        p = req.prompt
        if not isinstance(p, BlockPrompt):
            raise InputError(
                "a hash-only trace cannot mix in token or text prompts", line=req.source_line
            )
        if p.block_size_tokens != bs:
            raise InputError(
                f"block size changes within the trace ({p.block_size_tokens} vs {bs} tokens)",
                line=req.source_line,
            )
        prompts.append(p)
    counts = np.array([p.block_hashes.shape[0] for p in prompts], dtype=np.int64)
    offsets = np.zeros(len(prompts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    ids = (
        np.concatenate([p.block_hashes for p in prompts])
        if prompts
        else np.empty(0, dtype=np.uint64)
    )
    keys_all = rechain_ids(ids, offsets[:-1][counts > 0], DEFAULT_SEED)
    lengths = [p.num_tokens for p in prompts]
    lcp: list[int] = []
    block_lcp: list[int] = []
    bounds = offsets.tolist()
    for i, req in enumerate(chunk):
        n = lengths[i]
        keys = keys_all[bounds[i] : bounds[i + 1]]
        match = index.match_and_insert(keys, n)
        if req.session_id is not None:
            full = keys if n % bs == 0 else keys[:-1]
            sessions.add(req.session_id, full, n, None, bs)
        pairs.add(keys, n)
        groups.add(keys, match.matched_blocks, match.matched_tokens)
        acc.drift.add(keys, n, match.matched_tokens, req.arrival_s, req.session_id)
        lcp.append(match.matched_tokens)
        block_lcp.append(min(match.matched_blocks, n // bs) * bs)
    arrivals = acc.cols.add_chunk(chunk, lengths, lcp, block_lcp)
    block_tokens = np.full(keys_all.shape[0], float(bs))
    ends = offsets[1:][counts > 0] - 1  # each prompt's last block may be partial
    block_tokens[ends] = (
        np.array(lengths, dtype=np.float64)[counts > 0] - (counts[counts > 0] - 1) * bs
    )
    acc.reuse.add_chunk(
        keys_all,
        block_tokens,
        np.repeat(np.array(arrivals, dtype=np.float64), counts),
        int(sum(lengths)),
    )
