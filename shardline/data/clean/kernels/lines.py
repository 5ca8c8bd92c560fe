"""A text's lines and paragraphs as the rules split them, measured by compiled code.

Contract: every function gives exactly what the Python it names gives on the same text:
- `segments(text, k, strip)`: where re.split(r"\\n{k,}", text.strip() if strip else text) cuts
  (datatrove's paragraphs are k=2 over the stripped text, its lines k=1), as (starts, ends) in
  code points of `text`;
- `duplicates(cps, starts, ends)`: datatrove's find_duplicates over those pieces: how many equal
  an earlier one, and their characters;
- `line_stats(text)`: what the basic rules measure, in one pass: the longest line of
  text.split("\\n"), the non-blank stripped lines and how many of them repeat an earlier one (the
  same split, str.strip), letters and spaces as re's classes have them, U+FFFD, and whether the
  whitespace rule or strip_control would change the text.
Equal pieces are found by hash and compared character by character: hashes only choose where to look.
"""

from __future__ import annotations

import functools
import re

import numba
import numpy as np

from shardline.data.clean.kernels import textstats as ts
from shardline.data.clean.kernels.compiled import same

NL = 10
LETTER = r"[^\W\d_]"  # what min_alpha_fraction counts as a letter, and as whitespace: re's own classes
SPACE = r"\s"


@functools.cache
def _classes() -> tuple[np.ndarray, np.ndarray]:
    """Per code point: is it a LETTER, is it a SPACE, as re decides (built once per process, ~0.3 s):
    counting through these tables is ~18x faster than re.findall and gives the same numbers."""
    every = "".join(map(chr, range(0x110000)))

    def where(pattern: str) -> np.ndarray:  # each match becomes NUL, so positions stay code points
        left = re.sub(pattern, "\x00", every).encode("utf-32-le", "surrogatepass")
        hit = np.frombuffer(left, np.uint32) == 0
        hit[0] = re.match(pattern, "\x00") is not None  # NUL was NUL before the substitution too
        return hit

    return where(LETTER), where(SPACE)


@functools.cache
def re_table() -> np.ndarray:
    """Per code point: 1 for a LETTER, 2 for a SPACE, as re decides (`_classes`)."""
    letter, space = _classes()
    return letter.astype(np.uint8) | (space.astype(np.uint8) << 1)


@numba.njit(cache=True, inline="always")
def _hash(cps, a, b):
    """Of the length and at most 8 characters at each end: equal pieces hash equal, and pieces
    that only share these are told apart by the full comparison (a long line costs no pass)."""
    h = np.uint64(0xCBF29CE484222325) ^ np.uint64(b - a)
    for i in range(a, min(b, a + 8)):
        h = (h ^ np.uint64(cps[i])) * np.uint64(0x100000001B3)
    for i in range(max(a + 8, b - 8), b):
        h = (h ^ np.uint64(cps[i])) * np.uint64(0x100000001B3)
    h = (h ^ (h >> np.uint64(33))) * np.uint64(0xFF51AFD7ED558CCD)
    return h ^ (h >> np.uint64(33))


@numba.njit(cache=True)
def duplicates(cps, starts, ends):
    """(pieces equal to an earlier one, their characters): datatrove's find_duplicates."""
    n = starts.size
    size = 8
    while size < 2 * n:
        size <<= 1
    table = np.full(size, -1, np.int64)
    held = np.empty(size, np.uint64)
    dup = chars = 0
    for i in range(n):
        a, b = starts[i], ends[i]
        h = _hash(cps, a, b)
        at = np.int64(h >> np.uint64(40)) & (size - 1)
        found = False
        while table[at] != -1:
            j = table[at]
            if held[at] == h and ends[j] - starts[j] == b - a and same(cps, starts[j], cps, a, b - a):
                found = True
                break
            at = (at + 1) & (size - 1)
        if found:
            dup += 1
            chars += b - a
        else:
            table[at], held[at] = i, h
    return dup, chars


