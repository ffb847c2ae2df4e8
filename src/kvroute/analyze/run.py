"""Run every analysis over a stream of tokenized requests in one pass.

Requests are taken in chunks so hashing is vectorised, then fed one by one to the
accumulators (prefix index, reuse tracker, sessions, pair sampler, groups). Memory is
bounded by unique blocks and the fixed-size samples, never by the trace length times
the prompt length.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice

import numpy as np
import numpy.typing as npt

from kvroute.analyze.accumulate import Accumulators, Columns, add_block_chunk, add_token_chunk
from kvroute.analyze.breakdown import breakdown
from kvroute.analyze.groups import GroupTracker
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
from kvroute.analyze.shape import ShapeResult, shape_of
from kvroute.analyze.verdict import verdict_for
from kvroute.analyze.warmup import Warmup
from kvroute.errors import EmptyTraceError, UsageError
from kvroute.stats import describe
from kvroute.trace.model_names import tokenizer_warning
from kvroute.trace.records import Request

Progress = Callable[[int], None]
Decode = Callable[[list[int]], str]
Preview = Callable[[list[int]], str | None]


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
    warmup: Warmup | None = None
    """Leading requests left out of the headline overlap (they still fill the cache)."""
    pool_tokens: int | None = None
    """The user's KV pool: the reuse figures at that capacity, and the verdict on them."""
    pool_sized_from: str | None = None
    """How the pool was sized, when from a model on GPUs (``llama-3.1-8b on 1 x ...``)."""


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
    labels: Mapping[str, Sequence[str | None]] | None = None,
) -> AnalysisResult:
    """Analyse tokenized requests (token or block-hash prompts) in one streaming pass.

    ``decode`` turns token ids into text for prefix previews (``None``: no text in the
    result). ``progress`` is called with the number of requests done after each chunk.
    ``labels`` adds breakdown dimensions (name -> one label per request, trace order,
    complete by the time the stream ends) to the model and user ones.
    Raises ``EmptyTraceError`` for no requests and ``InputError`` when a trace mixes
    token and block-hash prompts or block sizes.
    """
    opts = options or AnalyzeOptions()
    started = time.perf_counter()
    acc, done = _one_pass(requests, opts, progress)
    if acc is None:
        raise EmptyTraceError("the trace has no requests", path=trace_path)
    mode, bs, cols = acc.mode, acc.block_size_tokens, acc.cols
    prompt_len = np.array(cols.prompt_len, dtype=np.float64)
    overlap = _overlap(acc, prompt_len, opts.warmup)
    total = int(prompt_len.sum())
    preview = _previewer(acc.index, decode)
    groups_res = _groups(acc.groups, opts.top_groups, total, preview)
    shape = _shape(cols, prompt_len)
    sess = acc.sessions.finish()
    unit = 1 if mode is Granularity.TOKEN else bs
    reuse = acc.reuse.finish(
        _capacity_grid(total, bs),
        overlap.block_hit_ratio,
        pool_tokens=opts.pool_tokens,
        pool_sized_from=opts.pool_sized_from,
    )
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
            tokenizer_warning=tokenizer_warning(
                tokenizer_name if mode is Granularity.TOKEN else None, cols.models
            ),
        ),
        overlap=overlap,
        groups=groups_res,
        pairwise=acc.pairs.finish(unit, bs),
        sessions=sess,
        shape=shape,
        reuse=reuse,
        verdict=verdict_for(overlap, groups_res, sess, shape, reuse),
        elapsed_s=time.perf_counter() - started,
        drift=acc.drift.finish(preview),
        breakdown=breakdown(
            cols.prompt_len,
            cols.lcp,
            cols.within_conversation,
            {"model": cols.model_of, "user": cols.user_of, **(labels or {})},
            first_request=overlap.num_warmup_requests,
        ),
    )


