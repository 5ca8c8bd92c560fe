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

import numpy as np
from pydantic import Field, model_validator

from shardline.core.section_base import _Section
from shardline.data.clean import ruleset as rs
from shardline.data.clean import textstats as ts
from shardline.data.clean import wordtable as wd
from shardline.data.clean.ruleset import RuleSet
from shardline.data.clean.verdict import Drop, RuleEntry

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

    def __call__(self, text: str) -> str | Drop:
        c, chars = self.cfg, len(text)
        if not chars:
            return self.drop("empty", 0, 1)
        for kind, split in (("para", ts.paragraphs), ("line", ts.lines)):
            frac, char_frac = getattr(c, f"dup_{kind}_frac"), getattr(c, f"dup_{kind}_char_frac")
            if frac is not None or char_frac is not None:
                parts = split(text)
                n, dup_chars = ts.duplicates(parts)
                if frac is not None and n / len(parts) > frac:
                    return self.drop(f"dup_{kind}_frac", n / len(parts), frac)
                if char_frac is not None and dup_chars / chars > char_frac:
                    return self.drop(f"dup_{kind}_char_frac", dup_chars / chars, char_frac)
        if c.top_n_grams or c.dup_n_grams:
            w = rs.words(text)
            for (n, limit), share in zip(c.top_n_grams or (), _tops(text, w, c.top_n_grams or ())):
                if share > limit:
                    return self.drop(f"top_n_grams.{n}", share, limit)
            ns = np.array([n for n, _ in c.dup_n_grams or ()], np.int64)
            for (n, limit), dup in zip(c.dup_n_grams or (), ts.dup_ngram_chars(w.cps, w.starts, w.ends, ns).tolist()):
                if dup / chars > limit:
                    return self.drop(f"dup_n_grams.{n}", dup / chars, limit)
        return text


def _tops(text: str, w, grams: NGrams) -> list[float]:
    """Each top n-gram's share, counted by word ids; or, where a word holds whitespace (spaCy
    joined a run of spans), by " ".join as datatrove does (ids no longer tell every n-gram apart)."""
    if not grams:
        return []
    if not (w.flags & wd.HAS_SPACE).any():
        ns, limits = (np.array(x) for x in zip(*grams))
        return ts.top_ngrams(w.ids, w.ends - w.starts, ns.astype(np.int64), limits.astype(np.float64),
                             len(text)).tolist()
    words, out = w.strings(text), []
    for n, _ in grams:
        counts = Counter(" ".join(words[i:i + n]) for i in range(len(words) - n + 1))
        gram, count = counts.most_common(1)[0] if counts else ("", 0)
        out.append(count * len(gram) / len(text) if counts else -1.0)
    return out


@dataclass(frozen=True)
class GopherQualityRule(RuleSet):
    cfg: GopherQuality
    name = "gopher_quality"
    FIELDS = ("min_doc_words", "max_doc_words", "min_avg_word_length", "max_avg_word_length", "max_symbol_word_ratio",
              "max_bullet_lines_ratio", "max_ellipsis_lines_ratio", "max_non_alpha_words_ratio", "min_stop_words")

    def __call__(self, text: str) -> str | Drop:
        c = self.cfg
        w = rs.words(text)
        n_words = w.starts.size
        kept = (w.flags & wd.NONSYMBOL) != 0  # words not made of punctuation alone
        n, length = int(np.count_nonzero(kept)), int((w.ends - w.starts)[kept].sum())
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
        lines = text.splitlines()
        for field, most, strip, test in (  # no more lines can qualify than the text has bullets or ellipses
                ("max_bullet_lines_ratio", text.count("•") + text.count("-"), str.lstrip, ("startswith", ("•", "-"))),
                ("max_ellipsis_lines_ratio", ellipses, str.rstrip, ("endswith", ("...", "…")))):
            limit = getattr(c, field)
            if limit is not None and ts.ratio(most, len(lines)) > limit and \
                    (share := sum(map(methodcaller(*test), map(strip, lines))) / len(lines)) > limit:
                return self.drop(field, share, limit)
        alpha = int(np.count_nonzero(w.flags & wd.LETTER))  # words with a letter
        if c.max_non_alpha_words_ratio is not None and n_words and alpha / n_words < c.max_non_alpha_words_ratio:
            return self.drop("max_non_alpha_words_ratio", alpha / n_words, c.max_non_alpha_words_ratio)
        if c.min_stop_words is not None and (found := ts.present(w.cps, w.starts, w.ends, *_targets(c.stop_words))) \
                < c.min_stop_words:
            return self.drop("min_stop_words", found, c.min_stop_words)
        return text


@functools.cache
def _targets(strings: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct strings as one code point array and where each starts (textstats.present)."""
    unique = list(dict.fromkeys(strings))
    bounds = np.cumsum([0, *map(len, unique)]).astype(np.int64)
    return np.frombuffer("".join(unique).encode("utf-32-le", "surrogatepass"), np.uint32).copy(), bounds


GOPHER_REPETITION = RuleEntry(
    "gopher_repetition", GopherRepetition | None,
    Field(None, description="Gopher's repetition filter: duplicate lines and paragraphs, top and duplicate n-grams."),
    lambda v, _index: GopherRepetitionRule(v) if v is not None else None, reference=True)
GOPHER_QUALITY = RuleEntry(
    "gopher_quality", GopherQuality | None,
    Field(None, description="Gopher's quality filter: word counts and lengths, symbols, bullets, ellipses, stop words."),
    lambda v, _index: GopherQualityRule(v) if v is not None else None, reference=True)
