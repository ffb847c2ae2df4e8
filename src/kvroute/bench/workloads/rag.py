"""``rag``: a fixed system template, retrieved chunks, then the question.

Layout of every prompt::

    [system: template + instructions ........ shared by all requests  ]
    [user:   top chunk (specific to the question) | pool chunks | question]

The shared part is sized (:func:`~kvroute.bench.workloads.base.fit_shared_system`)
so that the ideal overlap of the generated set is ``overlap``. The top-ranked
chunk is specific to each question, so reuse ends where the template ends: the
ideal prefix overlap ``kvroute analyze`` measures is the target, give or take a few
tokens where two unique parts happen to start alike. Pool chunks repeat across
requests after that point (reusable only by non-prefix caching, which no engine here
does).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvroute.bench.workloads.base import (
    BenchRequest,
    Draft,
    GenContext,
    finish,
    fit_prompt_mean,
    lognormal_len,
)
from kvroute.bench.workloads.params import check, param


@dataclass(frozen=True, slots=True)
class RagWorkload:
    prompt_tokens: int = param(1024, "mean prompt length, tokens")
    overlap: float = param(
        0.6, "target share of prompt tokens in the shared template, in [0, 0.98]"
    )
    num_chunks: int = param(4, "retrieved chunks per request (the first is question-specific)")
    pool_docs: int = param(64, "documents the other chunks are drawn from")
    question_tokens: int = param(32, "mean question length, tokens")
    output_tokens: int = param(128, "max_tokens of each answer")

    def generate(self, num_requests: int, ctx: GenContext) -> list[BenchRequest]:
        check(0.0 <= self.overlap <= 0.98, f"rag: overlap must be in [0, 0.98], got {self.overlap}")
        check(
            self.num_chunks >= 1 and self.pool_docs >= 1,
            "rag: num_chunks and pool_docs must be ≥ 1",
        )
        check(self.prompt_tokens >= 64, "rag: prompt_tokens must be ≥ 64")
        head = (
            "You answer questions using only the retrieved documents in the user message. "
            "Cite documents by number. If they do not contain the answer, say so. "
        )
        drafts = fit_prompt_mean("rag", self, num_requests, ctx, head)
        return finish("rag", drafts, ctx.tokenizer)

    def drafts(self, own_tokens: int, num_requests: int, ctx: GenContext, head: str) -> list[Draft]:
        """Requests whose user messages come to about ``own`` tokens each."""
        text = ctx.text
        unique_tokens = max(16, own_tokens - self.question_tokens - 6 * self.num_chunks)
        chunk_tokens = max(8, unique_tokens // self.num_chunks)
        pool = [text.tokens(chunk_tokens) for _ in range(self.pool_docs)]
        drafts = []
        for _ in range(num_requests):
            parts = [f"{text.tag('Document ')}: {text.tokens(chunk_tokens)}"]
            k = min(self.num_chunks - 1, self.pool_docs)
            for doc in sorted(
                int(d) for d in ctx.rng.choice(self.pool_docs, size=k, replace=False)
            ):
                parts.append(f"Document {doc}: {pool[doc]}")
            question = text.tokens(lognormal_len(ctx.rng, self.question_tokens, 0.3, lo=4))
            content = "\n\n".join(parts) + f"\n\nQuestion: {question}"
            drafts.append(
                Draft(
                    body={
                        "messages": [
                            {"role": "system", "content": head},
                            {"role": "user", "content": content},
                        ]
                    },
                    max_tokens=self.output_tokens,
                )
            )
        return drafts
