"""Chained block hashing: ``hash(parent hash, block tokens) -> uint64``, vectorised.

The chain is what makes "equal hashes mean equal prefixes": block ``i``'s hash covers
every token before it. The same function serves analysis, the cache models and the
gateway's router, so a hash computed in one place matches one computed in another.

Definition (all arithmetic modulo 2**64)::

    content(block) = mix(sum_k token_k * W_k + len * C)   (position weights W_k, splitmix64 finaliser)
    h[-1]          = seed
    h[i]           = h[i-1] * P + content(block i)

Because the chain step is linear in ``h[i-1]``, a whole trace's chains are computed
with no Python loop: with ``S[g] = sum_{j<=g} content[j] * P**-j`` over the
concatenated blocks of all prompts, a prompt whose first block sits at global index
``s`` has ``h[g] = P**g * (S[g] - S[s-1] + seed * P**-(s-1))``. ``P`` is odd, so its
inverse modulo 2**64 exists. The non-linear ``content`` keeps the structured
collisions of plain polynomial hashing (Thue-Morse strings) out of reach.

Only full blocks are hashed (what vLLM caches); per-token prefix hashes are the
``block_size_tokens=1`` case and give exact token-level prefix matching.

This module is kvroute's one block hash: one key scheme, whatever the block size (a
block's key is always ``chain_hashes(ids, block_size_tokens)``, never a sample of the
per-token chain), and every entry point here. The batch functions are numpy, fast over
a trace's many prompts; :func:`block_hashes` hashes one prompt with ``chainhash.c``
when its build is enabled (:mod:`kvroute._accel`) and numpy otherwise, and
:class:`ChainExtender` extends a per-token chain over a prompt's new tail with few numpy
calls (the gateway's router, per session).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kvroute import _accel
from kvroute.types import BlockHashes, TokenIds

HASH_SCHEME = "kvroute-chain-v1"
DEFAULT_SEED = 0x6B76726F75746531  # "kvroute1"

_P = np.uint64(0x9E3779B97F4A7C15)  # odd: invertible modulo 2**64
_P_INV = np.uint64(pow(0x9E3779B97F4A7C15, -1, 1 << 64))
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_POS = np.uint64(0xD6E8FEB86659FD93)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_ONE = np.uint64(1)

U64 = npt.NDArray[np.uint64]


def _mix(x: U64) -> U64:
    """splitmix64's finaliser, in place on a fresh array."""
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


@functools.lru_cache(maxsize=64)
def _weights(block_size_tokens: int) -> U64:
    """Odd, well-mixed 64-bit weights, one per position in a block (deterministic;
    memoised, read-only)."""
    pos = np.arange(1, block_size_tokens + 1, dtype=np.uint64)
    weights = _mix(pos * _POS) | _ONE  # array arithmetic wraps silently
    weights.setflags(write=False)
    return weights


def block_contents(tokens: npt.NDArray[np.integer], block_size_tokens: int) -> U64:
    """Content hash of each full block of ``tokens`` (a trailing partial block is ignored).

    A position-weighted sum of the block's tokens modulo 2**64 (one multiply per token,
    done as a contiguous 2-D pass), then splitmix64's non-linear finaliser per block.
    The block length is folded in so a partial block never equals a full one.
    """
    num_blocks = tokens.shape[0] // block_size_tokens
    weights = _weights(block_size_tokens)
    # Array arithmetic wraps modulo 2**64 silently; only scalar overflow would warn.
    if block_size_tokens == 1:
        acc = tokens.astype(np.uint64)
        acc *= weights[0]
    else:
        blocks = tokens[: num_blocks * block_size_tokens].reshape(num_blocks, block_size_tokens)
        weighted = blocks.astype(np.uint64)
        weighted *= weights
        acc = weighted.sum(axis=1, dtype=np.uint64)
    acc += np.uint64(block_size_tokens * int(_M2) % (1 << 64))
    return _mix(acc)


