"""Gopher's rule sets (Rae et al. 2021, table A1): datatrove 0.10.1's GopherRepetitionFilter and
GopherQualityFilter, with their settings (the clean section's gopher_repetition and
gopher_quality; null or false switches one check off) and registry entries.

Contract: as every rule set's (ruleset.py, with where they differ from datatrove).
`GopherRepetitionRule(GopherRepetition())` and `GopherQualityRule(GopherQuality())` return the
text or the first failing check's Drop; gopher_repetition also drops an empty text
(`gopher_repetition.empty`).
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from operator import methodcaller
from typing import Annotated

import numba
import numpy as np
from pydantic import Field, model_validator

from shardline.core.section_base import _Section
from shardline.data.clean.rules import ruleset as rs
from shardline.data.clean.kernels import lines as ls, textstats as ts, wordtable as wd
from shardline.data.clean.rules.ruleset import RuleSet
from shardline.data.clean.verdict import Drop, RuleEntry
from shardline.data.document import Document

_N = Annotated[int, Field(ge=1)]
_FRACTION = Annotated[float, Field(ge=0, le=1)]
NGrams = tuple[tuple[_N, _FRACTION], ...]


def _distinct(name: str, grams: NGrams | None) -> str | None:
    ns = [n for n, _ in grams or ()]
    return f"{name}: n={max(ns, key=ns.count)} is given twice" if len(set(ns)) < len(ns) else None


class GopherQuality(_Section):
    """Gopher's quality heuristics (Rae et al. 2021, table A1), datatrove's GopherQualityFilter.
    Words are datatrove's English words, spaCy's tokens: "(self," is three, "don't" two."""

    min_doc_words: int | None = Field(50, ge=0)
    """Drop documents with fewer words than this (words made only of punctuation do not count)."""
    max_doc_words: int | None = Field(100_000, ge=1)
    """Drop documents with more words than this (counted as for min_doc_words)."""
    min_avg_word_length: float | None = Field(3, ge=0)
    """Drop documents whose mean word length (characters, of the words min_doc_words counts) is below this."""
    max_avg_word_length: float | None = Field(10, ge=0)
    """Drop documents whose mean word length is above this."""
    max_symbol_word_ratio: float | None = Field(0.1, ge=0)
    """Drop documents with more '#' per word than this, or more ellipses ('...' or '…') per word
    (all words, punctuation too)."""
    max_bullet_lines_ratio: float | None = Field(0.9, ge=0, le=1)
    """Drop documents where more than this share of lines starts with a bullet ('•' or '-')."""
    max_ellipsis_lines_ratio: float | None = Field(0.3, ge=0, le=1)
    """Drop documents where more than this share of lines ends with '...' or '…'."""
    max_non_alpha_words_ratio: float | None = Field(0.8, ge=0, le=1)
    """Despite datatrove's name, a minimum: drop documents where the share of tokens holding at
    least one letter is below this (0.8: at most 20% of words may be numbers or symbols)."""
    min_stop_words: int | None = Field(2, ge=0)
    """Drop documents containing fewer than this many different words of `stop_words` ("be," holds "be")."""
    stop_words: tuple[str, ...] = ("the", "be", "to", "of", "and", "that", "have", "with")
    """The words min_stop_words looks for, case-sensitive (datatrove's English list)."""

    @model_validator(mode="after")
    def _check(self) -> GopherQuality:
        problems = []
        if self.min_doc_words is not None and self.max_doc_words is not None and self.min_doc_words > self.max_doc_words:
            problems.append(f"min_doc_words: {self.min_doc_words} must be <= max_doc_words ({self.max_doc_words})")
        lo, hi = self.min_avg_word_length, self.max_avg_word_length
        if lo is not None and hi is not None and lo > hi:
            problems.append(f"min_avg_word_length: {lo} must be <= max_avg_word_length ({hi})")
        if self.min_stop_words is not None and self.min_stop_words > len(set(self.stop_words)):
            problems.append(f"min_stop_words: {self.min_stop_words} can never be met with "
                            f"{len(set(self.stop_words))} different stop_words")
        if problems:
            raise ValueError("\n".join(problems))
        return self


class GopherRepetition(_Section):
    """Gopher's repetition heuristics (Rae et al. 2021, table A1), datatrove's GopherRepetitionFilter.
    Character fractions are of the whole document's characters."""

    dup_line_frac: float | None = Field(0.3, ge=0, le=1)
    """Drop documents where more than this share of lines repeats an earlier line."""
    dup_para_frac: float | None = Field(0.3, ge=0, le=1)
    """Drop documents where more than this share of paragraphs (split on blank lines) repeats an
    earlier one."""
    dup_line_char_frac: float | None = Field(0.2, ge=0, le=1)
    """Drop documents where repeated lines hold more than this share of the characters."""
    dup_para_char_frac: float | None = Field(0.2, ge=0, le=1)
    """Drop documents where repeated paragraphs hold more than this share of the characters."""
    top_n_grams: NGrams | None = ((2, 0.2), (3, 0.18), (4, 0.16))
    """(n, limit) pairs: drop documents where the most frequent word n-gram, times its count,
    covers more than `limit` of the characters."""
    dup_n_grams: NGrams | None = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))
    """(n, limit) pairs: drop documents where word n-grams that repeat an earlier one (counted
    without overlap) hold more than `limit` of the characters."""

    @model_validator(mode="after")
    def _check(self) -> GopherRepetition:
        problems = [p for p in (_distinct("top_n_grams", self.top_n_grams), _distinct("dup_n_grams", self.dup_n_grams))
                    if p]
        if problems:
            raise ValueError("\n".join(problems))
        return self


