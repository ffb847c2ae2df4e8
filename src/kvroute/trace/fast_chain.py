"""One prompt's chained block hashes, in C when built: the gateway's per-request hashing.

:mod:`kvroute.trace.hashing` defines the hash and computes it with numpy, which is fast
over a trace's many prompts and slow on one short prompt (a dozen array operations of
a few microseconds each, whatever the prompt's length). ``chainhash.c`` beside this
module computes the same values with a plain loop; :func:`block_hashes` uses it when
its build is current (:mod:`kvroute.trace.native_c`) and numpy otherwise.
``tests/trace/test_fast_chain.py`` checks both against :func:`prompt_block_hashes`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from kvroute.trace import native_c
from kvroute.trace.hashing import DEFAULT_SEED, chain_hashes, extend_chain

_MODULE = native_c.load("chainhash")
_NATIVE: Callable[[Any, int, int, bool], list[int]] | None = (
    None if _MODULE is None else _MODULE.block_hashes
)


def active() -> bool:
    """Whether :func:`block_hashes` runs the compiled copy in this process."""
    return _NATIVE is not None


def block_hashes(
    tokens: npt.NDArray[np.integer] | bytes,
    block_size_tokens: int,
    parent: int = DEFAULT_SEED,
    *,
    partial: bool = True,
) -> list[int]:
    """The chained hashes of ``tokens``' full blocks, continuing from ``parent`` (the
    seed, for a whole prompt), then with ``partial`` the partial last block's: what
    :func:`~kvroute.trace.writer.prompt_block_hashes` gives, as Python ints. ``tokens``
    is an array of integers, or ``bytes`` of packed native uint32 (read in place)."""
    if _NATIVE is not None:
        try:
            return _NATIVE(tokens, block_size_tokens, parent, partial)
        except (BufferError, ValueError):  # a strided view: hash a contiguous copy (a bad
            # block size, or bytes that are not whole ids, raise again)
            if isinstance(tokens, bytes):
                raise
            return _NATIVE(np.ascontiguousarray(tokens), block_size_tokens, parent, partial)
    return numpy_block_hashes(tokens, block_size_tokens, parent, partial=partial)


def numpy_block_hashes(
    tokens: npt.NDArray[np.integer] | bytes,
    block_size_tokens: int,
    parent: int = DEFAULT_SEED,
    *,
    partial: bool = True,
) -> list[int]:
    """:func:`block_hashes` with numpy (the fallback, and the tests' reference)."""
    tokens = as_array(tokens)
    out: list[int] = chain_hashes(tokens, block_size_tokens, parent).tolist()
    tail = tokens[len(out) * block_size_tokens :]
    if partial and tail.shape[0]:
        out.append(extend_chain(out[-1] if out else parent, tail))
    return out


_COMMON = None if _MODULE is None else _MODULE.common_prefix


def native() -> tuple[Callable[[Any, int, int, bool], list[int]], Callable[[Any, Any], int]] | None:
    """The C ``block_hashes(tokens, block_size, parent, partial)`` and
    ``common_prefix(a, b)`` themselves, for callers that pass contiguous arrays and
    want no Python frame around each call (about 1 µs of a capture record's ~20);
    None when the C build is not loaded."""
    if _NATIVE is None or _COMMON is None:
        return None
    return _NATIVE, _COMMON


def common_prefix(a: npt.NDArray[np.integer] | bytes, b: npt.NDArray[np.integer] | bytes) -> int:
    """How many leading tokens ``a`` and ``b`` (contiguous, one item size; ``bytes``
    are packed uint32) share."""
    if _COMMON is not None:
        found: int = _COMMON(a, b)
        return found
    a, b = as_array(a), as_array(b)
    n = min(a.shape[0], b.shape[0])
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.shape[0] else n


def as_array(tokens: npt.NDArray[np.integer] | bytes) -> npt.NDArray[np.integer]:
    """``tokens`` as an array: ``bytes`` are read as packed native uint32."""
    if isinstance(tokens, bytes):
        return np.frombuffer(tokens, dtype=np.uint32)
    return np.asarray(tokens)