def _powers(base: np.uint64, n: int) -> U64:
    """``base**g`` for ``g < n``: a slice of a memoised table grown in powers of two."""
    return _power_table(int(base), max(1024, 1 << (n - 1).bit_length()))[:n]


@functools.lru_cache(maxsize=8)
def _power_table(base: int, n: int) -> U64:
    out = np.full(n, base, dtype=np.uint64)
    out[0] = _ONE
    np.multiply.accumulate(out, out=out)
    out.setflags(write=False)
    return out


def chain_contents(contents: U64, starts: npt.NDArray[np.int64], seed: int = DEFAULT_SEED) -> U64:
    """Chain per-block content hashes into prefix hashes, one chain per segment.

    ``contents`` holds the blocks of several prompts back to back; ``starts`` gives the
    index of each prompt's first block (ascending, ``starts[0] == 0`` when non-empty).
    """
    n = contents.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    p_pow = _powers(_P, n)  # P**g
    p_inv_pow = _powers(_P_INV, n + 1)  # P**-g, one extra for g = -1 below
    if starts.shape[0] == 1:
        # One prompt: h[g] = P**g * (S[g] + seed * P), with no segment bookkeeping.
        s = contents * p_inv_pow[:n]
        np.cumsum(s, dtype=np.uint64, out=s)
        s += np.uint64(seed * int(_P) % (1 << 64))
        s *= p_pow
        return s
    with np.errstate(over="ignore"):
        s = np.cumsum(contents * p_inv_pow[:n], dtype=np.uint64)
        # Per segment: subtract S[s-1] (0 for the first) and add seed * P**-(s-1).
        seg_len = np.diff(np.append(starts, n))
        prev_s = np.where(starts > 0, s[np.maximum(starts - 1, 0)], np.uint64(0))
        # P**-(s-1) == P * P**-s
        seed_term = np.uint64(seed) * (_P * p_inv_pow[starts])
        offset = np.repeat(seed_term - prev_s, seg_len)
        return (s + offset) * p_pow


def chain_hashes(
    tokens: npt.NDArray[np.integer], block_size_tokens: int, seed: int = DEFAULT_SEED
) -> BlockHashes:
    """Chained hashes of the full blocks of one prompt."""
    contents = block_contents(tokens, block_size_tokens)
    return chain_contents(contents, np.zeros(1, dtype=np.int64), seed)


def extend_chain_hashes(
    known: U64, tokens: npt.NDArray[np.integer], block_size_tokens: int, seed: int = DEFAULT_SEED
) -> BlockHashes:
    """``chain_hashes(tokens, ...)`` given ``known``, the hashes of a prefix of its full
    blocks (what an earlier, shorter prompt that ``tokens`` extends had): only the
    blocks after them are hashed, continuing the chain from the last known one."""
    if known.shape[0] == 0:
        return chain_hashes(tokens, block_size_tokens, seed)
    more = chain_hashes(
        tokens[known.shape[0] * block_size_tokens :], block_size_tokens, int(known[-1])
    )
    return np.concatenate((known, more)) if more.shape[0] else known


def chain_hashes_batch(
    tokens: npt.NDArray[np.integer],
    token_offsets: npt.NDArray[np.int64],
    block_size_tokens: int,
    seed: int = DEFAULT_SEED,
) -> tuple[U64, npt.NDArray[np.int64]]:
    """Chained block hashes for many prompts stored back to back.

    ``token_offsets`` has one more entry than there are prompts (CSR layout): prompt
    ``r`` is ``tokens[token_offsets[r]:token_offsets[r + 1]]``. Returns the hashes in
    the same layout and their offsets: prompt ``r``'s blocks are
    ``hashes[block_offsets[r]:block_offsets[r + 1]]``.
    """
    lengths = np.diff(token_offsets)
    blocks_per = lengths // block_size_tokens
    block_offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(blocks_per, out=block_offsets[1:])
    if block_size_tokens == 1:
        contents = block_contents(tokens, 1)
    else:
        # Gather each prompt's full-block tokens into one (total_blocks, B) matrix.
        idx = np.repeat(
            token_offsets[:-1] - block_offsets[:-1] * block_size_tokens,
            blocks_per * block_size_tokens,
        )
        idx += np.arange(idx.shape[0], dtype=np.int64)
        contents = block_contents(tokens[idx], block_size_tokens)
    nonempty = blocks_per > 0
    starts = block_offsets[:-1][nonempty]
    return chain_contents(contents, starts, seed), block_offsets


