"""Quality rule sets: datatrove's GopherRepetitionFilter, GopherQualityFilter, C4QualityFilter and
FineWebQualityFilter as FineWeb's recipe runs them, each one cleaning rule (see rules.py).

Contract: `build(gopher_quality, gopher_repetition, c4, fineweb)` returns the enabled sets (None is
off) in FineWeb's order: gopher_repetition, gopher_quality, c4, fineweb. A rule's `name` is its
set's; `checks` are its enabled checks, "<set>.<field>" in the order they run (".<n>" added for an
n-gram pair: gopher_repetition.top_n_grams.2). It returns the text, or the first failing check's
Drop(check, measured, limit) (ratios rounded to 4 places, as in rules.py). C4 also transforms: it
returns the text less the lines its line checks remove, or Drop("c4.all_lines_removed", 0, 1).
Rules are frozen dataclasses holding only their settings.

Datatrove's definitions and comparisons are kept (which side of a limit drops, how lines and
paragraphs split, what is stripped, the order), except:
- Words are whitespace tokens (str.split), not NLTK's tokenizer, which splits off punctuation and
  contractions (and is ~50x slower). Gopher quality counts a token as a word when it has a
  character outside datatrove's punctuation set, and measures lengths and matches stop words with
  those characters deleted ("be," is "be", as the tokenizer gives). Ratios over all tokens see
  fewer tokens, punctuation attached: '#' and ellipses per token and FineWeb's newlines per word
  come out a little higher (stricter), the share of tokens with a letter higher (more lenient).
- Duplicate n-grams are keyed by their words; datatrove joins them without spaces, so "ab c"
  equals "a bc" there. Their characters are counted without spaces, as there.
- C4 counts sentences by a regex, not NLTK's punkt: one ends at a run of . ! ? (closing quotes or
  brackets may follow) before whitespace or the line's end, but not at a '.' after an initial or
  Mr, Mrs, Ms, Dr, Prof, St, Jr, Sr, vs, e.g, i.e, cf; a kept line holds at least one. Lines are
  always the unit (datatrove's split_paragraph=True).
- Where datatrove divides by zero (no tokens, no lines), the share is 0; FineWeb's newlines per
  word divide by at least 1.
Speed: characters are classed and tokens found with numpy, and n-grams compared by 64-bit hashes,
so ordinary prose passes without a Python loop over its words. Values stay exact: equal n-grams
hash equal, so hashes only over-count; a text passes on such an upper bound or is measured again
from its words.
"""

import functools
import re
from collections import Counter
from dataclasses import dataclass
from operator import methodcaller

import numpy as np

from shardline.core.sections_quality import C4, FineWeb, GopherQuality, GopherRepetition
from shardline.data.rules import Drop, Rule

# datatrove.utils.text.PUNCTUATION (its full-width "１" included), less whitespace: a token has none
_PUNCT_CHARS = "!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»" + "".join(
    chr(c) for c in [*range(9), *range(11, 32), *range(127, 160)] if not chr(c).isspace())
_PUNCT = re.compile("[" + re.escape(_PUNCT_CHARS) + "]+")
_SPACE, _PUNCTUATION, _LETTER = 1, 2, 4
_BASE, _MIX = np.uint64(0x100000001B3), np.uint64(0x9E3779B97F4A7C15)  # odd: FNV's prime, the golden ratio
_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
_ABBREVIATIONS = ("[A-Z]", "Mr", "Mrs", "Ms", "Dr", "Prof", "St", "Jr", "Sr", "vs", r"e\.g", r"i\.e", "cf")
_SENTENCE_END = re.compile(r"(?:\." + "".join(rf"(?<!\b{a}\.)" for a in _ABBREVIATIONS) +
                           r"|[!?])[.!?]*[\"'”’)\]]*(?=\s|$)")


@functools.cache
def _classes() -> np.ndarray:
    """Per code point: _SPACE as str.split sees it, _PUNCTUATION (datatrove's), _LETTER (str.isalpha).
    Built once per process (~0.2 s); a lookup per character is ~15x faster than str methods per word."""
    cls = np.fromiter(map(str.isspace, map(chr, range(0x110000))), np.uint8, 0x110000)
    cls[[ord(c) for c in _PUNCT_CHARS]] |= _PUNCTUATION
    cls |= np.fromiter(map(str.isalpha, map(chr, range(0x110000))), np.uint8, 0x110000) * np.uint8(_LETTER)
    return cls


