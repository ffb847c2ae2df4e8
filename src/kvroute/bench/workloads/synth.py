"""``synth``: a workload shaped like an analyzed trace, with none of its text.

Input is the JSON ``kvroute analyze --json`` writes. Matched: the prompt and output
length distributions (inverse-CDF sampling of the result's CDF points), the shared-
prefix groups (each of the top groups becomes a random prefix of the same length,
taken by the same share of requests; a group that starts after a shared segment
extends the group whose prefix ends there), the overall ideal overlap (reuse the top
groups do not explain goes to one extra shared prefix for the other requests), and the
mean arrival rate (Poisson arrival offsets, for ``--schedule trace``). Not matched:
session structure and burstiness. Prompts are plain text sent to ``/v1/completions``,
so no chat template adds tokens of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from kvroute.bench.workloads.base import Api, BenchRequest, Draft, GenContext, finish
from kvroute.bench.workloads.params import check, param
from kvroute.errors import InputError


@dataclass(frozen=True, slots=True)
class _Group:
    share: float
    prefix_tokens: int
    text: str


def _cdf_sampler(dist: dict[str, Any], where: str) -> tuple[np.ndarray, np.ndarray]:
    xs = np.asarray(dist.get("cdf_x") or [], dtype=np.float64)
    ys = np.asarray(dist.get("cdf_y") or [], dtype=np.float64)
    if xs.size == 0 or xs.size != ys.size:
        raise InputError(f"the analysis has no {where} distribution", field=where)
    return xs, ys


def _draw(rng: np.random.Generator, cdf: tuple[np.ndarray, np.ndarray]) -> int:
    xs, ys = cdf
    u = float(rng.uniform(0.0, 1.0))
    return max(
        1, round(float(np.interp(u, np.concatenate(([0.0], ys)), np.concatenate(([xs[0]], xs)))))
    )


@dataclass(frozen=True, slots=True)
class SynthWorkload:
    analysis: str = param("", "the JSON written by kvroute analyze --json")
    max_prompt_tokens: int = param(8192, "cap on a synthesized prompt")
    max_output_tokens: int = param(1024, "cap on a synthesized output length")

    def generate(self, num_requests: int, ctx: GenContext) -> list[BenchRequest]:
        check(bool(self.analysis), "synth: set the analyze result with --param analysis=FILE")
        path = Path(self.analysis)
        try:
            result = orjson.loads(path.read_bytes())
            shape, overlap, groups = result["shape"], result["overlap"], result["groups"]
            num_orig = max(1, int(result["trace"]["num_requests"]))
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise InputError(f"not a kvroute analyze result: {exc}", path=str(path)) from None
        rng, text = ctx.rng, ctx.text
        prompt_cdf = _cdf_sampler(shape["prompt_tokens"], "shape.prompt_tokens")
        try:
            output_cdf: tuple[np.ndarray, np.ndarray] | None = _cdf_sampler(
                shape["output_tokens"], "shape.output_tokens"
            )
        except InputError:
            output_cdf = None
        made: dict[int, str] = {}
        built: list[_Group] = []
        for g in sorted(groups["top"], key=lambda g: int(g["prefix_tokens"])):
            start, end = int(g["start_tokens"]), int(g["prefix_tokens"])
            head = made.get(start, text.tokens(start) + " " if start else "")
            prefix = head + text.tokens(max(1, end - start))
            made[end] = prefix + " "
            built.append(_Group(min(1.0, int(g["num_requests"]) / num_orig), end, made[end]))
        mean_len = float(shape["prompt_tokens"].get("mean") or 1.0)
        explained = sum(g.share * g.prefix_tokens for g in built)
        free_share = max(0.0, 1.0 - sum(g.share for g in built))
        residual = float(overlap["hit_ratio"]) * mean_len - explained
        if residual > 1 and free_share > 0:
            n = round(residual / free_share)
            built.append(_Group(free_share, n, text.tokens(n) + " "))
        shares = np.array([g.share for g in built] + [0.0])
        shares[-1] = max(0.0, 1.0 - shares[:-1].sum())
        shares /= shares.sum()
        rate = float(shape.get("mean_rate_per_s") or 0.0)
        t = 0.0
        drafts = []
        for _ in range(num_requests):
            length = min(_draw(rng, prompt_cdf), self.max_prompt_tokens)
            k = int(rng.choice(len(shares), p=shares))
            prefix, plen = (built[k].text, built[k].prefix_tokens) if k < len(built) else ("", 0)
            prompt = prefix + f"{text.tag('#')} " + text.tokens(max(4, length - plen))
            out = _draw(rng, output_cdf) if output_cdf else 128
            drafts.append(
                Draft(
                    body={"prompt": prompt},
                    api=Api.COMPLETIONS,
                    max_tokens=min(out, self.max_output_tokens),
                    arrival_s=t if rate > 0 else None,
                )
            )
            if rate > 0:
                t += float(rng.exponential(1.0 / rate))
        return finish("synth", drafts, ctx.tokenizer)