def _one_pass(
    requests: Iterable[Request], opts: AnalyzeOptions, progress: Progress | None
) -> tuple[Accumulators | None, int]:
    """Feed every request to the accumulators, a chunk at a time; ``None`` when there
    are no requests. Returns the number of requests read too."""
    rng = np.random.default_rng(opts.seed)
    acc: Accumulators | None = None
    done = 0
    for chunk in _chunks(requests, opts.chunk_requests):
        if acc is None:
            acc = Accumulators.for_first(chunk[0], opts, rng)
        if acc.mode is Granularity.TOKEN:
            add_token_chunk(chunk, acc)
        else:
            add_block_chunk(chunk, acc)
        done += len(chunk)
        if progress is not None:
            progress(done)
    return acc, done


def _overlap(
    acc: Accumulators, prompt_len: npt.NDArray[np.float64], warmup: Warmup | None
) -> Overlap:
    """What an infinite cache would reuse, at the trace's granularity and at blocks;
    the headline sums leave out the requests of ``warmup``."""
    cols = acc.cols
    lcp = np.array(cols.lcp, dtype=np.float64)
    block_lcp = np.array(cols.lcp_blocks_tokens, dtype=np.float64)
    num_warm = warmup.num_warmup_requests(np.array(cols.arrival, dtype=np.float64)) if warmup else 0
    if num_warm >= lcp.shape[0]:
        raise UsageError(
            f"--warmup ({warmup}) covers all {lcp.shape[0]:,} requests: nothing is left to measure"
        )
    cold_total = int(prompt_len.sum())
    cold_hit = float(lcp.sum()) / cold_total if cold_total else 0.0
    cold_block_hit = float(block_lcp.sum()) / cold_total if cold_total else 0.0
    total = int(prompt_len[num_warm:].sum())
    reusable = int(lcp[num_warm:].sum())
    block_reusable = int(block_lcp[num_warm:].sum())
    per_req = np.divide(lcp, prompt_len, out=np.zeros_like(lcp), where=prompt_len > 0)
    reported = int(np.sum(cols.reported)) if cols.reported else None
    # LCP is an ultrametric (lcp(a, c) >= min(lcp(a, b), lcp(b, c))), so the smallest
    # per-request LCP after the first request is the LCP of all prompts.
    common = int(lcp[1:].min()) if lcp.size > 1 else 0
    return Overlap(
        granularity=acc.mode,
        prompt_tokens=total,
        reusable_tokens=reusable,
        hit_ratio=reusable / total if total else 0.0,
        block_size_tokens=acc.block_size_tokens,
        block_reusable_tokens=block_reusable,
        block_hit_ratio=block_reusable / total if total else 0.0,
        common_prefix_tokens=common,
        share_requests_with_reuse=float(np.mean(lcp > common)),
        per_request_hit=describe(per_req, bins=np.linspace(0, 1, 11)),
        lcp_tokens=describe(lcp, log_bins=True),
        lcp_share=describe(per_req, bins=np.linspace(0, 1, 21)),
        reported_cached_tokens=reported,
        reported_hit_ratio=(
            reported / cold_total
            if reported is not None and cold_total and len(cols.reported) == len(cols.lcp)
            else None
        ),
        warmup=None if warmup is None else str(warmup),
        num_warmup_requests=num_warm,
        cold_hit_ratio=None if warmup is None else cold_hit,
        cold_block_hit_ratio=None if warmup is None else cold_block_hit,
    )


def _previewer(index: PrefixIndex, decode: Decode | None) -> Preview:
    """Text of a chain of blocks (token traces with ``decode`` only; else ``None``)."""

    def preview(hashes: list[int]) -> str | None:
        ids = index.block_token_ids(hashes) if decode is not None and hashes else None
        return decode(ids) if decode is not None and ids else None

    return preview


def _groups(tracker: GroupTracker, top_groups: int, total: int, preview: Preview) -> Groups:
    """The ``top_groups`` shared prefixes that save the most prefill, ranked."""
    num_groups, top = tracker.top(top_groups)
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
    return Groups(num_groups, shared, sum(g.share_of_reuse for g in shared))


def _shape(cols: Columns, prompt_len: npt.NDArray[np.float64]) -> ShapeResult:
    return shape_of(
        prompt_len,
        np.array(cols.output_len, dtype=np.float64),
        np.array(cols.arrival, dtype=np.float64),
        np.array(cols.end, dtype=np.float64),
        np.array(cols.tools, dtype=bool),
        cols.structured,
        np.array(cols.chat, dtype=bool),
    )
