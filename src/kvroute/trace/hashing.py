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
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np
import numpy.typing as npt

from kvroute.types import BlockHashes

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
    """``hashes`` through a keyed pseudo-random function, one by one.

    The chain stays a chain (equal inputs, equal outputs), but without the key nobody can
    compute the output for a guessed prompt: the unkeyed chain is linear in its seed, so
    hiding the seed alone would not stop a guess being checked against a file.
    """
    if len(key) < 16:
        raise ValueError("a trace key needs at least 16 bytes")
    out = np.empty(hashes.shape[0], dtype=np.uint64)
    raw = hashes.astype("<u8").tobytes()
    for i in range(hashes.shape[0]):
        digest = hashlib.blake2b(raw[8 * i : 8 * i + 8], digest_size=8, key=key).digest()
        out[i] = int.from_bytes(digest, "little")
    return out
