"""Turn trace requests into :class:`~kvroute.cache.base.CacheSeq` pairs, a chunk at a time.

Each request gives two sequences: its *prompt* (what ``pin`` matches) and its *final*
sequence (prompt plus the output tokens whose KV exists when it finishes, what ``unpin``
stores). Both are keyed with the same chained hashes as ``kvroute analyze`` uses
(:mod:`kvroute.trace.hashing`): token prompts hashed at the model's unit, hash-only
prompts re-chained from their block ids. Because the chain is a prefix function, the
prompt's keys are the first keys of the final sequence, so one hashing pass serves both.

Output tokens: the last generated token never gets KV (every engine samples it and
stops), so the final sequence is ``prompt + output[:-1]``. Known output ids (the
trace logged the answer) are hashed as they are, so a later turn that repeats them can
hit; unknown ones become a per-request pseudo token, which keys the output units
uniquely: they take cache space like real outputs but never match. With
``cache_outputs=False`` outputs are left unkeyed: they take memory while the request runs
and are never cached (used to compare with the ideal, which counts prompts only).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from kvroute.cache.base import CacheSeq, units_for
from kvroute.errors import InputError
from kvroute.trace.hashing import DEFAULT_SEED, chain_hashes_batch, rechain_ids
from kvroute.trace.records import BlockPrompt, ChatPrompt, Request, TokenPrompt, block_prompts

_PSEUDO_TOKEN = np.uint32(0x8000_0000)  # above any real vocabulary
_PSEUDO_ID = np.uint64(1 << 63)


class SeqPair:
    """A request's prompt and final sequences. A plain class, built once per request: the
    compiled build makes it a C struct, where a ``NamedTuple`` runs its ``__new__``
    interpreted."""

    __slots__ = ("final", "prompt")

    def __init__(self, prompt: CacheSeq, final: CacheSeq) -> None:
        self.prompt = prompt
        self.final = final


def final_tokens(prompt_tokens: int, output_tokens: int) -> int:
    """Length of the sequence whose KV exists when a request finishes."""
    return prompt_tokens + max(output_tokens - 1, 0)


def trace_block_size(request: Request) -> int | None:
    """The block size of a hash-only request, ``None`` for a token request.

    Raises ``InputError`` for prompts that are not tokenized yet.
    """
    p = request.prompt
    if isinstance(p, BlockPrompt):
        return p.block_size_tokens
    if isinstance(p, TokenPrompt):
        return None
    kind = "chat" if isinstance(p, ChatPrompt) else "text"
    raise InputError(
        f"the simulator needs token ids or block hashes, got an untokenized {kind} prompt",
        line=request.source_line,
        hint="tokenize the trace first (kvroute.trace.tokenize.tokenize_requests)",
    )


class SeqBuilder:
    """Builds prompt/final sequence pairs at one unit size.

    ``block_size_tokens`` is the trace's block size for hash-only traces (the unit is then
    fixed to it) and ``None`` for token traces (the unit is ``unit_tokens``). ``keep_token_ids``
    attaches raw prompt tokens (llama.cpp ``--cache-reuse``). Raises ``InputError`` when a
    request does not match the trace's form.
    """

    def __init__(
        self,
        unit_tokens: int,
        *,
        block_size_tokens: int | None,
        cache_outputs: bool = True,
        keep_token_ids: bool = False,
        seed: int = DEFAULT_SEED,
    ) -> None:
        if block_size_tokens is not None and unit_tokens != block_size_tokens:
            raise ValueError("a hash-only trace fixes the unit to its block size")
        self.unit_tokens = unit_tokens
        self.block_size_tokens = block_size_tokens
        self.cache_outputs = cache_outputs
        self.keep_token_ids = keep_token_ids
        self.seed = seed

    def build(
        self, requests: Sequence[Request], indices: Sequence[int], output_tokens: Sequence[int]
    ) -> list[SeqPair]:
        """Pairs for ``requests``, given each one's trace index (it makes unknown outputs
        unique) and output length in tokens."""
        if self.block_size_tokens is None:
            return self._token_pairs(requests, indices, output_tokens)
        return self._block_pairs(requests, indices, output_tokens)

    def _token_pairs(
        self, requests: Sequence[Request], indices: Sequence[int], output_tokens: Sequence[int]
    ) -> list[SeqPair]:
        u = self.unit_tokens
        prompts: list[npt.NDArray[np.uint32]] = []
        for req in requests:
            p = req.prompt
            if not isinstance(p, TokenPrompt):
                raise InputError(
                    "a token trace cannot mix in other prompt forms", line=req.source_line
                )
            prompts.append(p.token_ids)
        parts: list[npt.NDArray[np.uint32]] = []
        lengths: list[int] = []
        for i, (req, toks) in enumerate(zip(requests, prompts, strict=True)):
            parts.append(toks)
            n_out = max(output_tokens[i] - 1, 0) if self.cache_outputs else 0
            if n_out:
                known = req.output_token_ids
                out = known[:n_out] if known is not None else np.empty(0, dtype=np.uint32)
                pad = n_out - out.shape[0]
                parts.append(out.astype(np.uint32, copy=False))
                if pad:
                    pseudo = _PSEUDO_TOKEN | np.uint32(indices[i] & 0x7FFF_FFFF)
                    parts.append(np.full(pad, pseudo, dtype=np.uint32))
            lengths.append(toks.shape[0] + n_out)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint32)
        keys, key_offsets = chain_hashes_batch(tokens, offsets, u, self.seed)
        bounds = key_offsets.tolist()
        pairs = []
        for i, toks in enumerate(prompts):
            n = toks.shape[0]
            all_keys = keys[bounds[i] : bounds[i + 1]]
            total = final_tokens(n, output_tokens[i])
            prompt = CacheSeq(
                all_keys[: n // u], n, units_for(n, u), u, toks if self.keep_token_ids else None
            )
            final = CacheSeq(
                all_keys if self.cache_outputs else prompt.keys,
                total,
                units_for(total, u),
                u,
                tokens[offsets[i] : offsets[i + 1]] if self.keep_token_ids else None,
            )
            pairs.append(SeqPair(prompt, final))
        return pairs

    def _block_pairs(
        self, requests: Sequence[Request], indices: Sequence[int], output_tokens: Sequence[int]
    ) -> list[SeqPair]:
        bs = self.unit_tokens
        blocks = block_prompts(requests, bs)
        n = len(blocks)
        prompt_units = np.fromiter((p.block_hashes.shape[0] for p in blocks), np.int64, n)
        outs = np.asarray(output_tokens, dtype=np.int64)
        out_units = (
            -(-np.maximum(outs - 1, 0) // bs) if self.cache_outputs else np.zeros(n, np.int64)
        )
        counts = prompt_units + out_units
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        # Lay out each request's block ids followed by its pseudo output ids, vectorised.
        ids = np.repeat(_PSEUDO_ID | np.asarray(indices, dtype=np.uint64), counts)
        if n:
            prompt_pos = np.arange(int(prompt_units.sum()), dtype=np.int64) + np.repeat(
                offsets[:-1] - np.concatenate(([0], np.cumsum(prompt_units)[:-1])), prompt_units
            )
            ids[prompt_pos] = np.concatenate([p.block_hashes for p in blocks])
        keys = rechain_ids(ids, offsets[:-1][counts > 0], self.seed)
        starts = offsets[:-1].tolist()
        ends = offsets[1:].tolist()
        units = prompt_units.tolist()
        finals = (-(-np.maximum(outs - 1, 0) // bs) + prompt_units).tolist()
        num_tokens = [p.num_tokens for p in blocks]
        totals = (np.asarray(num_tokens, np.int64) + np.maximum(outs - 1, 0)).tolist()
        pairs = []
        for a, b, n_units, n_tok, total, n_final in zip(
            starts, ends, units, num_tokens, totals, finals, strict=True
        ):
            prompt_keys = keys[a : a + n_units]
            final_keys = keys[a:b] if self.cache_outputs else prompt_keys
            pairs.append(
                SeqPair(
                    CacheSeq(prompt_keys, n_tok, n_units, bs),
                    CacheSeq(final_keys, total, n_final, bs),
                )
            )
        return pairs