def _classed(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Code points, their classes, and which are not whitespace."""
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    cls = _classes()[cps]
    return cps, cls, cls != _SPACE


def _tokens(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Code points, their classes, and each token's start and end (exclusive): str.split's tokens."""
    cps, cls, word = _classed(text)
    flips = np.flatnonzero(word[1:] != word[:-1]) + 1  # token starts and ends, alternately
    if len(word) and word[0]:
        flips = np.concatenate(([0], flips))
    if len(word) and word[-1]:
        flips = np.append(flips, len(word))
    return cps, cls, flips[0::2], flips[1::2]


def _count_tokens(text: str) -> int:
    word = _classed(text)[2]
    return int(np.count_nonzero(word[1:] > word[:-1])) + bool(len(word) and word[0])


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def _duplicates(items: list[str]) -> tuple[int, int]:
    """(items equal to an earlier one, their characters): datatrove's find_duplicates, for which
    every occurrence of an item but its first is a duplicate."""
    if len(set(map(len, items))) == len(items):  # all lengths differ: nothing to hash
        return 0, 0
    first = set(items)
    return len(items) - len(first), sum(map(len, items)) - sum(map(len, first))


def _paragraphs(text: str) -> list[str]:
    """re.split(r"\n{2,}", text.strip()) as datatrove splits, 5x faster: a run of k newlines leaves
    str.split("\n\n") k // 2 - 1 empty parts and, k odd, a newline before the next."""
    parts = (text := text.strip()).split("\n\n")
    return ([p[1:] if p[:1] == "\n" else p for p in parts if p] or [""]) if "\n\n\n" in text else parts


def _lines(text: str) -> list[str]:
    """re.split(r"\n+", text) as datatrove splits: str.split less the empty lines inside."""
    parts = text.split("\n")
    return [parts[0], *filter(None, parts[1:-1]), parts[-1]] if len(parts) > 2 and "\n\n" in text else parts


@functools.lru_cache(maxsize=2)
def _powers(bits: int) -> np.ndarray:
    power = np.full(1 << bits, _BASE, dtype=np.uint64)
    power[0] = 1
    return np.cumprod(power, out=power)  # _BASE ** i (mod 2**64)


class _NGrams:
    """One document's word n-grams as 64-bit hashes (made for one call, then dropped). A method's
    `base` is the smallest n of its checks: what it finds there bounds every larger n."""

    def __init__(self, text: str):
        cps, _, starts, ends = _tokens(text)
        self.text, self.n_words, lens = text, len(starts), ends - starts
        self.cum = np.concatenate(([0], np.cumsum(lens)))  # characters in the first i words
        self.longest = int(lens.max()) if len(lens) else 0
        power = _powers(max(len(cps), 1 << 15).bit_length())
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
            self.hash[n] = self.of(n - 1)[:-1] * _MIX + self.hash[1][n - 1:]
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


class _Set:
    """What the four rules share: their checks' names and their Drops."""

    name: str
    cfg: GopherQuality | GopherRepetition | C4 | FineWeb
    FIELDS: tuple[str, ...] = ()

    @property
    def checks(self) -> tuple[str, ...]:
        return tuple(f"{self.name}.{f}" for f in self.FIELDS if getattr(self.cfg, f) not in (None, False))

    def drop(self, check: str, value: float, limit: float, detail: str = "") -> Drop:
        return Drop(f"{self.name}.{check}", round(value, 4), limit, detail)


@dataclass(frozen=True)
class GopherRepetitionRule(_Set):
    cfg: GopherRepetition
    name = "gopher_repetition"
    FIELDS = ("dup_para_frac", "dup_para_char_frac", "dup_line_frac", "dup_line_char_frac")

    @property
    def checks(self) -> tuple[str, ...]:
        return super().checks + tuple(f"{self.name}.{f}.{n}" for f in ("top_n_grams", "dup_n_grams")
                                      for n, _ in getattr(self.cfg, f) or ())

    def __call__(self, text: str) -> str | Drop:
        c, chars = self.cfg, len(text)
        if not chars:
            return text
        for kind, split in (("para", _paragraphs), ("line", _lines)):
            frac, char_frac = getattr(c, f"dup_{kind}_frac"), getattr(c, f"dup_{kind}_char_frac")
            if frac is not None or char_frac is not None:
                parts = split(text)
                n, dup_chars = _duplicates(parts)
                if frac is not None and n / len(parts) > frac:
                    return self.drop(f"dup_{kind}_frac", n / len(parts), frac)
                if char_frac is not None and dup_chars / chars > char_frac:
                    return self.drop(f"dup_{kind}_char_frac", dup_chars / chars, char_frac)
        grams = _NGrams(text) if c.top_n_grams or c.dup_n_grams else None
        for field, pairs in (("top_n_grams", c.top_n_grams or ()), ("dup_n_grams", c.dup_n_grams or ())):
            base = min((n for n, _ in pairs), default=0)
            for n, limit in pairs:
                measure = grams.top if field == "top_n_grams" else grams.duplicate_chars
                share = measure(n, base, limit, chars) if grams.n_words >= n else None
                if share is not None and share > limit:
                    return self.drop(f"{field}.{n}", share, limit)
        return text


@dataclass(frozen=True)
class GopherQualityRule(_Set):
    cfg: GopherQuality
    name = "gopher_quality"
    FIELDS = ("min_doc_words", "max_doc_words", "min_avg_word_length", "max_avg_word_length", "max_symbol_word_ratio",
              "max_bullet_lines_ratio", "max_ellipsis_lines_ratio", "max_non_alpha_words_ratio", "min_stop_words")

    def __call__(self, text: str) -> str | Drop:
        c = self.cfg
        _, cls, starts, _ = _tokens(text)
        tokens = len(starts)
        inner = (cls & (_SPACE | _PUNCTUATION)) == 0  # what a word keeps of its token
        has = np.bitwise_or.reduceat(inner.view(np.uint8) | (cls & _LETTER), starts) if tokens else cls[:0]
        n, length = np.count_nonzero(has & 1), np.count_nonzero(inner)  # words, their characters
        if c.min_doc_words is not None and n < c.min_doc_words:
            return self.drop("min_doc_words", n, c.min_doc_words)
        if c.max_doc_words is not None and n > c.max_doc_words:
            return self.drop("max_doc_words", n, c.max_doc_words)
        if n and c.min_avg_word_length is not None and length / n < c.min_avg_word_length:
            return self.drop("min_avg_word_length", length / n, c.min_avg_word_length)
        if n and c.max_avg_word_length is not None and length / n > c.max_avg_word_length:
            return self.drop("max_avg_word_length", length / n, c.max_avg_word_length)
        ellipses = text.count("...") + text.count("…")
        for symbols in (text.count("#"), ellipses) if c.max_symbol_word_ratio is not None else ():
            if _ratio(symbols, tokens) > c.max_symbol_word_ratio:
                return self.drop("max_symbol_word_ratio", symbols / tokens, c.max_symbol_word_ratio)
        lines = text.splitlines()
        for field, most, strip, test in (  # no more lines can qualify than the text has bullets or ellipses
                ("max_bullet_lines_ratio", text.count("•") + text.count("-"), str.lstrip, ("startswith", ("•", "-"))),
                ("max_ellipsis_lines_ratio", ellipses, str.rstrip, ("endswith", ("...", "…")))):
            limit = getattr(c, field)
            if limit is not None and _ratio(most, len(lines)) > limit and \
                    (share := sum(map(methodcaller(*test), map(strip, lines))) / len(lines)) > limit:
                return self.drop(field, share, limit)
        alpha = np.count_nonzero(has & _LETTER)  # tokens with a letter
        if c.max_non_alpha_words_ratio is not None and tokens and alpha / tokens < c.max_non_alpha_words_ratio:
            return self.drop("max_non_alpha_words_ratio", alpha / tokens, c.max_non_alpha_words_ratio)
        stops = frozenset(c.stop_words)  # most prose has enough between spaces: no need to split it
        if c.min_stop_words is not None and sum(f" {w} " in text for w in stops) < c.min_stop_words and \
                (found := len(stops.intersection(_PUNCT.sub("", text).split()))) < c.min_stop_words:
            return self.drop("min_stop_words", found, c.min_stop_words)
        return text


def _long_word(line: str, longest: int) -> bool:
    """Whether a word of `line` is longer than `longest`. Such a word fills an aligned block of
    (longest + 2) // 2 characters, so a line with a space in every block has none."""
    block = (longest + 2) // 2
    if all(line.find(" ", i, i + block) >= 0 for i in range(0, len(line), block)):
        return False
    return max(map(len, line.split())) > longest


@dataclass(frozen=True)
class C4Rule(_Set):
    cfg: C4
    name = "c4"
    FIELDS = ("max_word_length", "remove_citations", "filter_no_terminal_punct", "min_words_per_line",
              "filter_lorem_ipsum", "filter_javascript", "filter_curly_bracket", "filter_policy", "min_num_sentences")

    @property
    def checks(self) -> tuple[str, ...]:
        return super().checks + (f"{self.name}.all_lines_removed",)

    def __call__(self, text: str) -> str | Drop:
        c = self.cfg
        # a phrase the whole text lacks, no line has: most lines skip most checks. The text's ASCII,
        # lowered, holds every phrase str.lower() shows (only the Kelvin sign lowers to ASCII: "k")
        low = (text.lower() if "\u212a" in text else text).encode("ascii", "ignore").lower().decode()
        cite = c.remove_citations and "[" in text
        lorem = c.filter_lorem_ipsum and "lorem ipsum" in low
        script = c.filter_javascript and "javascript" in low
        curly = c.filter_curly_bracket and "{" in text
        policy = c.filter_policy and ("cookie" in low or "policy" in low or "terms of use" in low)
        longest, fewest, need = c.max_word_length, c.min_words_per_line, c.min_num_sentences or 0
        kept: list[str] = []
        sentences = 0
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if longest is not None and len(line) > longest and _long_word(line, longest):
                continue
            few = fewest is not None and len(line.split(None, fewest)) < fewest  # words before citations go
            if cite and "[" in line:
                line = _CITATION.sub("", line)
            if few or c.filter_no_terminal_punct and (not line.endswith((".", "?", "!", '"', "'"))
                                                       or line.endswith("...")):
                continue
            line_low = line.lower() if lorem or script or policy else ""
            if lorem and "lorem ipsum" in line_low:
                return self.drop("filter_lorem_ipsum", 1, 0, f"line {number}: {line[:80]}")
            if script and "javascript" in line_low:
                continue
            if curly and "{" in line:
                return self.drop("filter_curly_bracket", 1, 0, f"line {number}: {line[:80]}")
            if policy and any(p in line_low for p in _POLICY):
                continue
            if sentences < need:  # counted only as far as the check needs
                sentences += max(1, len(_SENTENCE_END.findall(line)))
            kept.append(line)
        if sentences < need:
            return self.drop("min_num_sentences", sentences, need)
        if not (out := "\n".join(kept).strip()):
            return self.drop("all_lines_removed", 0, 1)
        return text if out == text else out


@dataclass(frozen=True)
class FineWebRule(_Set):
    cfg: FineWeb
    name = "fineweb"
    FIELDS = ("line_punct_thr", "short_line_thr", "char_duplicates_ratio", "new_line_ratio")

    def __call__(self, text: str) -> str | Drop:
        c = self.cfg
        lines = text.split("\n")
        newlines = len(lines) - 1
        if c.line_punct_thr is not None and \
                (share := sum(map(methodcaller("endswith", (".", "'", '"', "!", "?")), lines)) / len(lines)) \
                <= c.line_punct_thr and not (share == 0 and c.line_punct_exclude_zero):
            return self.drop("line_punct_thr", share, c.line_punct_thr)
        if c.short_line_thr is not None and \
                (share := sum(map(c.short_line_length.__ge__, map(len, lines))) / len(lines)) >= c.short_line_thr:
            return self.drop("short_line_thr", share, c.short_line_thr)
        if c.char_duplicates_ratio is not None and (share := _ratio(
                _duplicates(list(filter(str.strip, lines)))[1], len(text) - newlines)) >= c.char_duplicates_ratio:
            return self.drop("char_duplicates_ratio", share, c.char_duplicates_ratio)
        if c.new_line_ratio is not None and newlines and \
                (share := newlines / max(_count_tokens(text), 1)) > c.new_line_ratio:
            return self.drop("new_line_ratio", share, c.new_line_ratio)
        return text


def build(gopher_quality: GopherQuality | None, gopher_repetition: GopherRepetition | None, c4: C4 | None,
          fineweb: FineWeb | None) -> list[Rule]:
    """The enabled rule sets, in FineWeb's order."""
    sets = [(GopherRepetitionRule, gopher_repetition), (GopherQualityRule, gopher_quality), (C4Rule, c4),
            (FineWebRule, fineweb)]
    return [rule(cfg) for rule, cfg in sets if cfg is not None]
