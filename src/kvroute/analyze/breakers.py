"""Cache breakers: content that varies between requests inside an otherwise shared prefix.

A timestamp at the top of a system prompt, a request id, a user's name, JSON keys in a
different order each time: every request then differs from the others a few tokens in,
and everything after that point is prefilled again although it is the same text. This
module finds such content in the prompts' own fields (``tools``, ``messages[i].content``,
a completion ``prompt``) before the chat template renders them, so a finding names the
field and shows the text around it.

Per field, in order (each step sees the text the earlier ones normalised):

1. *structural* variants: texts equal once whitespace is normalised, once embedded JSON
   is written with sorted keys, once the tool list is sorted by name;
2. *slots*: distinct texts that are one template with a few short spans filled in
   differently (a word-level alignment with the most frequent variant); the spans are
   what varies, :mod:`kvroute.analyze.breaker_kinds` names their kind.

A slot cluster is a candidate only when enough shared text follows the first slot to be
worth caching: a per-request question at the end of a prompt is how prompts should look.
Each candidate carries the rewrite that fixes it (the varying spans moved to the end of
the field, the canonical text, or the most frequent tool definitions), which
:mod:`kvroute.analyze.breaker_cost` replays to measure what the fix is worth; only
candidates whose fix measurably raises the hit are reported. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from difflib import SequenceMatcher
from typing import Any

from kvroute.analyze.breaker_kinds import BreakerKind, Span, classify_values
from kvroute.trace.chat_template import join_text_parts
from kvroute.trace.records import ChatPrompt, Prompt, TextPrompt

MAX_MESSAGES = 8
"""Leading messages examined per request: a shared prefix lives at the start."""
MAX_VARIANTS = 300
"""Distinct texts per field aligned into templates (the most frequent ones)."""
MAX_TEMPLATES = 12
"""Templates a text is tried against before it starts its own."""
MAX_SLOTS = 4
MAX_SLOT_CHARS = 80
"""A slot is a field's worth of text (a name, an id, a date), not a document."""
MIN_SHARED_AFTER_CHARS = 120
"""Shared text after the first slot below which moving the slot saves too little to say."""
MIN_REQUESTS = 4
MIN_EQUAL_SHARE = 0.8
CONTEXT_CHARS = 60
CONTEXT_WORDS = 4
"""Word tokens (whitespace counts as one) on each side of a varying span in examples."""

_WORD = re.compile(r"\s+|[^\s]+")


@dataclass(frozen=True, slots=True)
class FieldRef:
    """Where a text sits in a request: ``path`` as shown to users, ``message_index``
    for a message's content (``None`` for ``tools`` and a completion ``prompt``)."""

    path: str
    message_index: int | None


Rewrite = dict[str, str]
"""Text of a field as detected -> the fixed text (texts not in it stay as they are)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One possible breaker, before its cost is measured."""

    kind: BreakerKind
    field: FieldRef
    prior: tuple[Rewrite, ...]
    """Normalisations of earlier steps on the same field, applied before ``rewrite``."""
    rewrite: Rewrite
    request_indices: list[int]
    """Requests whose field text this finding covers, in trace order."""
    num_variants: int
    examples: list[str]
    """Up to three distinct varying values (slots) or variants (structural kinds)."""
    context_before: str
    context_after: str
    char_offset: int
    """Where the first varying span starts in the most frequent variant's text."""
    pair: tuple[int, int]
    """Two requests (trace indices) with different variants: where their tokens diverge
    is the token position of the breaker."""

    def fix_text(self, text: str) -> str:
        for step in self.prior:
            text = step.get(text, text)
        return self.rewrite.get(text, text)


def field_texts(prompt: Prompt) -> list[tuple[FieldRef, str]]:
    """The fields of one prompt that can hold a breaker, in prompt order."""
    if isinstance(prompt, TextPrompt):
        return [(FieldRef("prompt", None), prompt.text)]
    if not isinstance(prompt, ChatPrompt):
        return []
    out: list[tuple[FieldRef, str]] = []
    if prompt.tools:
        out.append((FieldRef("tools", None), json.dumps(prompt.tools, ensure_ascii=False)))
    for i, message in enumerate(prompt.messages[:MAX_MESSAGES]):
        content = message.get("content")
        text = join_text_parts(content) if isinstance(content, list) else content
        if isinstance(text, str):
            role = message.get("role", "?")
            out.append((FieldRef(f"messages[{i}].content ({role})", i), text))
    return out


