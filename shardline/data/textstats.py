"""Measuring text the way datatrove's filters do, fast: str.split's tokens, datatrove's
punctuation, lines and paragraphs as it splits them, duplicates, and one document's word n-grams
as 64-bit hashes (`NGrams`). The rule sets of `shardline.data.quality` are built on these.

Contract: every count and length is exact. Hashes are only used to skip work: equal n-grams hash
equal, so a bound taken over hashes is over a superset of the real repeats; a document that a
bound does not clear is measured again from its words.
"""

from __future__ import annotations

import functools
import re
from collections import Counter

import numpy as np

# datatrove.utils.text.PUNCTUATION (its full-width "１" included), less whitespace: a token has none
PUNCT_CHARS = "!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»" + "".join(
    chr(c) for c in [*range(9), *range(11, 32), *range(127, 160)] if not chr(c).isspace())
PUNCT = re.compile("[" + re.escape(PUNCT_CHARS) + "]+")
SPACE, PUNCTUATION, LETTER = 1, 2, 4
BASE, MIX = np.uint64(0x100000001B3), np.uint64(0x9E3779B97F4A7C15)  # odd: FNV's prime, the golden ratio


@functools.cache
def classes() -> np.ndarray:
    """Per code point: SPACE as str.split sees it, PUNCTUATION (datatrove's), LETTER (str.isalpha).
    Built once per process (~0.2 s); a lookup per character is ~15x faster than str methods per word."""
    cls = np.fromiter(map(str.isspace, map(chr, range(0x110000))), np.uint8, 0x110000)
    cls[[ord(c) for c in PUNCT_CHARS]] |= PUNCTUATION
    cls |= np.fromiter(map(str.isalpha, map(chr, range(0x110000))), np.uint8, 0x110000) * np.uint8(LETTER)
    return cls


def classed(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Code points, their classes, and which are not whitespace."""
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
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


@functools.lru_cache(maxsize=2)
def powers(bits: int) -> np.ndarray:
    power = np.full(1 << bits, BASE, dtype=np.uint64)
    power[0] = 1
    return np.cumprod(power, out=power)  # BASE ** i (mod 2**64)


class NGrams:
    """One document's word n-grams as 64-bit hashes (made for one call, then dropped). A method's
    `base` is the smallest n of its checks: what it finds there bounds every larger n."""

    def __init__(self, text: str):
        cps, _, starts, ends = tokens(text)
        self.text, self.n_words, lens = text, len(starts), ends - starts
        self.cum = np.concatenate(([0], np.cumsum(lens)))  # characters in the first i words
        self.longest = int(lens.max()) if len(lens) else 0
        power = powers(max(len(cps), 1 << 15).bit_length())
        prefix = np.zeros(len(cps) + 1, dtype=np.uint64)  # polynomial hashes of the text's prefixes
        np.cumsum(cps * power[:len(cps)], out=prefix[1:])
        self.hash = {1: (prefix[ends] - prefix[starts]) * power[len(cps) - starts]}  # a word's, times one power
        self.shift = np.uint64(64 - (8 * len(starts)).bit_length())  # buckets: load <= 1/8
        self.sizes: dict[int, np.ndarray] = {}
        self.maybe: dict[int, np.ndarray] = {}
        self.cover: dict[int, int] = {}

    @functools.cached_property
    def words(self) -> list[str]:  # only to measure what the hashes cannot rule out
        return self.text.split()

    def of(self, n: int) -> np.ndarray:
        if n not in self.hash:
            self.hash[n] = self.of(n - 1)[:-1] * MIX + self.hash[1][n - 1:]
        return self.hash[n]

    def bucket_sizes(self, n: int) -> np.ndarray:
        """Per n-gram, how many share its bucket: no fewer than are equal to it."""
        if n not in self.sizes:
            b = (self.of(n) >> self.shift).astype(np.intp)
            self.sizes[n] = np.bincount(b, minlength=1 << (64 - int(self.shift)))[b]
        return self.sizes[n]

    def top(self, n: int, base: int, limit: float, chars: int) -> float | None:
        """datatrove's top n-gram share (count x length of the most frequent, the first seen of
        equals), or None when a bound of it is within `limit` (no n-gram is more frequent than the
        base-gram it starts with, nor longer than n of the longest word)."""
        if not int(self.bucket_sizes(base).max()) * (n * self.longest + n - 1) / chars > limit:
            return None
        lengths = self.cum[n:] - self.cum[:-n] + (n - 1)
        if any(not int((self.bucket_sizes(m)[:len(lengths)] * lengths).max()) / chars > limit for m in {base, n}):
            return None
        gram, count = Counter(zip(*(self.words[i:] for i in range(n)))).most_common(1)[0]
        return count * len(" ".join(gram)) / chars

    def repeats(self, n: int, base: int) -> np.ndarray:
        """Sorted positions of every n-gram that occurs twice or more (and rarely a few others), and
        in `cover` the characters of their words (spaces not counted)."""
        if n not in self.maybe:
            if n > base:  # a repeated n-gram starts and ends with repeated (n-1)-grams
                prev = np.zeros(self.n_words - n + 2, dtype=bool)
                prev[self.repeats(n - 1, base)] = True
                at = np.flatnonzero(prev[:-1] & prev[1:])
            else:
                at = np.flatnonzero(self.bucket_sizes(n) > 1)
            h = self.of(n)[at]
            order = np.argsort(h, kind="stable")
            same = h[order[1:]] == h[order[:-1]]
            keep = np.zeros(len(at) + 1, dtype=bool)
            keep[order[1:][same]] = keep[order[:-1][same]] = True
            at = self.maybe[n] = at[keep[:-1]]
            self.cover[n] = int((self.cum[np.minimum(at + n, np.append(at[1:], self.n_words))] - self.cum[at]).sum())
        return self.maybe[n]

    def covered(self, n: int, base: int) -> int:
        self.repeats(n, base)
        return self.cover[n]

    def duplicate_chars(self, n: int, base: int, limit: float, chars: int) -> float | None:
        """datatrove's duplicate n-gram share (left to right, an n-gram equal to one seen counts
        its characters and skips its words), or None when a bound of it is within `limit`."""
        if any(not self.covered(m, base) / chars > limit for m in (base, n)):
            return None
        seen: set[tuple[str, ...]] = set()
        dup = after = 0
        for p in self.maybe[n].tolist():  # the n-grams between these occur once: they never match, nor skip
            if p >= after:
                gram = tuple(self.words[p:p + n])
                if gram in seen:
                    dup, after = dup + sum(map(len, gram)), p + n
                seen.add(gram)
        return dup / chars