def extend_chain(
    parent_hash: int | None, block_tokens: npt.NDArray[np.integer], seed: int = DEFAULT_SEED
) -> int:
    """Hash of one more block given its parent's hash (``None`` for the first block).

    Scalar form of the same chain, for code that grows a prompt block by block.
    """
    parent = np.uint64(seed if parent_hash is None else parent_hash)
    content = block_contents(np.asarray(block_tokens), len(block_tokens))[0]
    with np.errstate(over="ignore"):
        return int(parent * _P + content)


def rechain_ids(
    ids: npt.NDArray[np.integer], starts: npt.NDArray[np.int64], seed: int = DEFAULT_SEED
) -> U64:
    """Chain opaque per-block ids (e.g. Mooncake ``hash_ids``) as 1-token blocks.

    Makes hash-only traces safe to compare even when a source reuses an id at two
    different positions: after re-chaining, equal values mean equal id prefixes.
    """
    return chain_contents(block_contents(ids.astype(np.uint64), 1), starts, seed)


KEYED_HASH_SCHEME = "kvroute-keyed-v1"
"""Exported traces: each chained hash above passed through a keyed PRF (BLAKE2b-64)."""
KEY_BYTES = 32


def key_id(key: bytes) -> str:
    """A public name of a secret key (16 hex digits): equal ids, same key. It reveals
    nothing of the key, so it can sit in a trace's header."""
    return hashlib.blake2b(key, digest_size=8, person=b"kvroute-key-id").hexdigest()


def keyed_hashes(hashes: BlockHashes, key: bytes) -> BlockHashes:
    """``hashes`` through a keyed pseudo-random function, one by one: each 64-bit hash
    (8 bytes, little-endian) hashed by BLAKE2b with ``key``, 8-byte digest, read
    little-endian.

    The chain stays a chain (equal inputs, equal outputs), but without the key nobody can
    compute the output for a guessed prompt. Each hash must go through the function:
    the unkeyed chain is linear in its parent (``h[i] = h[i-1] * P + content(block i)``),
    so hiding the seed alone (or keying only the first block) would not stop a guess
    being checked against a file (``h[i] - h[i-1] * P`` is block i's unkeyed content
    hash; ``tests/trace/test_keyed.py`` checks that keyed hashes do not give it away).
    """
    return np.array(keyed_values(hashes.tolist(), key), dtype=np.uint64)


def keyed_values(hashes: Sequence[int], key: bytes) -> list[int]:
    """:func:`keyed_hashes` of Python ints (what the capture worker holds), in C when
    ``chainhash.c`` is built (:func:`python_keyed_values` otherwise)."""
    if len(key) < 16:
        raise ValueError("a trace key needs at least 16 bytes")
    if _KEYED is not None:
        return _KEYED(hashes if type(hashes) is list else list(hashes), key)
    return python_keyed_values(hashes, key)


def python_keyed_values(hashes: Sequence[int], key: bytes) -> list[int]:
    """:func:`keyed_values` with :mod:`hashlib` (the fallback, and the tests' reference)."""
    keyed = hashlib.blake2b(digest_size=8, key=key)  # copied per hash: no keyword parsing
    out: list[int] = []
    for h in hashes:
        one = keyed.copy()
        one.update(h.to_bytes(8, "little"))
        out.append(int.from_bytes(one.digest(), "little"))
    return out


# -- one prompt: C when built -----------------------------------------------------

_MODULE = _accel.optional("kvroute.trace.chainhash")
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
_KEYED: Callable[[list[int], bytes], list[int]] | None = None if _MODULE is None else _MODULE.keyed


