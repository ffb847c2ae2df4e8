"""One prompt, one set of block keys, whichever path feeds the traffic window.

The window counts a block as reused when an earlier prompt had the same key. It is fed
by cache-aware routes (the keys of the view whose unit is the window's block) and by
capture (``prompt_block_hashes``); when no view has that unit it hashes the prompt
itself. All three must give the same keys, or a prompt shared across route kinds, or
across a vLLM backend dropping out, counts as new.
"""

from __future__ import annotations

import numpy as np

from kvroute.gateway.cacheview.view import BackendCacheView
from kvroute.gateway.config.cache_view import CacheViewConfig
from kvroute.gateway.config.traffic import TrafficConfig
from kvroute.gateway.traffic.shape import TrafficShape
from kvroute.trace.hashing import chain_hashes
from kvroute.trace.writer import prompt_block_hashes

PROMPT = np.arange(1000, 1000 + 160, dtype=np.uint32)  # ten full 16-token blocks


def _vllm_view_keys(token_ids: np.ndarray) -> np.ndarray:
    view = BackendCacheView("vllm", CacheViewConfig())
    return view.seq(token_ids, chain_hashes(token_ids, 1)).keys


def test_a_vllm_view_keys_blocks_as_capture_and_the_window_do() -> None:
    want = chain_hashes(PROMPT, 16)
    assert _vllm_view_keys(PROMPT).tolist() == want.tolist()
    assert prompt_block_hashes(PROMPT, 16)[:10].tolist() == want.tolist()


def test_a_shared_prompt_counts_as_reused_across_route_kinds() -> None:
    traffic = TrafficShape(TrafficConfig(block_size_tokens=16))
    n = int(PROMPT.shape[0])
    # first seen on a cache_aware route over a vLLM backend ...
    traffic.observe(
        1.0, workload="chat", backend="a", block_hashes=_vllm_view_keys(PROMPT), num_tokens=n
    )
    # ... then captured on a plain route (or routed after the vLLM backend dropped out)
    hashes = prompt_block_hashes(PROMPT, 16)[: n // 16].tolist()
    obs = traffic.observe(2.0, workload="chat", backend="b", block_hashes=hashes, num_tokens=n)
    assert obs.matched_tokens == n
