"""A text's words through the word table (wordtable.py): the fast half of words.py.

Contract: a `Table` (one per process) maps a span's code points (a str.split span, or a run of
spans that spaCy must see whole) to its words, each as (start, end) in the span, an id and its
flags (wordtable.py's `NONSYMBOL`, `LETTER`, `FINAL`, `PUNCT`, `HAS_SPACE`). Equal words get equal ids
and different words different ones within a document (the table may be emptied between
documents, never during one). `Table.words(cps, learn)` returns a text's words as words.py's
contract says (spaCy's tokens, stripped, empty ones left out): (starts, ends, ids, flags, polys), one
entry per word, in code points; None when the text holds more than an empty table can. What it
has not seen it asks `learn` for: `learn(cps, missing)` gives each missing span's or run's words
as (start, end) pairs (spaCy's answers, words.py). Two kinds of span are answered here without
spaCy: ASCII letters alone, or ASCII digits alone, not one of spaCy's special cases, are one word
(spaCy's English prefixes, suffixes, infixes and URL pattern match no such span, and no special
case is made of digits: tests/unit/test_words.py checks both on the loaded spaCy). A run: spans
where the last word of one and the first of the next can meet across the whitespace in a
multi-word special case of spaCy's (words.py's `_pairs`), which spaCy must tokenize together.
"""

from __future__ import annotations

import numba
import numpy as np

from shardline.data.clean.kernels import textstats as ts
from shardline.data.clean.kernels.wordtable import _EMPTY, _SIDES, _find, _hash, _mix, _word, add

_OK, _FULL = 0, -1  # split's status: the words, or the table must be emptied first (else: how many to learn)


@numba.njit(cache=True, inline="always")
def _plain(cps, a, b):
    """ASCII letters alone, or ASCII digits alone."""
    c = cps[a]
    if 48 <= c <= 57:
        for i in range(a + 1, b):
            if not 48 <= cps[i] <= 57:
                return False
        return True
    for i in range(a, b):
        c = cps[i] | 32  # ASCII upper case to lower; nothing else lands in a-z
        if not 97 <= c <= 122 or cps[i] > 127:
            return False
    return True


