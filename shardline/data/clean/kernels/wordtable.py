"""The compiled table of whitespace spans and their words: the arrays words.py's spaCy answers are
kept in, per process, and read by compiled code (wordsplit.py's `Table` owns them).

Contract: `add(cps, classes, a, b, rel, ...)` stores a span's (or a run's) code points and its words
(rel: (start, end) pairs in the span, spaCy's answers), giving each distinct word an id and its
flags (`flags`: `NONSYMBOL`, `LETTER`, `FINAL`, `PUNCT`, `HAS_SPACE`) and textstats' polynomial
hash; False when the table is full (its owner empties it and starts again). `_find` is where an
entry is, or -1 - the free slot it would take. Equal words get equal ids and different words
different ones while the table is not emptied.

Layout: a slot per entry (its hash, where it is in the arena, its key's length, its number of
words and the meeting sides of its first and last word, and a payload another module may attach:
`attach`, `payload`; lid.py keeps a span's fastText input rows there, so that a document's
spans are looked up once for both), and an arena holding each entry's code points followed by its words
(start, end, id | flags << 24): a span is found and read in two or three cache lines.
Why arrays and numba: a Python object per word (str.split, a dict lookup, a list) is most of
what splitting costs once the spans are known; here a 5 KB document is split with none.
"""

from __future__ import annotations

import numba
import numpy as np

from shardline.data.clean.kernels import textstats as ts
from shardline.data.clean.kernels.compiled import same

NONSYMBOL, LETTER, FINAL, PUNCT, HAS_SPACE = 1, 2, 4, 8, 16  # a word's flags
_EMPTY = -1
_SIDES = 12  # bits of a meeting side's number (+1) in a slot; the sides number a few hundred


@numba.njit(cache=True, inline="always")
def _hash(cps, a, b):
    """FNV-1a over the code points, then murmur3's finalizer (FNV alone leaves short keys'
    high bits alike: linear probing then walked 13 slots on average)."""
    h = np.uint64(0xCBF29CE484222325)
    for i in range(a, b):
        h = (h ^ np.uint64(cps[i])) * np.uint64(0x100000001B3)
    return _mix(h)


@numba.njit(cache=True, inline="always")
def _mix(h):
    h = (h ^ (h >> np.uint64(33))) * np.uint64(0xFF51AFD7ED558CCD)
    h = (h ^ (h >> np.uint64(33))) * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


@numba.njit(cache=True, inline="always")
def _find(cps, a, b, h, slots, arena):
    """The slot of the entry whose key is cps[a:b], or -1 - (the free slot where it would go).
    A slot: [hash, arena start, key length << 40 | (what the table keeps)]."""
    mask = slots.shape[0] - 1
    at = np.int64(h >> np.uint64(20)) & mask
    n = b - a
    while slots[at, 1] != _EMPTY:
        if np.uint64(slots[at, 0]) == h and (slots[at, 2] >> 40) == n and same(arena, slots[at, 1], cps, a, n):
            return at
        at = (at + 1) & mask
    return -1 - at


@numba.njit(cache=True)
def flags(cps, classes, a, b):
    """The flags of the word cps[a:b] (`classes`: textstats.classes())."""
    some, letter, punct, space = False, False, True, False
    for i in range(a, b):
        c = classes[cps[i]]
        some |= (c & (ts.SPACE | ts.PUNCTUATION)) == 0
        letter |= (c & ts.LETTER) != 0
        punct &= (c & ts.SPACY_P) != 0
        space |= (c & ts.SPACE) != 0
    f = (NONSYMBOL if some else 0) | (LETTER if letter else 0) | (PUNCT if punct and b > a else 0)
    f |= HAS_SPACE if space else 0
    if b - a == 1 and (classes[cps[a]] & ts.FINAL) != 0:
        f |= FINAL
    return f


@numba.njit(cache=True)
def _word(cps, a, b, wslots, warena, wpoly, state):
    """The id of the word cps[a:b], added if new; -1 when the word table is full."""
    h = _hash(cps, a, b)
    at = _find(cps, a, b, h, wslots, warena)
    if at >= 0:
        return wslots[at, 2] & 0xFF_FFFF
    wid = state[3]
    if state[2] + b - a > warena.size or 2 * (wid + 1) > wslots.shape[0] or wid >= 1 << 24:
        return -1
    at = -1 - at
    for i in range(b - a):
        warena[state[2] + i] = cps[a + i]
    wslots[at, 0], wslots[at, 1], wslots[at, 2] = np.int64(h), state[2], (b - a) << 40 | wid
    poly = np.uint64(0)
    for i in range(a, b):  # its polynomial hash, as textstats hashes n-grams' characters run together
        poly = poly * ts.BASE + np.uint64(cps[i])
    wpoly[wid] = poly
    state[2] += b - a
    state[3] += 1
    return wid


@numba.njit(cache=True)
def add(cps, classes, a, b, rel, slots, arena, wslots, warena, wpoly, left, right, state):
    """Put span (or run) cps[a:b] with its words (`rel`: (start, end) pairs in it) in the table;
    False when it is full (what it added then is left unreferenced until the table is emptied)."""
    h = _hash(cps, a, b)
    at = _find(cps, a, b, h, slots, arena)
    if at >= 0:
        return True
    n = rel.shape[0]
    start = state[0]
    if start + (b - a) + 3 * n > arena.size or 2 * (state[1] + 1) > slots.shape[0] or n >= 1 << 16 or b - a >= 1 << 23:
        return False
    for i in range(b - a):
        arena[start + i] = cps[a + i]
    w = start + b - a
    first = last = 0
    for k in range(n):
        wid = _word(cps, a + rel[k, 0], a + rel[k, 1], wslots, warena, wpoly, state)
        if wid < 0:
            return False
        arena[w + 3 * k] = rel[k, 0]
        arena[w + 3 * k + 1] = rel[k, 1]
        arena[w + 3 * k + 2] = np.uint32(wid) | np.uint32(flags(cps, classes, a + rel[k, 0], a + rel[k, 1])) << np.uint32(24)
        if k == 0:
            first = right[wid] + 1
        if k == n - 1:
            last = left[wid] + 1
    at = -1 - at
    slots[at, 0], slots[at, 1] = np.int64(h), start
    slots[at, 2] = (b - a) << 40 | n << (2 * _SIDES) | last << _SIDES | first
    slots[at, 3] = _EMPTY  # the payload another module may attach (lid.py: fastText's rows)
    state[0] = w + 3 * n
    state[1] += 1
    return True
