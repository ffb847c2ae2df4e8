"""What each cache breaker costs: the trace replayed with the breaker fixed.

For every candidate of :mod:`kvroute.analyze.breakers` the affected requests are
rewritten with its fix, encoded again (the caller's tokenizer and chat template), and
the trace's ideal prefix hit is measured before and after; with a ``replay`` callable
each engine's simulated hit too. Only candidates whose fix raises some hit by at least
``min_gain`` are findings: that is what keeps healthy variation (a question at the end
of a prompt, a document of a RAG request) out of the report. Pure: the encoder and the
engine replay are passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvroute.analyze.breaker_kinds import BreakerKind, suggested_fix
from kvroute.analyze.breakers import Candidate, FieldRef, field_texts, find_candidates, with_field
from kvroute.analyze.prefix_index import PrefixIndex, lcp_len
from kvroute.trace.hashing import chain_hashes
from kvroute.trace.records import ChatPrompt, Prompt, Request, TextPrompt
from kvroute.types import TokenIds

Encode = Callable[[ChatPrompt | TextPrompt], TokenIds]
EngineReplay = Callable[[list[TokenIds]], dict[str, float]]
"""Token ids per request (trace order) -> simulated hit ratio per engine."""

MIN_GAIN = 0.005
"""A fix worth reporting raises a hit ratio by at least half a percentage point."""


@dataclass(frozen=True, slots=True)
class EngineGain:
    engine: str
    hit_before: float
    hit_after: float


@dataclass(frozen=True, slots=True)
class Breaker:
    """One finding: what varies, where, what it costs and how to fix it."""

    kind: BreakerKind
    field: str
    """``tools``, ``messages[i].content (role)`` or ``prompt``."""
    token_position: int
    """Where two requests with different variants stop sharing tokens (rendered prompt)."""
    char_offset: int
    """Where the first varying span starts in the field's most frequent text."""
    num_requests: int
    share_of_requests: float
    num_variants: int
    examples: list[str] | None
    """Up to three varying values (``None`` with ``--no-text``)."""
    context_before: str | None
    context_after: str | None
    ideal_hit_before: float
    ideal_hit_after: float
    """The trace's ideal token-level prefix hit with this breaker fixed (and the
    normalisations listed before it on the same field, which it builds on)."""
    engines: list[EngineGain]
    fix: str


@dataclass(frozen=True, slots=True)
class BreakersResult:
    num_requests_examined: int
    """Requests whose text was examined (the first ones of a longer trace)."""
    num_candidates: int
    """Variations found, before their fixes were measured."""
    min_gain: float
    capacity_tokens: int | None
    """KV capacity of the per-engine figures (``None``: none simulated)."""
    ideal_hit_before: float
    ideal_hit_after_all: float
    """With every finding fixed at once."""
    engines_after_all: list[EngineGain]
    findings: list[Breaker]


def ideal_hit_ratio(prompts: Sequence[TokenIds], block_size_tokens: int = 16) -> float:
    """Token-level ideal prefix hit: Σ LCP with any earlier prompt ÷ Σ prompt tokens."""
    index = PrefixIndex(block_size_tokens, keep_tokens=True)
    reused = total = 0
    for ids in prompts:
        n = int(ids.shape[0])
        reused += index.match_and_insert(
            chain_hashes(ids, block_size_tokens), n, ids
        ).matched_tokens
        total += n
    return reused / total if total else 0.0


def _fixed_prompt(prompt: Prompt, fixes: dict[FieldRef, Callable[[str], str]]) -> Prompt:
    for ref, text in field_texts(prompt):
        fix = fixes.get(ref)
        if fix is not None:
            fixed = fix(text)
            if fixed != text:
                prompt = with_field(prompt, ref, fixed)
    return prompt


def _apply(
    requests: Sequence[Request],
    token_ids: Sequence[TokenIds],
    encode: Encode,
    indices: Sequence[int],
    fixes: dict[FieldRef, Callable[[str], str]],
) -> list[TokenIds]:
    out = list(token_ids)
    for i in indices:
        fixed = _fixed_prompt(requests[i].prompt, fixes)
        if fixed is not requests[i].prompt and isinstance(fixed, ChatPrompt | TextPrompt):
            out[i] = encode(fixed)
    return out


