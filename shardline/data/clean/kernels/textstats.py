"""Measuring text the way datatrove 0.10.1's filters do, fast: datatrove's punctuation and
terminal punctuation, lines and paragraphs as it splits them, duplicates, and a document's word
n-grams (compiled, over the words of words.py). The rule sets of
gopher.py, c4.py and fineweb.py are built on these.

Contract: every count and length is exact. Hashes only choose where to look: n-grams found equal
by hash are compared by their word ids or characters before they count.
"""

from __future__ import annotations

import functools
import unicodedata

import numba
import numpy as np

from shardline.data.clean.kernels import spacylib
from shardline.data.clean.kernels.compiled import same

# datatrove.utils.text.TERMINAL_PUNCTUATION (0.10.1): what FineWeb's line check counts as a line's end
TERMINAL = '!.?\u0589\u061d\u061e\u061f\u06d4\u0700\u0701\u0702\u07f9\u0837\u0839\u083d\u083e\u0964\u0965\u104a\u104b\u1362\u1367\u1368\u166e\u1735\u1736\u17d4\u17d5\u17d6\u17d9\u17da\u1803\u1809\u1944\u1945\u1aa8\u1aa9\u1aaa\u1aab\u1b5a\u1b5b\u1b5e\u1b5f\u1b7d\u1b7e\u1c3b\u1c3c\u1c7e\u1c7f\u203c\u203d\u2047\u2048\u2049\u2e2e\u2e3c\u2e53\u2e54\u3002\ua4ff\ua60e\ua60f\ua6f3\ua6f7\ua876\ua877\ua8ce\ua8cf\ua92f\ua9c8\ua9c9\uaa5d\uaa5e\uaa5f\uaaf0\uaaf1\uabeb\ufe52\ufe56\ufe57\uff01\uff0e\uff1f\uff61\U00010a56\U00010a57\U00010f55\U00010f56\U00010f57\U00010f58\U00010f59\U00010f86\U00010f87\U00010f88\U00010f89\U00011047\U00011048\U000110be\U000110bf\U000110c0\U000110c1\U00011141\U00011142\U00011143\U000111c5\U000111c6\U000111cd\U000111de\U000111df\U00011238\U00011239\U0001123b\U0001123c\U000112a9\U0001144b\U0001144c\U000115c2\U000115c3\U000115c9\U000115ca\U000115cb\U000115cc\U000115cd\U000115ce\U000115cf\U000115d0\U000115d1\U000115d2\U000115d3\U000115d4\U000115d5\U000115d6\U000115d7\U00011641\U00011642\U0001173c\U0001173d\U0001173e\U00011944\U00011946\U00011a42\U00011a43\U00011a9b\U00011a9c\U00011c41\U00011c42\U00011ef7\U00011ef8\U00011f43\U00011f44\U00016a6e\U00016a6f\U00016af5\U00016b37\U00016b38\U00016b44\U00016e98\U0001bc9f\U0001da88'
# datatrove.utils.text.PUNCTUATION_SET: PUNCTUATION (its full-width "１" included) and TERMINAL, less
# whitespace, which no word holds
PUNCT_CHARS = "!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»" + "".join(
    chr(c) for c in [*range(9), *range(11, 32), *range(127, 160)] if not chr(c).isspace()) + TERMINAL
SPACE, PUNCTUATION, LETTER, SPACY_P, FINAL, ASCII_LETTER, ASCII_DIGIT, NOT_FASTTEXT = 1, 2, 4, 8, 16, 32, 64, 128
FASTTEXT_SPACE = " \n\r\t\x0b\x0c\x00"  # what fastText's tokenizer splits on
BASE, MIX = np.uint64(0x100000001B3), np.uint64(0x9E3779B97F4A7C15)  # odd: FNV's prime, the golden ratio
UNBASE = np.uint64(pow(int(BASE), -1, 2**64))  # BASE * UNBASE = 1 (mod 2**64)
_POWERS = np.array([pow(int(BASE), k, 2**64) for k in range(64)], np.uint64)
_UNPOWERS = np.array([pow(int(UNBASE), k, 2**64) for k in range(64)], np.uint64)


@functools.cache
def classes() -> np.ndarray:
    """Per code point: SPACE as str.split sees it, PUNCTUATION (datatrove's), LETTER (str.isalpha),
    SPACY_P (a Unicode punctuation category, P*: spaCy's is_punct), FINAL (a sentence-final
    character of spaCy's sentencizer), ASCII_LETTER (A-Z, a-z), ASCII_DIGIT (0-9), NOT_FASTTEXT
    (where str.split's spans are not fastText's tokens: whitespace to only one of them, as NUL or
    U+00A0, and surrogates, which have no UTF-8). Built once per process (~0.5 s);
    a lookup per character is ~15x faster than str methods per word."""
    cls = plain_classes().copy()
    cls[[ord(c) for c in spacylib.spacy().pipeline.sentencizer.Sentencizer.default_punct_chars]] |= FINAL
    return cls


