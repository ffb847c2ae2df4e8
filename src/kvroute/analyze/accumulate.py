"""What one analysis pass updates, and how a chunk of requests feeds it.

A chunk's prompts are hashed in one vectorised call (token prompts) or re-chained
(block-hash prompts), then each request goes through the accumulators in trace order:
prefix index, sessions, pair sampler, groups, drift; the per-request columns and the
reuse tracker take the chunk at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kvroute.analyze.drift import DriftTracker
from kvroute.analyze.groups import GroupTracker
from kvroute.analyze.pairwise import PairSampler
from kvroute.analyze.prefix_index import PrefixIndex
from kvroute.analyze.result import Granularity
from kvroute.analyze.reuse import ReuseTracker
from kvroute.analyze.sessions import SessionTracker
from kvroute.errors import InputError
from kvroute.trace.hashing import DEFAULT_SEED, chain_hashes_batch, rechain_ids
from kvroute.trace.records import BlockPrompt, ChatPrompt, Request, TokenPrompt, block_prompts
from kvroute.types import TokenIds

if TYPE_CHECKING:
    from kvroute.analyze.run import AnalyzeOptions


class Columns:
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
        self.model_of: list[str | None] = []
        self.user_of: list[str | None] = []
        self.within_conversation: list[int] = []
        """Per request, the part of ``lcp`` its own conversation's previous turn holds."""

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
        self.model_of += [r.model or None for r in chunk]
        self.user_of += [r.user_id or None for r in chunk]
        return arrivals


@dataclass(slots=True)
class Accumulators:
    """Everything one pass updates; the granularity is fixed by the first request."""

    mode: Granularity
    block_size_tokens: int
    index: PrefixIndex
    reuse: ReuseTracker
    groups: GroupTracker
    sessions: SessionTracker
    pairs: PairSampler
    cols: Columns
    drift: DriftTracker

    @classmethod
    def for_first(
        cls, first: Request, opts: AnalyzeOptions, rng: np.random.Generator
    ) -> Accumulators:
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
            cols=Columns(),
            drift=DriftTracker(
                bs, window_requests=opts.drift_window_requests, min_share=opts.drift_min_share
            ),
        )


def _token_ids(chunk: list[Request]) -> list[TokenIds]:
    """Each request's token ids; ``InputError`` at the first prompt of another kind."""
    prompts = []
    for req in chunk:
        if not isinstance(req.prompt, TokenPrompt):
            kind = "block hashes" if isinstance(req.prompt, BlockPrompt) else "untokenized text"
            if isinstance(req.prompt, ChatPrompt):
                kind = "untokenized chat"
            raise InputError(f"a token trace cannot mix in {kind} prompts", line=req.source_line)
        prompts.append(req.prompt.token_ids)
    return prompts


def add_token_chunk(chunk: list[Request], acc: Accumulators) -> None:
    """Feed a chunk of token prompts to ``acc`` (mutates it). Raises ``InputError`` on a
    block-hash or untokenized prompt."""
    bs, index, sessions, pairs, groups = (
        acc.block_size_tokens,
        acc.index,
        acc.sessions,
        acc.pairs,
        acc.groups,
    )
    prompts = _token_ids(chunk)
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
        within = 0
        if req.session_id is not None:
            within = sessions.add(req.session_id, toks, n, req.output_token_ids, 1)
        acc.cols.within_conversation.append(min(within, match.matched_tokens))
        pairs.add(toks, n)
        groups.add(keys, match.matched_blocks, match.matched_tokens)
        acc.drift.add(keys, n, match.matched_tokens, req.arrival_s, req.session_id)
        lcp.append(match.matched_tokens)
        block_lcp.append(match.matched_blocks * bs)
    arrivals = acc.cols.add_chunk(chunk, lengths, lcp, block_lcp)
    per_block = np.diff(block_offsets)
    acc.reuse.add_chunk(
        hashes, np.repeat(np.array(arrivals, dtype=np.float64), per_block), int(offsets[-1])
    )


def add_block_chunk(chunk: list[Request], acc: Accumulators) -> None:
    """Feed a chunk of block-hash prompts to ``acc`` (mutates it). Raises ``InputError``
    on another kind of prompt or a block size other than the trace's.

    A prompt's partial last block has a hash too, which matches only when the whole
    prompt repeats an earlier one; it then saves its own tokens, counted like a token
    trace's reuse past the last whole block (``lcp``, groups, pairs). The whole-block
    figures (``block_lcp``, sessions, the reuse tracker) never count a partial block:
    no engine caches one.
    """
    bs, index, sessions, pairs, groups = (
        acc.block_size_tokens,
        acc.index,
        acc.sessions,
        acc.pairs,
        acc.groups,
    )
    prompts = block_prompts(chunk, bs)
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
        within = 0
        if req.session_id is not None:
            within = sessions.add(req.session_id, keys[: n // bs], n, None, bs)
        acc.cols.within_conversation.append(min(within, match.matched_tokens))
        pairs.add(keys, n)
        groups.add(keys, match.matched_blocks, match.matched_tokens)
        acc.drift.add(keys, n, match.matched_tokens, req.arrival_s, req.session_id)
        lcp.append(match.matched_tokens)
        block_lcp.append(match.matched_blocks * bs)
    arrivals = acc.cols.add_chunk(chunk, lengths, lcp, block_lcp)
    whole = np.ones(keys_all.shape[0], dtype=bool)
    whole[offsets[1:][counts * bs > np.array(lengths, dtype=np.int64)] - 1] = False
    acc.reuse.add_chunk(
        keys_all[whole],
        np.repeat(np.array(arrivals, dtype=np.float64), counts)[whole],
        int(sum(lengths)),
    )
