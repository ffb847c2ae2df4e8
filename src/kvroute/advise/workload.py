"""A trace split into the gateway's workload classes, and per-tenant cache isolation. Pure.

Requests whose prompt is still chat messages or text are labelled by the gateway's own
:func:`kvroute.gateway.routing.classify.classify` on the body they came from, so a class here is
the class a route of the generated ``gateway.yaml`` will match. The readers keep what
``classify`` reads (messages, tools) and the structured-output kind it would find
(``RequestAttrs.structured_output`` is ``structured_output_kind`` of the same body).

A prompt known only as token ids or block hashes (kvroute capture, Mooncake) has no
messages; its label comes from the attributes the trace carries, the same rules in the
same order: ``structured`` from its kind, ``agent`` when its turn (assistant messages
before it) reaches ``agent_min_steps`` (tool messages are not counted there, so this
can only under-count), ``tools`` when tools were offered, then ``chat`` when it was a
chat request (``messages`` known) and ``completion`` otherwise; ``long_prefix`` needs
the system text and is never given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from kvroute.analyze.shape import concurrency_of
from kvroute.cache.replay.timing import TimingOptions, plan, service_s
from kvroute.gateway.config.classify import ClassifyOptions
from kvroute.gateway.routing.classify import classify
from kvroute.gateway.types import WorkloadClass
from kvroute.trace.records import (
    BlockPrompt,
    ChatPrompt,
    Request,
    StructuredOutput,
    TextPrompt,
    TokenPrompt,
)

ANONYMOUS_TENANT = "(no user)"
_TENANT_TOKEN_BASE = 0xFFF0_0000
"""Token ids far above any vocabulary, one per tenant: a tenant's prompts start with
its own id, so no two tenants share a cached prefix (what vLLM's ``cache_salt`` does to
the first block's hash)."""


def classify_request(request: Request, options: ClassifyOptions) -> WorkloadClass:
    """The gateway's class for one trace request (see the module docstring)."""
    attrs = request.attrs
    if attrs.structured_output is not StructuredOutput.NONE:
        return WorkloadClass.STRUCTURED
    prompt = request.prompt
    if isinstance(prompt, ChatPrompt):
        body: dict[str, object] = {"messages": prompt.messages}
        if prompt.tools:
            body["tools"] = prompt.tools
        return classify(body, is_chat=True, options=options).workload
    if isinstance(prompt, TextPrompt):
        return classify({"prompt": prompt.text}, is_chat=False, options=options).workload
    if attrs.turn_index is not None and attrs.turn_index >= options.agent_min_steps:
        return WorkloadClass.AGENT
    if attrs.has_tools:
        return WorkloadClass.TOOLS
    return WorkloadClass.CHAT if attrs.num_messages is not None else WorkloadClass.COMPLETION


def classify_trace(
    requests: Sequence[Request], options: ClassifyOptions | None = None
) -> list[WorkloadClass]:
    opts = options or ClassifyOptions()
    return [classify_request(r, opts) for r in requests]


@dataclass(frozen=True, slots=True)
class ClassWorkload:
    """The requests of one workload class, in trace order."""

    workload: WorkloadClass
    requests: list[Request]
    share_of_requests: float


def split_by_class(
    requests: Sequence[Request], labels: Sequence[WorkloadClass]
) -> list[ClassWorkload]:
    """One :class:`ClassWorkload` per class present, largest first (ties in enum order)."""
    groups: dict[WorkloadClass, list[Request]] = {}
    for request, label in zip(requests, labels, strict=True):
        groups.setdefault(label, []).append(request)
    order = list(WorkloadClass)
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), order.index(kv[0])))
    n = max(len(requests), 1)
    return [ClassWorkload(w, reqs, len(reqs) / n) for w, reqs in ranked]


def tenant_of(request: Request) -> str:
    return request.user_id or ANONYMOUS_TENANT


def isolate_tenants(requests: Sequence[Request]) -> list[Request]:
    """The requests as a cache with per-tenant isolation sees them: prompts of different
    tenants never share a prefix, prompts of one tenant share what they did before."""
    index: dict[str, int] = {}
    out = []
    for r in requests:
        t = index.setdefault(tenant_of(r), len(index))
        p = r.prompt
        if isinstance(p, TokenPrompt):
            salt = np.array([_TENANT_TOKEN_BASE + t], dtype=np.uint32)
            out.append(replace(r, prompt=TokenPrompt(np.concatenate([salt, p.token_ids]))))
        elif isinstance(p, BlockPrompt):
            # XOR with one constant per tenant keeps equal-prefix-equal-hash within a
            # tenant and breaks it across tenants (chained hashes cover the whole prefix).
            mask = np.uint64((0x9E3779B97F4A7C15 * (t + 1)) & 0xFFFF_FFFF_FFFF_FFFF)
            hashes = np.bitwise_xor(p.block_hashes, mask)
            out.append(replace(r, prompt=BlockPrompt(hashes, p.block_size_tokens, p.num_tokens)))
        else:
            raise ValueError("isolate_tenants needs tokenized prompts")
    return out


def num_tenants(requests: Sequence[Request]) -> int:
    return len({tenant_of(r) for r in requests})


def prompt_len(r: Request) -> int:
    return int(getattr(r.prompt, "num_tokens", 0))


def concurrency_p90(requests: Sequence[Request], timing: TimingOptions) -> float:
    """p90 requests in flight at arrivals: the trace's end times where known, else the
    service model's run time; 1 when the trace has no arrival times."""
    schedule = plan(requests, timing)
    if schedule.arrival_s is None:
        return 1.0
    run = np.array(
        [
            s if np.isfinite(s) else service_s(prompt_len(r), out, timing)
            for r, s, out in zip(
                requests, schedule.trace_run_s, schedule.output_tokens, strict=True
            )
        ],
        dtype=np.float64,
    )
    c = concurrency_of(schedule.arrival_s, schedule.arrival_s + run)
    return 1.0 if c is None else float(c.p90)
