"""``replay``: the requests of any trace ``kvroute analyze`` reads, at its own times.

Chat prompts go to ``/v1/chat/completions`` as they were (messages and tools), text
prompts to ``/v1/completions``, token-id prompts to ``/v1/completions`` as token ids
(llama.cpp, vLLM and SGLang accept them). Arrival offsets are the trace's, divided by
``speedup``; use ``--schedule trace`` to send at those times. Hash-only traces
(Mooncake, kvroute captures) carry no text to send: synthesize a look-alike with
``synth`` from their analyze result instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from kvroute.bench.workloads.base import Api, BenchRequest, Draft, GenContext, finish
from kvroute.bench.workloads.params import check, param
from kvroute.errors import UsageError
from kvroute.trace.readers import read_trace
from kvroute.trace.records import BlockPrompt, ChatPrompt, Request, TextPrompt


@dataclass(frozen=True, slots=True)
class ReplayWorkload:
    path: str = param("", "the trace file (any format analyze reads; .gz too)")
    format: str = param("", "force the trace format (default: detected)")
    speedup: float = param(1.0, "divide the trace's inter-arrival times by this")
    output_tokens: int = param(128, "max_tokens where the trace has no output length")
    max_output_tokens: int = param(2048, "cap on a replayed output length")

    def generate(self, num_requests: int, ctx: GenContext) -> list[BenchRequest]:
        check(bool(self.path), "replay: set the trace with --param path=FILE")
        check(self.speedup > 0, "replay: speedup must be > 0")
        requests = list(islice(read_trace(Path(self.path), self.format or None), num_requests))
        t0 = min((r.arrival_s for r in requests if r.arrival_s is not None), default=None)
        drafts = [self._draft(r, t0) for r in requests]
        return finish("replay", drafts, ctx.tokenizer)

    def _draft(self, req: Request, t0: float | None) -> Draft:
        prompt = req.prompt
        body: dict[str, Any]
        if isinstance(prompt, BlockPrompt):
            raise UsageError(
                "replay: this trace holds block hashes only, no prompt to send",
                hint="run `kvroute analyze TRACE --json a.json` and use the synth workload with --param analysis=a.json",
            )
        if isinstance(prompt, ChatPrompt):
            api, body = Api.CHAT, {"messages": prompt.messages}
            if prompt.tools:
                body["tools"] = prompt.tools
        elif isinstance(prompt, TextPrompt):
            api, body = Api.COMPLETIONS, {"prompt": prompt.text}
        else:
            api, body = Api.COMPLETIONS, {"prompt": prompt.token_ids.tolist()}
        out = req.output_len if req.output_len else self.output_tokens
        arrival = (
            None if req.arrival_s is None or t0 is None else (req.arrival_s - t0) / self.speedup
        )
        return Draft(
            body=body,
            api=api,
            max_tokens=max(1, min(out, self.max_output_tokens)),
            session_id=req.session_id,
            arrival_s=arrival,
        )