@functools.cache
def plain_classes() -> np.ndarray:
    """`classes()` but FINAL, which alone needs spaCy: the basic rules (lines.py) read these, so
    the default line, which runs only those, never imports spaCy (the quality extra's)."""
    every = list(map(chr, range(0x110000)))
    cls = np.fromiter(map(str.isspace, every), np.uint8, 0x110000)
    cls[[ord(c) for c in PUNCT_CHARS]] |= PUNCTUATION
    cls |= np.fromiter(map(str.isalpha, every), np.uint8, 0x110000) * np.uint8(LETTER)
    categories = np.fromiter((unicodedata.category(c)[0] == "P" for c in every), np.uint8, 0x110000)
    cls |= categories * np.uint8(SPACY_P)
    cls[[*range(65, 91), *range(97, 123)]] |= ASCII_LETTER
    cls[48:58] |= ASCII_DIGIT
    fasttext = np.zeros(0x110000, np.bool_)
    fasttext[[ord(c) for c in FASTTEXT_SPACE]] = True
    cls[(cls & SPACE != 0) != fasttext] |= NOT_FASTTEXT
    cls[0xD800:0xE000] |= NOT_FASTTEXT
    return cls


def code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)


def classed(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Code points, their classes, and which are not whitespace."""
    cps = code_points(text)
    cls = classes()[cps]
    return cps, cls, cls != SPACE


def tokens(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Code points, their classes, and each token's start and end (exclusive): str.split's tokens."""
    cps, cls, word = classed(text)
    flips = np.flatnonzero(word[1:] != word[:-1]) + 1  # token starts and ends, alternately
    if len(word) and word[0]:
        flips = np.concatenate(([0], flips))
    if len(word) and word[-1]:
        flips = np.append(flips, len(word))
    return cps, cls, flips[0::2], flips[1::2]


def count_tokens(text: str) -> int:
    word = classed(text)[2]
    return int(np.count_nonzero(word[1:] > word[:-1])) + bool(len(word) and word[0])


def ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def duplicates(items: list[str]) -> tuple[int, int]:
    """(items equal to an earlier one, their characters): datatrove's find_duplicates, for which
    every occurrence of an item but its first is a duplicate."""
    if len(set(map(len, items))) == len(items):  # all lengths differ: nothing to hash
        return 0, 0
    first = set(items)
    return len(items) - len(first), sum(map(len, items)) - sum(map(len, first))


def paragraphs(text: str) -> list[str]:
    """re.split(r"\n{2,}", text.strip()) as datatrove splits, 5x faster: a run of k newlines leaves
    str.split("\n\n") k // 2 - 1 empty parts and, k odd, a newline before the next."""
    parts = (text := text.strip()).split("\n\n")
    return ([p[1:] if p[:1] == "\n" else p for p in parts if p] or [""]) if "\n\n\n" in text else parts


def lines(text: str) -> list[str]:
    """re.split(r"\n+", text) as datatrove splits: str.split less the empty lines inside."""
    parts = text.split("\n")
    return [parts[0], *filter(None, parts[1:-1]), parts[-1]] if len(parts) > 2 and "\n\n" in text else parts


@numba.njit(cache=True)
def _top(ids, lengths, n, table, count):
    """(count, characters of " ".join) of the most frequent n-gram, the first seen among equally
    frequent ones; n-grams told apart by their ids, hashes only choosing where to look."""
    m = ids.size - n + 1
    size = 1
    while size < 2 * m:
        size <<= 1
    table[:size] = -1  # the first position of the n-gram kept in each slot
    count[:m] = 0  # per first position
    best, at_best = 0, -1
    for p in range(m):
        h = np.uint64(0)
        for k in range(n):
            h = (h ^ np.uint64(ids[p + k])) * MIX
        at = np.int64(h >> np.uint64(33)) & (size - 1)
        while table[at] != -1:
            if same(ids, table[at], ids, p, n):
                break
            at = (at + 1) & (size - 1)
        if table[at] == -1:
            table[at] = p
        q = table[at]
        count[q] += 1
        if count[q] > best or (count[q] == best and q < at_best):
            best, at_best = count[q], q
    chars = n - 1
    for k in range(n):
        chars += lengths[at_best + k]
    return best, chars


@numba.njit(cache=True)
def top_ngrams(ids, lengths, ns, limits, chars):
    """datatrove's find_top_duplicate share (count x characters of " ".join / `chars`) for each n
    of `ns` in turn, up to the first above its limit; -1 where there are fewer than n words, and 0
    where a bound keeps it within its limit without counting (no n-gram is more frequent than the
    most frequent (n - 1)-gram counted before, nor longer than n of the longest word)."""
    out = np.full(ns.size, -1.0)
    size = 1
    while size < 2 * ids.size + 2:
        size <<= 1
    table = np.empty(size, np.int64)
    count = np.empty(ids.size + 1, np.int64)
    longest = 0
    for i in range(lengths.size):
        longest = max(longest, lengths[i])
    most, most_n = 0, 0  # the highest count of the most_n-grams, the smallest n counted so far
    for t in range(ns.size):
        n = ns[t]
        if ids.size < n:
            continue
        if 0 < most_n < n and most * (n * longest + n - 1) / chars <= limits[t]:
            out[t] = 0.0
            continue
        best, size_n = _top(ids, lengths, n, table, count)
        out[t] = best * size_n / chars
        if most_n == 0 or n < most_n:
            most, most_n = best, n
        if out[t] > limits[t]:
            break
    return out


@numba.njit(cache=True, inline="always")
def _same_chars(cps, starts, ends, p, q, n):
    """Whether words p..p+n and q..q+n hold the same characters once run together."""
    i, j = p, q
    a, b = starts[i], starts[j]
    while i < p + n and j < q + n:
        if cps[a] != cps[b]:
            return False
        a += 1
        b += 1
        if a == ends[i]:
            i += 1
            a = starts[i] if i < p + n else 0
        if b == ends[j]:
            j += 1
            b = starts[j] if j < q + n else 0
    return i == p + n and j == q + n


@numba.njit(cache=True)
def word_polys(cps, starts, ends):
    """Each word's polynomial hash of its characters (BASE: h * BASE + c), as the word table keeps it."""
    out = np.empty(starts.size, np.uint64)
    for i in range(starts.size):
        h = np.uint64(0)
        for k in range(starts[i], ends[i]):
            h = h * BASE + np.uint64(cps[k])
        out[i] = h
    return out


@numba.njit(cache=True)
def dup_ngram_chars(cps, starts, ends, polys, ns):
    """datatrove's find_all_duplicate(words, n) for each n of `ns`: scanning left to right, an
    n-gram whose characters ("".join: "ab c" is "a bc") equal those of one seen is counted and
    its words skipped, else remembered. Exact: an n-gram found by its polynomial hash (that of its
    characters run together, from each word's: `polys`) is compared character by character
    before it counts."""
    w = starts.size
    # prefix[i]: the polynomial hash of words 0..i run together; power[i], unpower[i]: BASE to the
    # power of (and to minus) their characters, so that words p..p+n hash in O(1) (BASE is odd,
    # hence invertible modulo 2**64)
    prefix = np.zeros(w + 1, np.uint64)
    power = np.ones(w + 1, np.uint64)
    unpower = np.ones(w + 1, np.uint64)
    cum = np.zeros(w + 1, np.int64)  # characters of words 0..i
    up, down = _POWERS, _UNPOWERS  # BASE ** k and UNBASE ** k for short words: no loop over characters
    for i in range(w):
        size = ends[i] - starts[i]
        if size < up.size:
            pw, upw = up[size], down[size]
        else:
            pw, upw = np.uint64(1), np.uint64(1)
            for k in range(size):
                pw *= BASE
                upw *= UNBASE
        prefix[i + 1], power[i + 1], unpower[i + 1] = prefix[i] * pw + polys[i], power[i] * pw, unpower[i] * upw
        cum[i + 1] = cum[i] + size
    out = np.zeros(ns.size, np.int64)
    size = 1
    while size < 2 * w + 2:
        size <<= 1
    held = np.empty(size, np.uint64)  # an n-gram's hash (0: empty; a hash of 0 is taken as 1)
    first = np.empty(size, np.int64)  # where that n-gram was first seen
    hs = np.empty(w + 1, np.uint64)
    for t in range(ns.size):
        n = ns[t]
        m = w - n + 1
        if m <= 0:
            continue
        for i in range(m):  # every n-gram's hash first: independent, so the core overlaps them
            hs[i] = prefix[i + n] - prefix[i] * power[i + n] * unpower[i]
            hs[i] += hs[i] == 0
        held[:] = 0
        idx = repeated = 0
        while idx < m:
            h = hs[idx]
            at = np.int64((h * MIX) >> np.uint64(33)) & (size - 1)
            found = False
            while held[at] != 0:
                if held[at] == h and _same_chars(cps, starts, ends, first[at], idx, n):
                    found = True
                    break
                at = (at + 1) & (size - 1)
            if found:
                repeated += cum[idx + n] - cum[idx]
                idx += n
            else:
                held[at], first[at] = h, idx
                idx += 1
        out[t] = repeated
    return out


@numba.njit(cache=True)
def present(cps, starts, ends, targets, bounds):
    """How many of the target strings (code points `targets`, string i at bounds[i]:bounds[i + 1])
    are among the words."""
    found = 0
    for t in range(bounds.size - 1):
        a, b = bounds[t], bounds[t + 1]
        for i in range(starts.size):
            if ends[i] - starts[i] == b - a and same(cps, starts[i], targets, a, b - a):
                found += 1
                break
    return found
