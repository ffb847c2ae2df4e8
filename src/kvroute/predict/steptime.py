"""How long one engine step takes: a physics basis times fitted coefficients.

A step runs some prefill chunks and some decodes together. Its basis, per step::

    step       1                                   fixed cost of a step (scheduler, launch)
    layer      L                                   per-layer launch cost
    prefill    FLOPs / (peak x tp)                 2 P sum n + 4 L a sum (n p + n^2/2)
    decode     FLOPs / (peak x tp)                 2 P D + 4 L a sum ctx
    memory     bytes / (bandwidth x tp)            weights per pass + KV read (ctx, cached p)
    seq        sequences in the step               per-sequence input prep and sampling
    comm       all-reduce bytes / link (tp > 1)    2 L T h x 2 bytes x 2 (tp-1)/tp
    allreduce  2 L passes (tp > 1)                 per all-reduce latency

with ``D`` decodes in the step, ``P`` parameters, ``L`` layers, ``a`` attention width (heads x head dim), ``h`` the
hidden size, ``T`` tokens in the step, ``n`` a prefill chunk's new tokens over ``p`` tokens
already in KV, ``ctx`` a decode's context. ``prefill``, ``decode`` and ``memory`` are in seconds
at the datasheet roofline, so their coefficients are 1 / efficiency. Prefill and decode
FLOPs get separate coefficients: on the public GPU runs a prefill runs at a fraction of
the roofline while a decode batch's matrix work nearly hides under its weight reads. ``step`` time is the
coefficients' dot product with the basis (a sum, not a max: the fit decides the weights).
Per request, ``request`` (1) adds the serving overhead a client sees on top of the steps
(HTTP, tokenization, detokenization) to TTFT and E2E, and ``request_per_running`` (the
requests in the engine when it arrives) the part of that overhead that grows with load:
the front end streams every running request's tokens through one process, and a new
request's first token queues behind them. On the public GPU runs TTFT grows with
concurrency several times faster than the steps alone explain.

Every term is linear in the decodes' summed context, so a run of decode-only steps
over a fixed batch sums in closed form (the replay coalesces them).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvroute.predict.hardware import Hardware, ModelCost

STEP_FEATURES = ("step", "layer", "prefill", "decode", "memory", "seq", "comm", "allreduce")
FEATURES = (*STEP_FEATURES, "request", "request_per_running")
"""Coefficient names, in the order a :class:`Coefficients` vector holds them."""
NUM_STEP = len(STEP_FEATURES)

Vector = tuple[float, ...]


@dataclass(frozen=True, slots=True)
class StepShape:
    """What one step computes, in aggregate."""

    num_prefill_tokens: int = 0
    prefill_attn: float = 0.0
    """Sum over chunks of ``n * p + n * n / 2``."""
    prefill_ctx: int = 0
    """Sum over chunks of ``p`` (KV they read)."""
    num_chunks: int = 0
    num_decodes: int = 0
    decode_ctx: int = 0
    """Sum of the decodes' context lengths."""
    num_passes: int = 1
    """Forward passes the step is split into (llama.cpp micro-batches)."""


class StepBasis:
    """Turns :class:`StepShape` into the basis vector for one model on one hardware."""

    def __init__(self, cost: ModelCost, hw: Hardware) -> None:
        tp = hw.num_gpus
        self.cost = cost
        self.hw = hw
        self._flops_scale = 1.0 / (hw.flops_per_s * tp)
        self._bytes_scale = 1.0 / (hw.mem_bw_bytes_per_s * tp)
        self._two_p = 2.0 * cost.num_params
        self._four_la = 4.0 * cost.num_layers * cost.attn_dim
        self._kv = float(cost.kv_bytes_per_token)
        if tp > 1 and hw.link_bytes_per_s > 0:
            per_token = 2 * cost.num_layers * cost.hidden_size * 2.0 * 2 * (tp - 1) / tp
            self._comm_scale = per_token / hw.link_bytes_per_s
            self._allreduce = 2.0 * cost.num_layers
        else:
            self._comm_scale = 0.0
            self._allreduce = 0.0

    def vector(self, s: StepShape) -> Vector:
        tokens = s.num_prefill_tokens + s.num_decodes
        prefill = self._two_p * s.num_prefill_tokens + self._four_la * s.prefill_attn
        decode = self._two_p * s.num_decodes + self._four_la * s.decode_ctx
        nbytes = self.cost.weight_bytes * s.num_passes + self._kv * (s.decode_ctx + s.prefill_ctx)
        return (
            1.0,
            float(self.cost.num_layers),
            prefill * self._flops_scale,
            decode * self._flops_scale,
            nbytes * self._bytes_scale,
            float(s.num_chunks + s.num_decodes),
            tokens * self._comm_scale,
            self._allreduce * s.num_passes,
        )

    def chunk_split(self, n: int, done: int, hit: int) -> tuple[float, float]:
        """One request's own prefill chunk (``n`` new tokens after ``done`` tokens in KV, of
        which ``hit`` came from the cache) as ``prefill`` basis values: (its tokens' own
        work, their attention over the cached prefix)."""
        own = self._two_p * n + self._four_la * (n * (done - hit) + n * n / 2.0)
        return own * self._flops_scale, self._four_la * n * hit * self._flops_scale

    def cached_read(self, hit: int) -> float:
        """``memory`` basis value of reading ``hit`` cached tokens' KV once."""
        return self._kv * hit * self._bytes_scale


PREFILL = STEP_FEATURES.index("prefill")
MEMORY = STEP_FEATURES.index("memory")


def dot(coef: Vector, v: Vector) -> float:
    """Seconds for basis ``v`` (step features only) under ``coef``."""
    return sum(c * x for c, x in zip(coef[:NUM_STEP], v, strict=True))