@dataclass(frozen=True)
class GopherRepetitionRule(RuleSet):
    cfg: GopherRepetition
    name = "gopher_repetition"
    FIELDS = ("dup_para_frac", "dup_para_char_frac", "dup_line_frac", "dup_line_char_frac")

    @property
    def checks(self) -> tuple[str, ...]:
        grams = tuple(f"{self.name}.{f}.{n}" for f in ("top_n_grams", "dup_n_grams") for n, _ in getattr(self.cfg, f) or ())
        return (f"{self.name}.empty", *super().checks, *grams)

    @functools.cached_property
    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """The n-gram checks' n and limits as the compiled measures take them, and whether a
        paragraph or line check is on (made once)."""
        c = self.cfg
        tops, dups = c.top_n_grams or (), c.dup_n_grams or ()
        return (np.array([n for n, _ in tops], np.int64), np.array([x for _, x in tops], np.float64),
                np.array([n for n, _ in dups], np.int64), any(getattr(c, f) is not None for f in self.FIELDS))

    def __call__(self, doc: Document) -> str | Drop:
        text = doc.text
        c, chars = self.cfg, len(text)
        if not chars:
            return self.drop("empty", 0, 1)
        w = rs.words(text)
        top_ns, top_limits, dup_ns, lines_on = self._arrays
        found, tops, dups = _measures(w.cps, ts.classes(), w.ids, w.starts, w.ends, w.flags, w.polys, top_ns,
                                      top_limits, dup_ns, chars, lines_on)
        found = found.tolist()
        for at, kind in enumerate(("para", "line")):  # datatrove's \n{2,} of the stripped text, then \n+
            parts, n, dup_chars = found[3 * at:3 * at + 3]
            frac, char_frac = getattr(c, f"dup_{kind}_frac"), getattr(c, f"dup_{kind}_char_frac")
            if frac is not None and n / parts > frac:
                return self.drop(f"dup_{kind}_frac", n / parts, frac)
            if char_frac is not None and dup_chars / chars > char_frac:
                return self.drop(f"dup_{kind}_char_frac", dup_chars / chars, char_frac)
        if c.top_n_grams and tops.size == 0:  # a word holds whitespace: ids no longer tell n-grams apart
            tops = _tops_by_strings(text, w, c.top_n_grams)
        for (n, limit), share in zip(c.top_n_grams or (), tops.tolist()):
            if share > limit:
                return self.drop(f"top_n_grams.{n}", share, limit)
        for (n, limit), dup in zip(c.dup_n_grams or (), dups.tolist()):
            if dup / chars > limit:
                return self.drop(f"dup_n_grams.{n}", dup / chars, limit)
        return text


@numba.njit(cache=True)
def _measures(cps, classes, ids, starts, ends, flags, polys, top_ns, top_limits, dup_ns, chars, lines_on):
    """Everything the rule set measures, in one call: (paragraphs, repeats, their characters,
    lines, repeats, characters; the top n-gram shares, none where a word holds whitespace; the
    duplicate n-grams' characters)."""
    found = ls.pieces(cps, classes) if lines_on else np.ones(6, np.int64)
    spaced = False
    for i in range(flags.size):
        spaced |= (flags[i] & wd.HAS_SPACE) != 0
    tops = np.empty(0, np.float64)
    if not spaced and top_ns.size:
        tops = ts.top_ngrams(ids, ends - starts, top_ns, top_limits, chars)
    return found, tops, ts.dup_ngram_chars(cps, starts, ends, polys, dup_ns)