def native() -> tuple[Callable[[Any, int, int, bool], list[int]], Callable[[Any, Any], int]] | None:
    """The C ``block_hashes(tokens, block_size, parent, partial)`` and
    ``common_prefix(a, b)`` themselves, for callers that pass contiguous arrays and
    want no Python frame around each call (the capture worker, per record);
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


# -- a per-token chain, extended turn by turn -----------------------------------------

_MASK = (1 << 64) - 1
_P_INT = int(_P)
_TABLE_MAX_TOKENS = 1 << 20
"""Token ids below this get their content hash from the table (8 MiB at most)."""


@dataclass(frozen=True, slots=True)
class Chain:
    """Chained hashes of a prompt's tokens: ``buffer[:num_keys]``.

    The buffer may have room after them, where the hashes of a longer prompt that
    extends this one are written (never over the first ``num_keys``, which arrays
    handed out before may share).
    """

    buffer: U64
    num_keys: int

    @property
    def keys(self) -> U64:
        return self.buffer[: self.num_keys]


class ChainExtender:
    """Extends per-token chained hashes over a prompt's new tail, with few numpy calls.

    Holds the powers of the chain multiplier (and of its inverse) and the content hash
    of every token id up to the largest seen, as arrays grown on demand.
    """

    def __init__(self) -> None:
        self._powers = _powers(_P, 1024)
        self._inverse_powers = _powers(_P_INV, 1024)
        self._token_contents = block_contents(np.arange(1 << 16, dtype=np.uint64), 1)

    def extend(self, token_ids: TokenIds, known: Chain | None, *, room: bool = False) -> Chain:
        """The chain of ``token_ids``, where ``known`` (when given) is the chain of a
        prefix of them: only the tokens after it are hashed, into its buffer when it has
        room (else a new one, with room for later turns when ``room``)."""
        num_known = 0 if known is None else known.num_keys
        total = int(token_ids.shape[0])
        if known is not None and known.buffer.shape[0] >= total:
            buffer = known.buffer
        else:
            buffer = np.empty(total + (total // 4 + 64 if room else 0), dtype=np.uint64)
            if known is not None:
                buffer[:num_known] = known.keys
        if total > num_known:
            seed = int(buffer[num_known - 1]) if num_known else DEFAULT_SEED
            self._chain(self._contents(token_ids[num_known:]), seed, buffer[num_known:total])
        return Chain(buffer, total)

    def _contents(self, tokens: TokenIds) -> U64:
        """``block_contents(tokens, 1)``, from the table of each token's."""
        try:
            return self._token_contents[tokens]  # an id past the table raises
        except IndexError:
            top = int(tokens.max())
        if top >= _TABLE_MAX_TOKENS:
            return block_contents(tokens, 1)
        size = 1 << top.bit_length()
        table = self._token_contents = block_contents(np.arange(size, dtype=np.uint64), 1)
        return table[tokens]

    def _chain(self, contents: U64, seed: int, out: U64) -> None:
        """The chain over ``contents`` from a parent hash ``seed``, into ``out``:
        hashing's single-prompt ``chain_contents``, with the power tables at hand."""
        n = contents.shape[0]
        if n > self._powers.shape[0]:
            size = 1 << (n - 1).bit_length()
            self._powers, self._inverse_powers = _powers(_P, size), _powers(_P_INV, size)
        # h[g] = P**g * (P * seed + sum_{j<=g} contents[j] * P**-j), all modulo 2**64;
        # P * seed joins the first term, so the running sum carries it to every g.
        np.multiply(contents, self._inverse_powers[:n], out=out)
        out[0] = (int(out[0]) + seed * _P_INT) & _MASK
        np.add.accumulate(out, out=out)
        out *= self._powers[:n]


# -- many prompts, each from its own parent ------------------------------------------


