"""``code``: completion requests over distinct code contexts (< 10 % prefix overlap).

Each request carries its own file; only the instruction line and the template's
header repeat, so the ideal overlap is a few percent at the default length.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvroute.bench.workloads.base import BenchRequest, Draft, GenContext, finish, lognormal_len
from kvroute.bench.workloads.params import check, param


@dataclass(frozen=True, slots=True)
class CodeWorkload:
    context_tokens: int = param(768, "mean code context length, tokens (lognormal)")
    spread: float = param(0.4, "lognormal sigma of the context length")
    output_tokens: int = param(96, "max_tokens of each completion")

    def generate(self, num_requests: int, ctx: GenContext) -> list[BenchRequest]:
        check(self.context_tokens >= 16, "code: context_tokens must be ≥ 16")
        drafts = []
        for _ in range(num_requests):
            n = lognormal_len(ctx.rng, self.context_tokens, self.spread, lo=16)
            source = f"# {ctx.text.tag('module_')}.py\n{ctx.text.tokens(n, code=True)}\n"
            drafts.append(
                Draft(
                    body={
                        "messages": [{"role": "user", "content": f"Complete this code:\n{source}"}]
                    },
                    max_tokens=self.output_tokens,
                )
            )
        return finish("code", drafts, ctx.tokenizer)