def _tops_by_strings(text: str, w, grams: NGrams) -> np.ndarray:
    """Each top n-gram's share by " ".join, as datatrove counts them (where a word holds whitespace,
    after spaCy joined a run of spans)."""
    words, out = w.strings(text), []
    for n, _ in grams:
        counts = Counter(" ".join(words[i:i + n]) for i in range(len(words) - n + 1))
        gram, count = counts.most_common(1)[0] if counts else ("", 0)
        out.append(count * len(gram) / len(text) if counts else -1.0)
    return np.array(out, np.float64)


@dataclass(frozen=True)
class GopherQualityRule(RuleSet):
    cfg: GopherQuality
    name = "gopher_quality"
    FIELDS = ("min_doc_words", "max_doc_words", "min_avg_word_length", "max_avg_word_length", "max_symbol_word_ratio",
              "max_bullet_lines_ratio", "max_ellipsis_lines_ratio", "max_non_alpha_words_ratio", "min_stop_words")

    def __call__(self, doc: Document) -> str | Drop:
        text = doc.text
        c = self.cfg
        w = rs.words(text)
        n_words = w.starts.size
        n, length, alpha = _counts(w.starts, w.ends, w.flags)  # words not made of punctuation alone; with a letter
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
            if ts.ratio(symbols, n_words) > c.max_symbol_word_ratio:
                return self.drop("max_symbol_word_ratio", symbols / n_words, c.max_symbol_word_ratio)
        lines: list[str] | None = None
        for field, most, strip, test in (  # no more lines can qualify than the text has bullets or ellipses
                ("max_bullet_lines_ratio", text.count("•") + text.count("-"), str.lstrip, ("startswith", ("•", "-"))),
                ("max_ellipsis_lines_ratio", ellipses, str.rstrip, ("endswith", ("...", "…")))):
            limit = getattr(c, field)
            if limit is None or not most:  # no line can qualify: the share is 0, within any limit
                continue
            lines = text.splitlines() if lines is None else lines
            if ts.ratio(most, len(lines)) > limit and \
                    (share := sum(map(methodcaller(*test), map(strip, lines))) / len(lines)) > limit:
                return self.drop(field, share, limit)
        if c.max_non_alpha_words_ratio is not None and n_words and alpha / n_words < c.max_non_alpha_words_ratio:
            return self.drop("max_non_alpha_words_ratio", alpha / n_words, c.max_non_alpha_words_ratio)
        if c.min_stop_words is not None and (found := ts.present(w.cps, w.starts, w.ends, *_targets(c.stop_words))) \
                < c.min_stop_words:
            return self.drop("min_stop_words", found, c.min_stop_words)
        return text


@numba.njit(cache=True)
def _counts(starts, ends, flags):
    """(words not made of punctuation alone, their characters, words holding a letter)."""
    n = length = alpha = 0
    for i in range(starts.size):
        if flags[i] & wd.NONSYMBOL:
            n += 1
            length += ends[i] - starts[i]
        alpha += (flags[i] & wd.LETTER) != 0
    return n, length, alpha


@functools.cache
def _targets(strings: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct strings as one code point array and where each starts (textstats.present)."""
    unique = list(dict.fromkeys(strings))
    bounds = np.cumsum([0, *map(len, unique)]).astype(np.int64)
    return np.frombuffer("".join(unique).encode("utf-32-le", "surrogatepass"), np.uint32).copy(), bounds


GOPHER_REPETITION = RuleEntry(
    "gopher_repetition", GopherRepetition | None,
    Field(None, description="Gopher's repetition filter: duplicate lines and paragraphs, top and duplicate n-grams."),
    lambda v, _files: GopherRepetitionRule(v) if v is not None else None, reference=True)
GOPHER_QUALITY = RuleEntry(
    "gopher_quality", GopherQuality | None,
    Field(None, description="Gopher's quality filter: word counts and lengths, symbols, bullets, ellipses, stop words."),
    lambda v, _files: GopherQualityRule(v) if v is not None else None, reference=True)
