"""Quality rule sets: datatrove 0.10.1's GopherRepetitionFilter, GopherQualityFilter,
C4QualityFilter and FineWebQualityFilter, each one cleaning rule (see rules.py), with datatrove's
English word and sentence splitting (shardline.data.words: spaCy's, the same answers).

Contract: `build(gopher_quality, gopher_repetition, c4, fineweb)` returns the enabled sets (None is
off) in FineWeb's order: gopher_repetition, gopher_quality, c4, fineweb. A rule's `name` is its
set's; `checks` are its enabled checks, "<set>.<field>" in the order they run (".<n>" added for an
n-gram pair: gopher_repetition.top_n_grams.2). It returns the text, or the first failing check's
Drop(check, measured, limit) (ratios rounded to 4 places, as in rules.py). C4 also transforms: it
returns the text less the lines its line checks remove, or Drop("c4.all_lines_removed", 0, 1).
Rules are frozen dataclasses holding only their settings.

The reference is datatrove 0.10.1 with its default English word tokenizer (spaCy's blank English,
which needs no download): its definitions, comparisons, splits, strips and order, measured side by
side in tests/unit/test_reference.py and bench.curation. Where it differs (docs/cleaning.md lists each
with an example):
- an empty text (or, for FineWeb, one of blank lines only) is dropped as `<set>.empty` where
  datatrove drops it without a check; where datatrove divides by zero (a text with no words and
  min_doc_words off) the share is 0.
- a limit of 0 is a limit here; datatrove reads 0 as off (`if self.max_symbol_word_ratio and ...`).
Speed: characters are classed with numpy and n-grams compared by 64-bit hashes, so ordinary prose
passes without a Python loop over its words. Values stay exact: equal n-grams hash equal, so
hashes only over-count; a text passes on such an upper bound or is measured again from its words.
"""

import functools
import re
from dataclasses import dataclass
from operator import methodcaller

import numpy as np

from shardline.core.sections_quality import C4, FineWeb, GopherQuality, GopherRepetition
from shardline.data import textstats as ts
from shardline.data import words as wd
from shardline.data.verdict import Drop, Rule

REFERENCE = "datatrove 0.10.1, spaCy English words"  # in the clean parts' keys: a new reference rebuilds them
_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
_STOPS = tuple(ts.TERMINAL)  # what ends a line for FineWeb (datatrove 0.10's stop_chars)
_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")


@functools.lru_cache(maxsize=2)
def _words(text: str) -> list[str]:
    """The text's words, shared by the sets that read the same text (datatrove caches them too)."""
    return wd.split(text)


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
        grams = ts.NGrams(_words(text)) if c.top_n_grams or c.dup_n_grams else None
        base = min((n for n, _ in c.top_n_grams or ()), default=0)
        for n, limit in c.top_n_grams or ():
            share = grams.top(n, base, limit, chars) if grams.n_words >= n else None
            if share is not None and share > limit:
                return self.drop(f"top_n_grams.{n}", share, limit)
        for n, limit in c.dup_n_grams or ():
            share = grams.duplicate_chars(n, limit, chars) if grams.n_words >= n else None
            if share is not None and share > limit:
                return self.drop(f"dup_n_grams.{n}", share, limit)
        return text


@dataclass(frozen=True)
class GopherQualityRule(_Set):
    cfg: GopherQuality
    name = "gopher_quality"
    FIELDS = ("min_doc_words", "max_doc_words", "min_avg_word_length", "max_avg_word_length", "max_symbol_word_ratio",
              "max_bullet_lines_ratio", "max_ellipsis_lines_ratio", "max_non_alpha_words_ratio", "min_stop_words")

    def __call__(self, text: str) -> str | Drop:
        c = self.cfg
        words = _words(text)
        n_words = len(words)
        _, cls, starts, ends = ts.tokens(" ".join(words))  # the words again, each a token
        inner = ((cls & (ts.SPACE | ts.PUNCTUATION)) == 0).view(np.uint8)  # a word's other characters
        some = np.bitwise_or.reduceat(inner | (cls & ts.LETTER), starts) if n_words else cls[:0]
        kept = (some & 1).astype(bool)  # words not made of punctuation alone
        n, length = np.count_nonzero(kept), int((ends - starts)[kept].sum())
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
        alpha = np.count_nonzero(some & ts.LETTER)  # words with a letter
        if c.max_non_alpha_words_ratio is not None and n_words and alpha / n_words < c.max_non_alpha_words_ratio:
            return self.drop("max_non_alpha_words_ratio", alpha / n_words, c.max_non_alpha_words_ratio)
        if c.min_stop_words is not None and \
                (found := len(frozenset(c.stop_words).intersection(words))) < c.min_stop_words:
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

    DROPS = ("filter_lorem_ipsum", "filter_curly_bracket", "min_num_sentences")  # the others remove lines

    @property
    def checks(self) -> tuple[str, ...]:
        """"c4" counts the lines removed (bytes; no document), then the checks that drop documents."""
        drops = tuple(c for c in super().checks if c.rpartition(".")[2] in self.DROPS)
        return (self.name, *drops, f"{self.name}.all_lines_removed")

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
                sentences += wd.sentences(line)
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

    @property
    def checks(self) -> tuple[str, ...]:
        return (f"{self.name}.empty", *super().checks)

    def __call__(self, text: str) -> str | Drop:
        c = self.cfg
        if not (lines := [line for line in text.split("\n") if line.strip()]):
            return self.drop("empty", 0, 1)
        if c.line_punct_thr is not None and \
                (share := sum(map(methodcaller("endswith", _STOPS), lines)) / len(lines)) < c.line_punct_thr \
                and not (share == 0 and c.line_punct_exclude_zero):
            return self.drop("line_punct_thr", share, c.line_punct_thr)
        if c.short_line_thr is not None and \
                (share := sum(map(c.short_line_length.__ge__, map(len, lines))) / len(lines)) > c.short_line_thr:
            return self.drop("short_line_thr", share, c.short_line_thr)
        if c.char_duplicates_ratio is not None and \
                (share := ts.duplicates(lines)[1] / (len(text) - text.count("\n"))) > c.char_duplicates_ratio:
            return self.drop("char_duplicates_ratio", share, c.char_duplicates_ratio)
        if c.new_line_ratio is not None and (share := text.count("\n") / len(_words(text))) > c.new_line_ratio:
            return self.drop("new_line_ratio", share, c.new_line_ratio)
        return text


def build(gopher_quality: GopherQuality | None, gopher_repetition: GopherRepetition | None, c4: C4 | None,
          fineweb: FineWeb | None) -> list[Rule]:
    """The enabled rule sets, in FineWeb's order."""
    sets = [(GopherRepetitionRule, gopher_repetition), (GopherQualityRule, gopher_quality), (C4Rule, c4),
            (FineWebRule, fineweb)]
    return [rule(cfg) for rule, cfg in sets if cfg is not None]