def _combined_fix(cands: list[Candidate]) -> Callable[[str], str]:
    """Every finding on one field at once: the field's normalisations, then each rewrite."""
    prior = max((c.prior for c in cands), key=len)

    def fix(text: str) -> str:
        for step in prior:
            text = step.get(text, text)
        for c in cands:
            text = c.rewrite.get(text, text)
        return text

    return fix


def measure_breakers(
    requests: Sequence[Request],
    token_ids: Sequence[TokenIds] | None,
    encode: Encode,
    *,
    block_size_tokens: int = 16,
    replay: EngineReplay | None = None,
    capacity_tokens: int | None = None,
    min_gain: float = MIN_GAIN,
    with_text: bool = True,
) -> BreakersResult:
    """Find the breakers in ``requests`` (chat or text prompts, trace order) whose
    prompts encode to ``token_ids``, and measure each fix. ``replay`` adds per-engine
    figures (at ``capacity_tokens``, reported as given). ``token_ids=None``: encode
    every prompt with ``encode`` first. Token and block prompts carry no text: they
    are never candidates."""
    if token_ids is None:
        token_ids = [
            encode(r.prompt) for r in requests if isinstance(r.prompt, ChatPrompt | TextPrompt)
        ]
        if len(token_ids) != len(requests):
            raise ValueError("token_ids=None needs chat or text prompts only")
    cands = find_candidates([r.prompt for r in requests], [r.user_id for r in requests])
    before = ideal_hit_ratio(token_ids, block_size_tokens)
    engines_before = replay(list(token_ids)) if replay is not None else {}
    n = len(requests)
    findings: list[tuple[Breaker, Candidate]] = []
    for c in cands:
        after_ids = _apply(requests, token_ids, encode, c.request_indices, {c.field: c.fix_text})
        after = ideal_hit_ratio(after_ids, block_size_tokens)
        engines_after = replay(after_ids) if replay is not None else {}
        gains = [after - before] + [engines_after[e] - engines_before[e] for e in engines_after]
        if max(gains) < min_gain:
            continue
        a, b = c.pair
        findings.append(
            (
                Breaker(
                    kind=c.kind,
                    field=c.field.path,
                    token_position=lcp_len(token_ids[a], token_ids[b]),
                    char_offset=c.char_offset,
                    num_requests=len(c.request_indices),
                    share_of_requests=len(c.request_indices) / n if n else 0.0,
                    num_variants=c.num_variants,
                    examples=c.examples if with_text else None,
                    context_before=c.context_before if with_text else None,
                    context_after=c.context_after if with_text else None,
                    ideal_hit_before=before,
                    ideal_hit_after=after,
                    engines=[
                        EngineGain(e, engines_before[e], engines_after[e]) for e in engines_after
                    ],
                    fix=suggested_fix(c.kind, c.field.path),
                ),
                c,
            )
        )
    findings.sort(key=lambda f: f[0].ideal_hit_after - f[0].ideal_hit_before, reverse=True)
    after_all, engines_all = before, dict(engines_before)
    if findings:
        by_field: dict[FieldRef, list[Candidate]] = {}
        for _, c in findings:
            by_field.setdefault(c.field, []).append(c)
        indices = sorted({i for _, c in findings for i in c.request_indices})
        fixes = {ref: _combined_fix(cs) for ref, cs in by_field.items()}
        all_ids = _apply(requests, token_ids, encode, indices, fixes)
        after_all = ideal_hit_ratio(all_ids, block_size_tokens)
        engines_all = replay(all_ids) if replay is not None else {}
    return BreakersResult(
        num_requests_examined=n,
        num_candidates=len(cands),
        min_gain=min_gain,
        capacity_tokens=capacity_tokens if replay is not None else None,
        ideal_hit_before=before,
        ideal_hit_after_all=after_all,
        engines_after_all=[EngineGain(e, engines_before[e], h) for e, h in engines_all.items()],
        findings=[f for f, _ in findings],
    )
