"""The microbenchmark ``kvroute calibrate`` runs: short closed-loop probes that separate
the step-time basis terms. Pure: the plan only; the CLI serves it.

    prefill      one client, prompts of 64 .. max_isl tokens, 4 output tokens
                 (per-step and prefill-FLOP terms; TTFT grows with the prompt)
    cached       one client, max_isl-token prompts sharing 7/8 of their tokens
                 (attention over, and reads of, a cached prefix)
    decode       1, max_batch/2, max_batch clients x two context lengths, 16 output tokens
                 (weights and KV bytes, per-sequence cost; TPOT grows with batch and context)
"""

from __future__ import annotations

from dataclasses import dataclass

from kvroute.predict.workload import BLOCK_TOKENS, FixedWorkload

DECODE_TOKENS = 16


@dataclass(frozen=True, slots=True)
class Probe:
    workload: FixedWorkload
    concurrency: int

    @property
    def label(self) -> str:
        w = self.workload
        return f"isl={w.isl} osl={w.osl} prefix={w.prefix_tokens} c={self.concurrency}"


def microbenchmark(*, max_isl: int = 1024, max_batch: int = 4) -> list[Probe]:
    """The probes, shortest first; ``max_isl`` >= 128 and ``max_batch`` >= 1."""
    if max_isl < 128 or max_batch < 1:
        raise ValueError("need max_isl >= 128 and max_batch >= 1")
    probes = [
        Probe(FixedWorkload(isl, 4, num_requests=3), 1)
        for isl in sorted({64, max_isl // 2, max_isl})
    ]
    prefix = (max_isl * 7 // 8) // BLOCK_TOKENS * BLOCK_TOKENS
    probes.append(Probe(FixedWorkload(max_isl, 4, num_requests=4, prefix_tokens=prefix), 1))
    batches = sorted({1, max(1, max_batch // 2), max_batch})
    for c in batches:
        for isl in sorted({64, max_isl // 2}):
            probes.append(Probe(FixedWorkload(isl, DECODE_TOKENS, num_requests=2 * c), c))
    return probes
