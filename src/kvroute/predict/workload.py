"""Synthetic loads for users without a trace: ``fixed:isl=5000,osl=500[,n=200,prefix=1000]``.

Every request has ``isl`` prompt tokens and ``osl`` output tokens; the first ``prefix``
tokens are the same in every request (a shared system prompt), the rest are unique.
Prompts are hash-only (:class:`~kvroute.trace.records.BlockPrompt`, 16-token blocks):
the cache models need only which blocks are equal, and building token ids would cost
more than the replay. Pure: no randomness (uniqueness comes from the request index).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvroute.errors import UsageError
from kvroute.trace.records import BlockPrompt, Request

BLOCK_TOKENS = 16
DEFAULT_NUM_REQUESTS = 200
_SHARED_ID = 1 << 40
_KINDS = ("fixed",)


@dataclass(frozen=True, slots=True)
class FixedWorkload:
    isl: int
    osl: int
    num_requests: int = DEFAULT_NUM_REQUESTS
    prefix_tokens: int = 0

    def token_prompts(
        self, rng: np.random.Generator, *, vocab_lo: int = 1000, vocab_hi: int = 30000
    ) -> list[list[int]]:
        """Token ids with the same sharing, for a live engine (``kvroute calibrate``,
        ``predict --validate``): the prefix is one draw, every request's rest its own."""
        prefix = rng.integers(vocab_lo, vocab_hi, size=self.prefix_tokens).tolist()
        own = self.isl - self.prefix_tokens
        return [
            prefix + rng.integers(vocab_lo, vocab_hi, size=own).tolist()
            for _ in range(self.num_requests)
        ]

    def requests(self) -> list[Request]:
        """The requests, in order (no arrival times: the caller's loop sets them)."""
        n_blocks = -(-self.isl // BLOCK_TOKENS)
        shared = self.prefix_tokens // BLOCK_TOKENS
        out = []
        for i in range(self.num_requests):
            ids = np.arange(n_blocks, dtype=np.uint64) + np.uint64((i + 1) << 20)
            ids[:shared] = np.arange(shared, dtype=np.uint64) + np.uint64(_SHARED_ID)
            prompt = BlockPrompt(ids, BLOCK_TOKENS, self.isl)
            out.append(Request(prompt=prompt, output_len=self.osl))
        return out


def parse_workload(spec: str) -> FixedWorkload:
    """Read ``fixed:isl=N,osl=N[,n=N,prefix=N]``; ``UsageError`` says what is wrong."""
    kind, sep, rest = spec.partition(":")
    if kind.strip() not in _KINDS or not sep:
        raise UsageError(
            f"cannot read workload '{spec}'",
            hint="use fixed:isl=5000,osl=500 (optional: n=200, prefix=1000)",
        )
    names = {"isl": "isl", "osl": "osl", "n": "num_requests", "prefix": "prefix_tokens"}
    values: dict[str, int] = {}
    for part in rest.split(","):
        key, eq, value = part.partition("=")
        key = key.strip()
        if key not in names or not eq:
            valid = ", ".join(names)
            raise UsageError(f"workload '{spec}': unknown or malformed '{part}' (keys: {valid})")
        try:
            number = int(value)
        except ValueError:
            raise UsageError(
                f"workload '{spec}': {key} must be an integer, got '{value}'"
            ) from None
        if number < (0 if key == "prefix" else 1):
            raise UsageError(f"workload '{spec}': {key} must be positive")
        values[names[key]] = number
    for key in ("isl", "osl"):
        if key not in values:
            raise UsageError(f"workload '{spec}': {key} is required")
    if values.get("prefix_tokens", 0) >= values["isl"]:
        raise UsageError(f"workload '{spec}': prefix must be shorter than isl")
    return FixedWorkload(**values)
