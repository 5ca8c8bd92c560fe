"""Measuring text the way datatrove 0.10.1's filters do, fast: datatrove's punctuation and
terminal punctuation, lines and paragraphs as it splits them, duplicates, and one document's word
n-grams as 64-bit hashes (`NGrams`, over the words of words.py). The rule sets of
gopher.py, c4.py and fineweb.py are built on these.

Contract: every count and length is exact. Hashes are only used to skip work: equal n-grams hash
equal, so a bound taken over hashes is over a superset of the real repeats; a document that a
bound does not clear is measured again from its words.
"""

from __future__ import annotations

import functools
from collections import Counter

import numpy as np

# datatrove.utils.text.TERMINAL_PUNCTUATION (0.10.1): what FineWeb's line check counts as a line's end
TERMINAL = '!.?\u0589\u061d\u061e\u061f\u06d4\u0700\u0701\u0702\u07f9\u0837\u0839\u083d\u083e\u0964\u0965\u104a\u104b\u1362\u1367\u1368\u166e\u1735\u1736\u17d4\u17d5\u17d6\u17d9\u17da\u1803\u1809\u1944\u1945\u1aa8\u1aa9\u1aaa\u1aab\u1b5a\u1b5b\u1b5e\u1b5f\u1b7d\u1b7e\u1c3b\u1c3c\u1c7e\u1c7f\u203c\u203d\u2047\u2048\u2049\u2e2e\u2e3c\u2e53\u2e54\u3002\ua4ff\ua60e\ua60f\ua6f3\ua6f7\ua876\ua877\ua8ce\ua8cf\ua92f\ua9c8\ua9c9\uaa5d\uaa5e\uaa5f\uaaf0\uaaf1\uabeb\ufe52\ufe56\ufe57\uff01\uff0e\uff1f\uff61\U00010a56\U00010a57\U00010f55\U00010f56\U00010f57\U00010f58\U00010f59\U00010f86\U00010f87\U00010f88\U00010f89\U00011047\U00011048\U000110be\U000110bf\U000110c0\U000110c1\U00011141\U00011142\U00011143\U000111c5\U000111c6\U000111cd\U000111de\U000111df\U00011238\U00011239\U0001123b\U0001123c\U000112a9\U0001144b\U0001144c\U000115c2\U000115c3\U000115c9\U000115ca\U000115cb\U000115cc\U000115cd\U000115ce\U000115cf\U000115d0\U000115d1\U000115d2\U000115d3\U000115d4\U000115d5\U000115d6\U000115d7\U00011641\U00011642\U0001173c\U0001173d\U0001173e\U00011944\U00011946\U00011a42\U00011a43\U00011a9b\U00011a9c\U00011c41\U00011c42\U00011ef7\U00011ef8\U00011f43\U00011f44\U00016a6e\U00016a6f\U00016af5\U00016b37\U00016b38\U00016b44\U00016e98\U0001bc9f\U0001da88'
# datatrove.utils.text.PUNCTUATION_SET: PUNCTUATION (its full-width "１" included) and TERMINAL, less
# whitespace, which no word holds
PUNCT_CHARS = "!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»" + "".join(
    chr(c) for c in [*range(9), *range(11, 32), *range(127, 160)] if not chr(c).isspace()) + TERMINAL
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
    """One document's word n-grams as 64-bit hashes (made for one call, then dropped). Two kinds,
    as datatrove compares them: `top` keys an n-gram by its words (" ".join), `duplicate_chars`
    by their characters alone ("".join: "ab c" is "a bc"). `top`'s `base` is the smallest n of its
    checks: what it finds there bounds every larger n."""

    def __init__(self, words: list[str]):
        self.words, self.n_words = words, len(words)
        joined = "".join(words)
        cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), np.uint32)
        lens = np.fromiter(map(len, words), np.int64, len(words))
        self.cum = np.concatenate(([0], np.cumsum(lens)))  # characters in the first i words
        self.longest = int(lens.max()) if len(lens) else 0
        self.power = powers(max(len(cps), 1 << 15).bit_length())
        self.prefix = np.zeros(len(cps) + 1, dtype=np.uint64)  # polynomial hashes of the prefixes
        np.cumsum(cps * self.power[:len(cps)], out=self.prefix[1:])
        self.hash = {1: self.chars(1)}
        self.shift = np.uint64(64 - (8 * len(words)).bit_length())  # buckets: load <= 1/8
        self.sizes: dict[tuple[str, int], np.ndarray] = {}
        self.maybe: dict[int, np.ndarray] = {}
        self.cover: dict[int, int] = {}

    def chars(self, n: int) -> np.ndarray:
        """Per position, the hash of its n words' characters run together."""
        start, end = self.cum[:len(self.cum) - n], self.cum[n:]
        return (self.prefix[end] - self.prefix[start]) * self.power[self.cum[-1] - start]

    def of(self, n: int) -> np.ndarray:
        """Per position, the hash of its n words as a sequence."""
        if n not in self.hash:
            self.hash[n] = self.of(n - 1)[:-1] * MIX + self.hash[1][n - 1:]
        return self.hash[n]

    def bucket_sizes(self, kind: str, n: int) -> np.ndarray:
        """Per n-gram, how many share its bucket: no fewer than are equal to it."""
        if (kind, n) not in self.sizes:
            b = ((self.of(n) if kind == "words" else self.chars(n)) >> self.shift).astype(np.intp)
            self.sizes[kind, n] = np.bincount(b, minlength=1 << (64 - int(self.shift)))[b]
        return self.sizes[kind, n]

    def top(self, n: int, base: int, limit: float, chars: int) -> float | None:
        """datatrove's top n-gram share (count x length of the most frequent, the first seen of
        equals), or None when a bound of it is within `limit` (no n-gram is more frequent than the
        base-gram it starts with, nor longer than n of the longest word)."""
        if not int(self.bucket_sizes("words", base).max()) * (n * self.longest + n - 1) / chars > limit:
            return None
        lengths = self.cum[n:] - self.cum[:-n] + (n - 1)
        if any(not int((self.bucket_sizes("words", m)[:len(lengths)] * lengths).max()) / chars > limit
               for m in {base, n}):
            return None
        gram, count = Counter(zip(*(self.words[i:] for i in range(n)))).most_common(1)[0]
        return count * len(" ".join(gram)) / chars

    def repeats(self, n: int) -> np.ndarray:
        """Sorted positions of every n-gram whose characters occur twice or more (and rarely a few
        others), and in `cover` the characters of their words."""
        if n not in self.maybe:
            at = np.flatnonzero(self.bucket_sizes("chars", n) > 1)
            h = self.chars(n)[at]
            order = np.argsort(h, kind="stable")
            same = h[order[1:]] == h[order[:-1]]
            keep = np.zeros(len(at) + 1, dtype=bool)
            keep[order[1:][same]] = keep[order[:-1][same]] = True
            at = self.maybe[n] = at[keep[:-1]]
            self.cover[n] = int((self.cum[np.minimum(at + n, np.append(at[1:], self.n_words))] - self.cum[at]).sum())
        return self.maybe[n]

    def duplicate_chars(self, n: int, limit: float, chars: int) -> float | None:
        """datatrove's duplicate n-gram share (left to right, an n-gram equal to one seen counts
        its characters and skips its words), or None when a bound of it is within `limit`."""
        if not self.repeats(n).size or not self.cover[n] / chars > limit:
            return None
        seen: set[str] = set()
        dup = after = 0
        for p in self.maybe[n].tolist():  # the n-grams between these occur once: they never match, nor skip
            if p >= after:
                gram = "".join(self.words[p:p + n])
                if gram in seen:
                    dup, after = dup + len(gram), p + n
                seen.add(gram)
        return dup / chars