def with_field(prompt: Prompt, ref: FieldRef, text: str) -> Prompt:
    """``prompt`` with the field at ``ref`` set to ``text`` (tools: JSON text)."""
    if isinstance(prompt, TextPrompt):
        return TextPrompt(text)
    if not isinstance(prompt, ChatPrompt):
        return prompt
    if ref.message_index is None:
        return replace(prompt, tools=json.loads(text))
    messages = list(prompt.messages)
    messages[ref.message_index] = {**messages[ref.message_index], "content": text}
    return replace(prompt, messages=messages)


def find_candidates(
    prompts: Sequence[Prompt], user_ids: Sequence[str | None] | None = None
) -> list[Candidate]:
    """Every breaker candidate in ``prompts`` (trace order), field by field."""
    by_field: dict[FieldRef, list[tuple[int, str]]] = {}
    for i, prompt in enumerate(prompts):
        for ref, text in field_texts(prompt):
            by_field.setdefault(ref, []).append((i, text))
    users: list[str | None] = list(user_ids) if user_ids is not None else [None] * len(prompts)
    has_users = any(u is not None for u in users)
    found: list[Candidate] = []
    for ref, items in by_field.items():
        if len(items) < MIN_REQUESTS:
            continue
        found += _field_candidates(ref, items, users if has_users else None)
    return found


_Canon = Callable[[str], str]


def _field_candidates(
    ref: FieldRef, items: list[tuple[int, str]], users: list[str | None] | None
) -> list[Candidate]:
    texts = [t for _, t in items]
    found: list[Candidate] = []
    prior: list[Rewrite] = []
    for kind, canon in _structural_steps(ref):
        step = _canon_map(texts, canon)
        if not step:
            continue
        found += _structural(kind, ref, tuple(prior), step, items, texts)
        prior.append(step)
        texts = [step.get(t, t) for t in texts]
    found += _slots(ref, tuple(prior), list(zip((i for i, _ in items), texts, strict=True)), users)
    return found


def _structural_steps(ref: FieldRef) -> list[tuple[BreakerKind, _Canon]]:
    if ref.path == "tools":
        return [(BreakerKind.KEY_ORDER, _sorted_keys_json), (BreakerKind.TOOL_ORDER, _sorted_tools)]
    return [(BreakerKind.WHITESPACE, _normal_space), (BreakerKind.KEY_ORDER, _sorted_embedded_json)]


def _canon_map(texts: list[str], canon: _Canon) -> Rewrite:
    """Variant -> the most frequent variant of its group, for texts that are equal once
    ``canon`` normalises them (the fix keeps the formatting most requests already use)."""
    counts: dict[str, int] = {}
    for t in texts:
        counts[t] = counts.get(t, 0) + 1
    groups: dict[str, list[str]] = {}
    for t in counts:  # first appearance order
        groups.setdefault(canon(t), []).append(t)
    out: Rewrite = {}
    for raws in groups.values():
        if len(raws) > 1:
            rep = max(raws, key=lambda t: counts[t])
            out.update({t: rep for t in raws if t != rep})
    return out


def _structural(
    kind: BreakerKind,
    ref: FieldRef,
    prior: tuple[Rewrite, ...],
    step: Rewrite,
    items: list[tuple[int, str]],
    texts: list[str],
) -> list[Candidate]:
    """One candidate per group of variants that ``step`` maps to one text."""
    groups: dict[str, dict[str, list[int]]] = {}  # target text -> variant -> requests
    for (i, _), t in zip(items, texts, strict=True):
        groups.setdefault(step.get(t, t), {}).setdefault(t, []).append(i)
    out = []
    for canon, variants in groups.items():
        indices = sorted(i for ids in variants.values() for i in ids)
        if len(variants) < 2 or len(indices) < MIN_REQUESTS:
            continue
        ordered = sorted(variants, key=lambda v: (-len(variants[v]), variants[v][0]))
        offset = _common_prefix(ordered[0], ordered[1])
        rep = ordered[0]
        out.append(
            Candidate(
                kind=kind,
                field=ref,
                prior=prior,
                rewrite={v: canon for v in ordered if v != canon},
                request_indices=indices,
                num_variants=len(ordered),
                examples=[_snippet(v, offset) for v in ordered[:3]],
                context_before=rep[max(0, offset - CONTEXT_CHARS) : offset],
                context_after=rep[offset : offset + CONTEXT_CHARS],
                char_offset=offset,
                pair=(variants[ordered[0]][0], variants[ordered[1]][0]),
            )
        )
    return out


def _snippet(text: str, offset: int) -> str:
    return text[max(0, offset - 10) : offset + 30]


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _normal_space(text: str) -> str:
    return " ".join(text.split())


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _sorted_keys_json(text: str) -> str:
    return json.dumps(_sorted(json.loads(text)), ensure_ascii=False)