def batch_block_hashes(
    token_ids: Sequence[TokenIds], block_size_tokens: int, parents: Sequence[int] | None = None
) -> list[list[int]]:
    """:func:`block_hashes` of each token sequence (partial last block included), its
    chain continuing from its parent's hash (``DEFAULT_SEED`` for a whole prompt),
    vectorised over the batch: all full blocks in one pass, moved onto their parents, then the partial last blocks
    grouped by length, each chained to its parent as ``h = parent * P + content``."""
    if not token_ids:
        return []
    if parents is None:
        parents = [DEFAULT_SEED] * len(token_ids)
    lengths = np.array([ids.shape[0] for ids in token_ids], dtype=np.int64)
    offsets = np.zeros(len(token_ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.concatenate(token_ids)
    full, block_offsets = chain_hashes_batch(tokens, offsets, block_size_tokens, DEFAULT_SEED)
    num_full = np.diff(block_offsets)
    seeds = np.array(parents, dtype=np.uint64)
    shift = seeds - np.uint64(DEFAULT_SEED)  # wraps modulo 2**64
    if shift.any() and full.shape[0]:
        local = np.arange(full.shape[0], dtype=np.int64) - np.repeat(block_offsets[:-1], num_full)
        full += np.repeat(shift, num_full) * _multiplier_powers(int(num_full.max()))[local]
    tail_lens = lengths - num_full * block_size_tokens
    has_full = num_full > 0
    seeds[has_full] = full[block_offsets[1:][has_full] - 1]
    tails = np.zeros(len(token_ids), dtype=np.uint64)
    rows = np.flatnonzero(tail_lens > 0)
    if rows.shape[0]:
        tails[rows] = _chain_step(
            seeds[rows], _tail_contents(tokens, offsets[1:][rows], tail_lens[rows])
        )
    # Python ints in one conversion each, then sliced per prompt.
    full_list: list[int] = full.tolist()
    tail_list: list[int] = tails.tolist()
    bounds: list[int] = block_offsets.tolist()
    out: list[list[int]] = []
    for i, tail_len in enumerate(tail_lens.tolist()):
        hashes = full_list[bounds[i] : bounds[i + 1]]
        if tail_len:
            hashes.append(tail_list[i])
        out.append(hashes)
    return out


def _tail_contents(
    tokens: npt.NDArray[np.uint32], ends: npt.NDArray[np.int64], tail_lens: npt.NDArray[np.int64]
) -> npt.NDArray[np.uint64]:
    """:func:`block_contents` of each partial block
    ``tokens[end - len:end]``, all lengths in one pass: a block's position weights do
    not depend on its length, so the blocks are laid in one zero-padded matrix (a zero
    token adds nothing to the weighted sum) and each row gets its own length term."""
    width = int(tail_lens.max())
    positions = np.arange(width, dtype=np.int64)
    inside = positions < tail_lens[:, None]
    idx = np.where(inside, (ends - tail_lens)[:, None] + positions, 0)
    weighted = np.where(inside, tokens[idx], 0).astype(np.uint64)
    weighted *= _weights(width)
    acc = weighted.sum(axis=1, dtype=np.uint64)
    acc += tail_lens.astype(np.uint64) * _M2  # wraps modulo 2**64, as the length term
    return _mix(acc)


def _chain_step(
    parents: npt.NDArray[np.uint64], contents: npt.NDArray[np.uint64]
) -> npt.NDArray[np.uint64]:
    """``parent * P + content`` per row (modulo 2**64)."""
    with np.errstate(over="ignore"):
        out: npt.NDArray[np.uint64] = parents * _multiplier_powers(1)[0] + contents
    return out


@functools.lru_cache(maxsize=32)
def _powers_table(size: int) -> npt.NDArray[np.uint64]:
    out = np.full(size, _P, dtype=np.uint64)
    np.multiply.accumulate(out, out=out)  # P**1 .. P**size, wrapping
    out.setflags(write=False)
    return out


def _multiplier_powers(n: int) -> npt.NDArray[np.uint64]:
    """``P**(k + 1)`` for ``k < n`` (a slice of a table grown in powers of two)."""
    return _powers_table(max(64, 1 << (n - 1).bit_length()))[:n]
