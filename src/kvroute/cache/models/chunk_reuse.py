"""llama.cpp's ``--cache-reuse`` chunk shifting over raw token ids (used by
:mod:`kvroute.cache.models.llamacpp`; llama.cpp commit 0c1e570, ``tools/server/server-context.cpp``,
the prompt-reuse block of ``update_slots``)."""

from __future__ import annotations

import numpy as np

from kvroute.types import TokenIds


def chunk_reuse(
    cached: TokenIds | None, prompt: TokenIds | None, n_past: int, min_chunk: int
) -> int:
    """``--cache-reuse``: after the common prefix, shift cached chunks of at least
    ``min_chunk`` tokens that reappear, in order, right after it. Returns the new n_past.

    Same result as llama.cpp's scan (which advances through the cache one token at a time
    until a run of ``min_chunk`` matches): each step is a substring search.
    """
    if cached is None or prompt is None or min_chunk <= 0:
        return n_past
    c = cached.astype("<u4").tobytes()
    head_c = head_p = n_past
    n_c, n_p = cached.shape[0], prompt.shape[0]
    while head_c < n_c and head_p + min_chunk <= n_p:
        pattern = prompt[head_p : head_p + min_chunk].astype("<u4").tobytes()
        j = c.find(pattern, 4 * head_c)
        while j >= 0 and j % 4:
            j = c.find(pattern, j + 1)
        if j < 0:
            break
        start = j // 4
        a = cached[start + min_chunk :]
        b = prompt[head_p + min_chunk :]
        k = min(a.shape[0], b.shape[0])
        diff = np.flatnonzero(a[:k] != b[:k])
        n_match = min_chunk + (int(diff[0]) if diff.size else k)
        n_past += n_match
        head_c = start + n_match
        head_p += n_match
    return n_past
