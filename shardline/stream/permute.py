"""A keyed, stateless permutation of range(n): the shuffle of a source's blocks in one epoch.

Contract: `Permutation(n, key)(i)` is a bijection of [0, n) for every key, computed for a
whole numpy array of indices at once, in O(1) memory: nothing is built or stored per element,
so a resume at any position costs the same as a start. Construction: a 4-round (unbalanced
when the bit count is odd) Feistel network on the fewest bits covering n, with cycle-walking
(apply again until the value falls in [0, n); the domain is < 2n, so under two passes per
element on average).
Keys come from `key_for(seed, source, epoch)`: every epoch of every source is a fresh order.
"""

from __future__ import annotations

import hashlib

import numpy as np

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
ROUNDS = 4


def key_for(seed: int, source: str, epoch: int) -> int:
    digest = hashlib.blake2b(f"{seed}\0{source}\0{epoch}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a cheap, well-spread 64-bit hash."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


class Permutation:
    def __init__(self, n: int, key: int):
        if n < 1:
            raise ValueError("a permutation needs n >= 1")
        self.n = n
        bits = max(2, (n - 1).bit_length())
        self.widths = (bits // 2, bits - bits // 2)  # (left, right); they swap every round
        ks = _mix(np.arange(1, ROUNDS + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(key))
        self.keys = [np.uint64(k) for k in ks]

    def _rounds(self, x: np.ndarray) -> np.ndarray:
        lw, rw = self.widths
        for k in self.keys:
            left, right = x >> np.uint64(rw), x & np.uint64((1 << rw) - 1)
            # (L, R) -> (R, L ^ F(R)): a bijection whatever F is; the halves' widths swap
            x = (right << np.uint64(lw)) | (left ^ (_mix(right ^ k) & np.uint64((1 << lw) - 1)))
            lw, rw = rw, lw
        return x

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        x = self._rounds(np.asarray(idx, dtype=np.uint64))
        out = x >= np.uint64(self.n)
        while out.any():  # cycle-walk: stays a bijection on [0, n)
            x[out] = self._rounds(x[out])
            out = x >= np.uint64(self.n)
        return x.astype(np.int64)