def _tool_name(tool: Any) -> str:
    if isinstance(tool, dict):
        fn = tool.get("function")
        name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
        return str(name)
    return ""


def _sorted_tools(text: str) -> str:
    tools = json.loads(text)
    if not isinstance(tools, list):
        return text
    return json.dumps(sorted(tools, key=_tool_name), ensure_ascii=False)


_DECODER = json.JSONDecoder()


def _sorted_embedded_json(text: str) -> str:
    """``text`` with each JSON object in it rewritten with sorted keys (at most 20 tried)."""
    if "{" not in text:
        return text
    out: list[str] = []
    pos = 0
    tries = 0
    while (start := text.find("{", pos)) >= 0 and tries < 20:
        tries += 1
        try:
            obj, end = _DECODER.raw_decode(text, start)
        except ValueError:
            out.append(text[pos : start + 1])
            pos = start + 1
            continue
        out.append(text[pos:start])
        out.append(
            json.dumps(_sorted(obj), ensure_ascii=False)
            if isinstance(obj, dict)
            else text[start:end]
        )
        pos = end
    out.append(text[pos:])
    return "".join(out)


Op = tuple[str, int, int, int, int]
"""A difflib opcode over word lists: tag, template span, variant span."""


@dataclass(slots=True)
class _Template:
    """A most frequent variant and the variants aligned to it."""

    text: str
    words: list[str]
    shingles: set[tuple[str, ...]]
    members: list[tuple[str, list[Op]]]


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


def _shingles(words: list[str]) -> set[tuple[str, ...]]:
    solid = [w for w in words if not w.isspace()]
    return {tuple(solid[i : i + 3]) for i in range(max(len(solid) - 2, 1))}


def _chars(words: list[str], i: int, j: int) -> int:
    return sum(len(w) for w in words[i:j])


def _align(a: list[str], b: list[str]) -> list[Op] | None:
    """Opcodes taking template ``a`` to ``b`` when ``b`` is ``a`` with at most
    ``MAX_SLOTS`` short spans filled in differently; ``None`` otherwise."""
    n, m = len(a), len(b)
    p = 0
    while p < n and p < m and a[p] == b[p]:
        p += 1
    s = 0
    while s < n - p and s < m - p and a[n - 1 - s] == b[m - 1 - s]:
        s += 1
    ops: list[Op] = [("equal", 0, p, 0, p)] if p else []
    middle = SequenceMatcher(None, a[p : n - s], b[p : m - s], autojunk=False).get_opcodes()
    ops += [(tag, i1 + p, i2 + p, j1 + p, j2 + p) for tag, i1, i2, j1, j2 in middle]
    if s:
        ops.append(("equal", n - s, n, m - s, m))
    spans = _merge_spans([(o[1], o[2]) for o in ops if o[0] != "equal"], a)
    if not spans or len(spans) > MAX_SLOTS:
        return None
    total = _chars(a, 0, n)
    equal = sum(_chars(a, o[1], o[2]) for o in ops if o[0] == "equal")
    if equal < MIN_EQUAL_SHARE * total:
        return None
    for tag, i1, i2, j1, j2 in ops:
        if tag != "equal" and (
            _chars(a, i1, i2) > MAX_SLOT_CHARS or _chars(b, j1, j2) > MAX_SLOT_CHARS
        ):
            return None
    return ops


def _merge_spans(spans: list[tuple[int, int]], words: list[str]) -> list[tuple[int, int]]:
    """Sorted template spans, joined where only whitespace separates them (``10:00:03
    UTC`` against ``11:42:00 GMT`` is one slot, not two)."""
    out: list[tuple[int, int]] = []
    for i1, i2 in sorted(spans):
        if out and all(w.isspace() for w in words[out[-1][1] : i1]):
            out[-1] = (out[-1][0], max(out[-1][1], i2))
        else:
            out.append((i1, i2))
    return out


def _map_start(ops: list[Op], e: int) -> int:
    for tag, i1, i2, j1, _ in ops:
        if tag == "equal" and i1 <= e < i2:
            return j1 + e - i1
        if tag != "equal" and i1 == e:
            return j1
    return ops[-1][4] if ops else 0


def _map_end(ops: list[Op], e: int) -> int:
    for tag, i1, i2, j1, j2 in reversed(ops):
        if tag == "equal" and i1 < e <= i2:
            return j1 + e - i1
        if tag != "equal" and i2 == e:
            return j2
    return 0