@numba.njit(cache=True)
def _segments(cps, k, lo, hi):
    """re.split(r"\\n{k,}", cps[lo:hi]): each maximal run of k or more newlines cuts."""
    starts = np.empty((hi - lo) // k + 2, np.int64)
    ends = np.empty((hi - lo) // k + 2, np.int64)
    n, start, i = 0, lo, lo
    while i < hi:
        if cps[i] != NL:
            i += 1
            continue
        j = i
        while j < hi and cps[j] == NL:
            j += 1
        if j - i >= k:
            starts[n], ends[n] = start, i
            n += 1
            start = j
        i = j
    starts[n], ends[n] = start, hi
    return starts[:n + 1], ends[:n + 1]


@numba.njit(cache=True)
def _strip(cps, classes, a, b):
    """str.strip's bounds of cps[a:b]."""
    while a < b and classes[cps[a]] & ts.SPACE:
        a += 1
    while b > a and classes[cps[b - 1]] & ts.SPACE:
        b -= 1
    return a, b


def segments(text: str, k: int, strip: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(code points, starts, ends) of re.split(r"\\n{k,}", text.strip() if strip else text)."""
    cps = ts.code_points(text)
    lo, hi = _strip(cps, ts.plain_classes(), 0, cps.size) if strip else (0, cps.size)
    return (cps, *_segments(cps, k, lo, hi))


@numba.njit(cache=True)
def pieces(cps, classes):
    """[paragraphs, of them repeats, their characters, lines, repeats, characters]: datatrove's
    re.split(r"\n{2,}", text.strip()) and re.split(r"\n+", text) with find_duplicates, at once."""
    out = np.empty(6, np.int64)
    lo, hi = _strip(cps, classes, 0, cps.size)
    for at, (k, a, b) in enumerate(((2, lo, hi), (1, 0, cps.size))):
        starts, ends = _segments(cps, k, a, b)
        dup, chars = duplicates(cps, starts, ends)
        out[3 * at], out[3 * at + 1], out[3 * at + 2] = starts.size, dup, chars
    return out


def piece_duplicates(text: str, k: int, strip: bool) -> tuple[int, int, int]:
    """(pieces, duplicates, their characters) of the text cut as `segments` cuts it."""
    cps, starts, ends = segments(text, k, strip)
    dup, chars = duplicates(cps, starts, ends)
    return starts.size, int(dup), int(chars)


_LETTER, _SPACE, _CONTROL, _CR, _NL, _BLANK = 1, 2, 4, 8, 16, 32  # `low`'s bits (_low)


@functools.cache
def _low(re_table: bytes) -> np.ndarray:
    """Per code point below 256: re's LETTER (1) and SPACE (2) as `re_table` has them, a control
    character strip_control removes (4), CR (8), LF (16), a space or tab (32)."""
    low = np.frombuffer(re_table, np.uint8)[:256].copy()
    low[[*range(9), 11, 12, *range(14, 32), *range(0x7F, 0xA0)]] |= _CONTROL
    low[13] |= _CR
    low[10] |= _NL
    low[[32, 9]] |= _BLANK
    return low


@numba.njit(cache=True)
def _line_stats(cps, classes, re_table, low):
    """[longest line, non-blank stripped lines, of them repeats, letters, spaces, U+FFFD, changes]:
    `changes` bit 1: whitespace would change the text; bit 2: strip_control would."""
    n = cps.size
    letters = spaces = fffd = changes = longest = 0
    lines = np.empty(n + 1, np.int64)  # stripped non-blank lines: starts, ends
    ends = np.empty(n + 1, np.int64)
    m = start = newlines = 0
    blank_before = False
    for i in range(n):
        c = cps[i]
        if c < 256:
            f = low[c]
        else:
            f = re_table[c]
            fffd += c == 0xFFFD
        letters += f & _LETTER
        spaces += (f >> 1) & 1
        if f & (_CONTROL | _CR | _NL):
            if f & _CONTROL:
                changes |= 2
            if f & _CR:
                changes |= 1
            if f & _NL:
                newlines += 1
                if blank_before or newlines >= 4:  # " \n", "\t\n"; four newlines in a row
                    changes |= 1
                longest = max(longest, i - start)
                a, b = _strip(cps, classes, start, i)
                if b > a:
                    lines[m], ends[m] = a, b
                    m += 1
                start = i + 1
                blank_before = False
                continue
        newlines = 0
        blank_before = (f & _BLANK) != 0
    longest = max(longest, n - start)
    a, b = _strip(cps, classes, start, n)
    if b > a:
        lines[m], ends[m] = a, b
        m += 1
    if n and (classes[cps[n - 1]] & ts.SPACE or cps[0] == NL):  # rstrip() or lstrip("\n") would cut
        changes |= 1
    dup, _ = duplicates(cps, lines[:m], ends[:m])
    out = np.empty(7, np.int64)
    out[0], out[1], out[2], out[3], out[4], out[5], out[6] = longest, m, dup, letters, spaces, fffd, changes
    return out


@numba.njit(cache=True)
def _whitespace(cps, classes):
    """The whitespace rule on code points, in one pass: CR LF and CR become LF, spaces and tabs
    before an LF go, a run of four or more LFs (once those went) becomes three; then str.rstrip()
    and lstrip("\\n")."""
    out = np.empty(cps.size, np.uint32)
    n = 0
    i = 0
    while i < cps.size:
        c = cps[i]
        i += 1
        if c == 13:  # CR
            if i < cps.size and cps[i] == NL:
                i += 1
            c = NL
        if c == NL:
            while n and (out[n - 1] == 32 or out[n - 1] == 9):
                n -= 1
            run = 0  # LFs ending the output now
            while run < 3 and n - run > 0 and out[n - run - 1] == NL:
                run += 1
            if run == 3:  # a fourth in a row
                continue
        out[n] = c
        n += 1
    a, b = 0, n
    while b > a and classes[out[b - 1]] & ts.SPACE:
        b -= 1
    while a < b and out[a] == NL:
        a += 1
    return out[a:b]


def whitespace(text: str) -> str:
    """The whitespace rule's text (basic.whitespace), from one compiled pass when it changes."""
    if not line_stats(text)[6]:
        return text
    return _whitespace(ts.code_points(text), ts.plain_classes()).tobytes().decode("utf-32-le", "surrogatepass")


@functools.cache
def _tables() -> tuple[np.ndarray, np.ndarray]:
    table = re_table()
    return table, _low(table.tobytes())


@functools.lru_cache(maxsize=2)
def line_stats(text: str) -> tuple[int, ...]:
    """The basic rules' measures of `text` (see the module docstring), shared by the rules that
    read the same text: (longest line, non-blank lines, repeats, letters, spaces, U+FFFD,
    whitespace would change it, strip_control would)."""
    table = _tables()
    s = _line_stats(ts.code_points(text), ts.plain_classes(), *table).tolist()
    return (*s[:6], bool(s[6] & 1), bool(s[6] & 2))
