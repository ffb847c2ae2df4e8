"""``qa``: independent one-off questions, no system prompt of their own.

The only shared prefix is what the chat template adds to every prompt (SmolLM2's
template inserts a default system message), which is exactly what an engine sees for
such traffic.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvroute.bench.workloads.base import BenchRequest, Draft, GenContext, finish, lognormal_len
from kvroute.bench.workloads.params import check, param


@dataclass(frozen=True, slots=True)
class QaWorkload:
    question_tokens: int = param(96, "mean question length, tokens (lognormal)")
    spread: float = param(0.5, "lognormal sigma of the question length (0: fixed)")
    output_tokens: int = param(128, "max_tokens of each answer")

    def generate(self, num_requests: int, ctx: GenContext) -> list[BenchRequest]:
        check(self.question_tokens >= 1 and self.output_tokens >= 1, "qa: lengths must be ≥ 1")
        drafts = []
        for _ in range(num_requests):
            n = lognormal_len(ctx.rng, self.question_tokens, self.spread, lo=4)
            question = f"{ctx.text.tag('Q')}: {ctx.text.tokens(n)}"
            drafts.append(
                Draft(
                    body={"messages": [{"role": "user", "content": question}]},
                    max_tokens=self.output_tokens,
                )
            )
        return finish("qa", drafts, ctx.tokenizer)