def _templates(variants: list[str]) -> list[_Template]:
    """Group ``variants`` (most frequent first) into templates, greedily."""
    templates: list[_Template] = []
    for v in variants[:MAX_VARIANTS]:
        words = _words(v)
        sh = _shingles(words)
        for tpl in templates[:MAX_TEMPLATES]:
            common = len(sh & tpl.shingles)
            if common * 2 < min(len(sh), len(tpl.shingles)):
                continue  # cheap reject before the alignment
            ops = _align(tpl.words, words)
            if ops is not None:
                tpl.members.append((v, ops))
                break
        else:
            templates.append(
                _Template(v, words, sh, [(v, [("equal", 0, len(words), 0, len(words))])])
            )
    return templates


def _slots(
    ref: FieldRef,
    prior: tuple[Rewrite, ...],
    items: list[tuple[int, str]],
    users: list[str | None] | None,
) -> list[Candidate]:
    requests_of: dict[str, list[int]] = {}
    for i, t in items:
        requests_of.setdefault(t, []).append(i)
    if len(requests_of) < 2:
        return []
    ordered = sorted(requests_of, key=lambda t: (-len(requests_of[t]), requests_of[t][0]))
    out = []
    for tpl in _templates(ordered):
        if len(tpl.members) < 2:
            continue
        cand = _slot_candidate(ref, prior, tpl, requests_of, users)
        if cand is not None:
            out.append(cand)
    return out


def _slot_candidate(
    ref: FieldRef,
    prior: tuple[Rewrite, ...],
    tpl: _Template,
    requests_of: dict[str, list[int]],
    users: list[str | None] | None,
) -> Candidate | None:
    indices = sorted(i for v, _ in tpl.members for i in requests_of[v])
    if len(indices) < MIN_REQUESTS:
        return None
    a = tpl.words
    spans = _merge_spans(
        [(o[1], o[2]) for _, ops in tpl.members for o in ops if o[0] != "equal"], a
    )
    first = spans[0][0]
    shared_after = _chars(a, first, len(a)) - sum(_chars(a, i1, i2) for i1, i2 in spans)
    if shared_after < MIN_SHARED_AFTER_CHARS:
        return None
    rewrite: Rewrite = {}
    in_context: list[list[Span]] = []
    for v, ops in tpl.members:
        words = _words(v)
        cuts = [(_map_start(ops, i1), _map_end(ops, i2)) for i1, i2 in spans]
        slot = " ".join(s for s in ("".join(words[j1:j2]).strip() for j1, j2 in cuts) if s)
        kept = _cut(words, cuts)
        in_context.append(
            [
                (
                    "".join(words[max(0, j1 - CONTEXT_WORDS) : j1]),
                    "".join(words[j1:j2]),
                    "".join(words[j2 : j2 + CONTEXT_WORDS]),
                )
                for j1, j2 in cuts
            ]
        )
        fixed = tpl.text if ref.path == "tools" else f"{kept.rstrip()}\n\n{slot}"
        if fixed != v:
            rewrite[v] = fixed
    kind = classify_values(
        in_context,
        in_tools=ref.path == "tools",
        per_user=_per_user(tpl, requests_of, users),
        num_requests=len(indices),
    )
    offset = _chars(a, 0, first)
    end = _chars(a, 0, spans[0][1])
    second = tpl.members[1][0]
    return Candidate(
        kind=kind,
        field=ref,
        prior=prior,
        rewrite=rewrite,
        request_indices=indices,
        num_variants=len(tpl.members),
        examples=list(dict.fromkeys(_example(spans) for spans in in_context))[:3],
        context_before=tpl.text[max(0, offset - CONTEXT_CHARS) : offset],
        context_after=tpl.text[end : end + CONTEXT_CHARS],
        char_offset=offset,
        pair=(requests_of[tpl.text][0], requests_of[second][0]),
    )


def _example(spans: list[Span]) -> str:
    return " … ".join(f"{b}{s}{a}".strip() for b, s, a in spans)


def _cut(words: list[str], cuts: list[tuple[int, int]]) -> str:
    """``words`` joined without the spans in ``cuts``."""
    out: list[str] = []
    pos = 0
    for j1, j2 in cuts:
        out += words[pos:j1]
        pos = max(pos, j2)
    out += words[pos:]
    return "".join(out)


def _per_user(
    tpl: _Template, requests_of: dict[str, list[int]], users: list[str | None] | None
) -> bool | None:
    """Whether each user sent one variant and users sent different ones (``None``: no
    user ids in the trace)."""
    if users is None:
        return None
    variants_of: dict[str, set[str]] = {}
    for v, _ in tpl.members:
        for i in requests_of[v]:
            u = users[i]
            if u is not None:
                variants_of.setdefault(u, set()).add(v)
    return len(variants_of) >= 2 and all(len(vs) == 1 for vs in variants_of.values())
