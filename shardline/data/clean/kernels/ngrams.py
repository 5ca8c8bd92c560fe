"""Word n-grams hashed for benchmark decontamination: what an evaluation set's index holds and a
training document is looked up by (rules/decontam.py).

Contract:
- `words(text)`: lowercase, then the maximal runs of `\\w` (re's Unicode word characters). A
  benchmark question copied onto a web page comes back with other capitals, quotes, dashes,
  markup and spacing; comparing words alone keeps those differences from hiding the copy.
- `ngram_hashes(text, n)`: one 64-bit hash per window of n consecutive words, in word order (so
  the i-th hash starts at word i). Deterministic across processes and machines (never the salted
  `hash()`): it is what an index on disk is compared with. The arithmetic is fixed (pinned in the
  tests); the words follow this Python's Unicode tables (`str.lower`, `\w`), so a new Unicode
  version may split a rare non-ASCII word differently: build the index with the run's Python.
  A text of fewer than n words has no n-gram and gives an empty array: it can neither
  contaminate nor be contaminated (an eval item that short is not looked for at all).
- `HASH_VERSION` names the arithmetic: indexes on disk are keyed by it (stage/inputs.py).

Hashing: a word's hash is a polynomial in its code points modulo 2^64 (odd base, so its prefix
sums can be divided back out: every word is hashed with a few numpy passes over the whole text,
not a Python call per word), finished with murmur3's fmix64; an n-gram's hash is a polynomial in
its words' hashes. A clean document is dropped by a collision with probability about
(its n-grams x the index's) / 2^64: ~5e-10 for 10^4 words against 10^6 eval n-grams.
"""

from __future__ import annotations

import functools
import re

import numpy as np

_U64 = np.uint64

HASH_VERSION = 1  # bump when ngram_hashes changes: indexes on disk are keyed by it (stage/inputs.py)
_P = 0x9E3779B97F4A7C15  # word base: odd, so invertible modulo 2^64
_Q = 0xC2B2AE3D27D4EB4F  # n-gram base
_BATCH = 1 << 20  # characters hashed at once: bounds the prefix arrays (8 bytes a character each)
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


@functools.cache
def _word_table() -> np.ndarray:
    """Per code point: is it `\\w` as re decides (built from re itself, once per process, ~0.05 s)."""
    every = "".join(map(chr, range(0x110000)))
    left = re.sub(r"\w", "\x00", every).encode("utf-32-le", "surrogatepass")
    table = np.frombuffer(left, np.uint32) == 0
    table[0] = False  # NUL was NUL before the substitution
    return table


def _powers(length: int, base: int = _P) -> tuple[np.ndarray, np.ndarray]:
    """base^i and base^-i for i < length (base odd: invertible modulo 2^64)."""
    out = []
    for b in (base, pow(base, -1, 1 << 64)):
        p = np.full(length, b, _U64)
        p[0] = 1
        out.append(np.cumprod(p))  # wraps modulo 2^64, as wanted
    return out[0], out[1]


# powers of two only, a few sizes: one huge document must not stay pinned in every worker
_cached_powers = functools.lru_cache(maxsize=16)(_powers)


def _fmix(x: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finaliser, in place: a word's polynomial has weak low bits (they depend on
    the low bits of its code points only); after this every bit depends on every bit."""
    x ^= x >> _U64(33)
    x *= _U64(0xFF51AFD7ED558CCD)
    x ^= x >> _U64(33)
    x *= _U64(0xC4CEB9FE1A85EC53)
    x ^= x >> _U64(33)
    return x


def _codes(low: str) -> np.ndarray:
    if low.isascii():  # a quarter of the memory traffic of UTF-32
        return np.frombuffer(low.encode("ascii"), np.uint8)
    return np.frombuffer(low.encode("utf-32-le", "surrogatepass"), np.uint32)


def _word_hashes(text: str) -> np.ndarray:
    codes = _codes(text.lower())
    inword = np.zeros(len(codes) + 2, bool)  # padded: every word has a start edge and an end edge
    # into the padding: 2x np.diff(prepend, append); 'clip' (never needed: code points < 0x110000)
    # spares the buffered copy that 'raise' makes when out is given
    np.take(_word_table(), codes, out=inword[1:-1], mode="clip")
    edges = np.flatnonzero(inword[1:] != inword[:-1])
    starts, ends = edges[0::2], edges[1::2]
    out = np.empty(len(starts), _U64)
    a = 0
    while a < len(starts):  # batches of whole words (one batch unless the text is over _BATCH)
        b = len(starts) if ends[-1] - starts[a] <= _BATCH else \
            max(int(np.searchsorted(ends, starts[a] + _BATCH, "right")), a + 1)
        lo, hi = int(starts[a]), int(ends[b - 1])
        size = hi - lo
        pw, inv = _cached_powers(1 << size.bit_length()) if size <= _BATCH else _powers(size)  # one long word
        prefix = np.zeros(size + 1, _U64)  # prefix[i]: sum of code[j] * P^j for j < i
        np.cumsum(codes[lo:hi] * pw[:size], out=prefix[1:])
        s, e = starts[a:b] - lo, ends[a:b] - lo
        out[a:b] = (prefix[e] - prefix[s]) * inv[s]  # / P^start: the same word, the same hash, anywhere
        a = b
    return _fmix(out)


def ngram_hashes(text: str, n: int) -> np.ndarray:
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    with np.errstate(over="ignore"):
        w = _word_hashes(text)
        m = len(w) - n + 1
        if m <= 0:
            return np.empty(0, _U64)
        # g_i = sum_k w[i+k] Q^(n-1-k), from one prefix sum of w_t Q^-t: Q is odd, so Q^-t exists
        # modulo 2^64 and the windows come out exact, in 5 passes instead of 2n
        pw, inv = _cached_powers(1 << (len(w) + n).bit_length(), _Q)
        prefix = np.zeros(len(w) + 1, _U64)
        np.cumsum(w * inv[:len(w)], out=prefix[1:])
        return (prefix[n:] - prefix[:m]) * pw[n - 1:n - 1 + m]