@numba.njit(cache=True)
def split(cps, classes, slots, arena, wslots, warena, wpoly, left, right, pairs, state):
    """(status, starts, ends, ids, flags, polys, missing, spans): status _OK with the words (and
    each word's polynomial hash: textstats.word_polys); _FULL when the
    table must be emptied first; else how many spans (or, once every span is known, runs) to
    learn, as (start, end) rows of `missing`. `spans`: each span's start, end and slot, and a last
    row (odd, 0, 0): odd when the spans are not fastText's tokens (ts.NOT_FASTTEXT)."""
    n = cps.size
    ss = np.empty(n // 2 + 1, np.int64)
    se = np.empty(n // 2 + 1, np.int64)
    m = i = odd = 0
    hs = np.empty(n // 2 + 1, np.uint64)  # each span's _hash, made as it is read
    while i < n:
        while i < n and (classes[cps[i]] & ts.SPACE) != 0:
            odd |= classes[cps[i]] & ts.NOT_FASTTEXT
            i += 1
        if i >= n:
            break
        ss[m] = i
        h = np.uint64(0xCBF29CE484222325)
        while i < n:
            c = classes[cps[i]]
            if c & ts.SPACE:
                break
            odd |= c & ts.NOT_FASTTEXT
            h = (h ^ np.uint64(cps[i])) * np.uint64(0x100000001B3)
            i += 1
        se[m] = i
        hs[m] = _mix(h)
        m += 1
    none = np.empty(0, np.int64)
    entry = np.empty(m, np.int64)
    info = np.empty(m, np.int64)  # the entry's slot[2], then its arena start: read once
    missing = np.empty((m, 2), np.int64)
    misses = count = 0
    one = np.zeros((1, 2), np.int64)
    for s in range(m):
        a, b = ss[s], se[s]
        h = hs[s]
        at = _find(cps, a, b, h, slots, arena)
        if at < 0 and _plain(cps, a, b):  # not a special case: those are in the table
            one[0, 1] = b - a
            if not add(cps, classes, a, b, one, slots, arena, wslots, warena, wpoly, left, right, state):
                return _FULL, none, none, none, none.astype(np.uint8), none.astype(np.uint64), missing[:0], missing[:0]
            at = _find(cps, a, b, h, slots, arena)
        if at < 0:
            missing[misses, 0], missing[misses, 1] = a, b
            misses += 1
        else:
            info[s] = slots[at, 2]
        entry[s] = at
    if misses:
        return misses, none, none, none, none.astype(np.uint8), none.astype(np.uint64), missing[:misses], missing[:0]
    spans = np.empty((m + 1, 3), np.int64)
    for s in range(m):
        spans[s, 0], spans[s, 1], spans[s, 2] = ss[s], se[s], entry[s]
    spans[m, 0], spans[m, 1], spans[m, 2] = odd, 0, 0
    side = (1 << _SIDES) - 1
    run_end = np.full(m, -1, np.int64)  # at a run's first span: its last span
    s = runs = 0
    while s < m:  # spans meeting in a special case are one entry, found under their whole text
        e = s
        while e + 1 < m:
            lo, hi = (info[e] >> _SIDES) & side, info[e + 1] & side
            if not (lo and hi and pairs[lo - 1, hi - 1]):
                break
            e += 1
        if e > s:
            a, b = ss[s], se[e]
            at = _find(cps, a, b, _hash(cps, a, b), slots, arena)
            if at < 0:
                missing[runs, 0], missing[runs, 1] = a, b
                runs += 1
            entry[s], run_end[s] = at, e
            if at >= 0:
                info[s] = slots[at, 2]
        if runs == 0:
            count += (info[s] >> (2 * _SIDES)) & 0xFFFF
        s = e + 1
    if runs:
        return runs, none, none, none, none.astype(np.uint8), none.astype(np.uint64), missing[:runs], missing[:0]
    starts = np.empty(count, np.int64)
    ends = np.empty(count, np.int64)
    ids = np.empty(count, np.int64)
    flag = np.empty(count, np.uint8)
    poly = np.empty(count, np.uint64)
    k = s = 0
    while s < m:
        w = slots[entry[s], 1] + (info[s] >> 40)
        for j in range((info[s] >> (2 * _SIDES)) & 0xFFFF):
            starts[k] = ss[s] + arena[w + 3 * j]
            ends[k] = ss[s] + arena[w + 3 * j + 1]
            ids[k] = arena[w + 3 * j + 2] & 0xFF_FFFF
            flag[k] = arena[w + 3 * j + 2] >> 24
            poly[k] = wpoly[ids[k]]
            k += 1
        s = max(s, run_end[s]) + 1
    return _OK, starts, ends, ids, flag, poly, missing[:0], spans


class Table:
    """One process's spans and words (about 40 MB at most; emptied, then refilled, when full)."""

    def __init__(self, fixed, members, slots: int = 1 << 19, arena: int = 1 << 23):
        """`fixed`: (span, words as (start, end) pairs) that must be in the table before any
        plain span is answered without spaCy (its special cases); `members`: (left, right,
        pairs): the words that can meet across whitespace, as pairs[left index, right index]."""
        self.fixed, (self.left_words, self.right_words, self.pairs) = fixed, members
        assert max(len(self.left_words), len(self.right_words)) < (1 << _SIDES) - 1
        self.slots, self.arena = np.empty((slots, 4), np.int64), np.empty(arena, np.uint32)
        self.wslots, self.warena = np.empty((slots, 3), np.int64), np.empty(arena // 2, np.uint32)
        self.wpoly = np.empty(slots // 2, np.uint64)  # per word id: textstats' polynomial hash of it
        self.left, self.right = np.empty(slots // 2, np.int64), np.empty(slots // 2, np.int64)
        self.state = np.zeros(4, np.int64)  # arena used, entries; word arena used, words
        self.generation = 0  # how many times it was emptied: a span's slot is valid within one
        self.payload = np.empty(arena // 2, np.int32)  # what spans' payloads (slot column 3) point into
        self.payload_used = np.zeros(1, np.int64)
        self.payload_owner = None
        self.reset()

    def reset(self) -> None:
        self.slots[:, 1], self.wslots[:, 1], self.state[:] = _EMPTY, _EMPTY, 0
        self.payload_used[0], self.generation = 0, self.generation + 1
        self.left[:], self.right[:] = -1, -1
        for side, words in ((self.left, self.left_words), (self.right, self.right_words)):
            for number, word in enumerate(words):
                cps = ts.classed(word)[0]
                side[_word(cps, 0, len(cps), self.wslots, self.warena, self.wpoly, self.state)] = number
        for span, rel in self.fixed:
            cps = ts.classed(span)[0]
            if not add(cps, ts.classes(), 0, len(cps), rel, *self._arrays()[:-1], self.state):
                raise AssertionError("the word table cannot hold spaCy's special cases")

    def _arrays(self) -> tuple:
        return self.slots, self.arena, self.wslots, self.warena, self.wpoly, self.left, self.right, self.pairs

    def attach(self, owner) -> None:
        """Let `owner` hang payloads on spans (one owner at a time: another's are dropped)."""
        if self.payload_owner is not owner:
            self.slots[:, 3], self.payload_used[0], self.payload_owner = _EMPTY, 0, owner

    def words(self, cps: np.ndarray, learn) -> tuple[np.ndarray, ...] | None:
        """(starts, ends, ids, flags, polys, spans) (split's), or None."""
        classes = ts.classes()
        for _ in range(4):  # learn spans, then runs, then (once) start again in an emptied table
            status, starts, ends, ids, flag, poly, missing, spans = split(cps, classes, *self._arrays(), self.state)
            if status == _OK:
                return starts, ends, ids, flag, poly, spans
            if status == _FULL:
                self.reset()
                continue
            for (a, b), rel in zip(missing.tolist(), learn(cps, missing)):
                if not add(cps, classes, a, b, rel, *self._arrays()[:-1], self.state):
                    self.reset()
                    break
        return None
