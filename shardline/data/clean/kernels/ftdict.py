"""fastText's dictionary, compiled: a token's bytes to its word id or its subwords' rows, for
fasttext.py and lid.py (which builds the dictionary's arrays from the model file).

Contract: each function does what the fastText 0.9.2 function it names does (fasttext-predict
builds that code): `fnv` is Dictionary::hash, `subwords` computeSubwords with pushHash, `find`
Dictionary::find (+ word2int_), `is_space` the bytes getLine splits tokens on; `is_label` says
whether an unknown token is a label, which getLine leaves out of the input.
"""

from __future__ import annotations

import numba
import numpy as np

from shardline.data.clean.kernels.compiled import same

_LABEL_BYTES = np.frombuffer(b"__label__", np.uint8)  # an unknown token starting so is a label, not an input


@numba.njit(cache=True)
def fnv(data, start, end, h):
    """fastText's hash: FNV-1a over bytes read as signed chars (uint32)."""
    for i in range(start, end):
        b = np.uint32(data[i])
        if b >= 128:
            b |= np.uint32(0xFFFFFF00)
        h = np.uint32((h ^ b) * np.uint32(16777619))
    return h


@numba.njit(cache=True)
def subwords(word, minn, maxn, bucket, prune, nwords, out, n_out):
    """Dictionary::computeSubwords over `word` (the token between '<' and '>'), each n-gram's
    bucket through the pruning map (pushHash), appended to out[n_out:]; returns the new length."""
    size = word.size
    for i in range(size):
        if (word[i] & 0xC0) == 0x80:
            continue
        h = np.uint32(2166136261)
        j, n = i, 1
        while j < size and n <= maxn:
            h = fnv(word, j, j + 1, h)
            j += 1
            while j < size and (word[j] & 0xC0) == 0x80:
                h = fnv(word, j, j + 1, h)
                j += 1
            if n >= minn and not (n == 1 and (i == 0 or j == size)):
                row = prune[np.int64(h % np.uint32(bucket))]
                if row >= 0:
                    out[n_out] = nwords + row
                    n_out += 1
            n += 1
    return n_out


@numba.njit(cache=True)
def find(data, start, end, h, table, wbytes, wptr):
    """Dictionary::find + word2int_: the word's id, or -1."""
    size = table.size
    at = np.int64(h % np.uint32(size))
    while table[at] != -1:
        w = table[at]
        a, b = wptr[w], wptr[w + 1]
        if b - a == end - start and same(wbytes, a, data, start, end - start):
            return w
        at = (at + 1) % size
    return -1


@numba.njit(cache=True)
def is_space(c):
    return c == 32 or c == 10 or c == 13 or c == 9 or c == 11 or c == 12 or c == 0


@numba.njit(cache=True)
def is_label(data, start, end):
    """Whether the token data[start:end], not in the dictionary, is a label ("__label__..."): not an input."""
    if end - start < 9:
        return False
    for k in range(9):
        if data[start + k] != _LABEL_BYTES[k]:
            return False
    return True
