"""Words and sentences as the reference splits them: datatrove 0.10.1's default English word
tokenizer, which is spaCy's blank English tokenizer (with its sentencizer for sentences).

Contract: `split(text)` equals datatrove's `split_into_words(text)` (spaCy's tokens, stripped,
empty ones left out), and `sentences(line)` equals `len(split_into_sentences(line))`. They are
spaCy's own answers, not an imitation. `analyse(text)` gives the same words as positions in the
text's code points, with an id per distinct word and its flags (wordtable.py), for the rule sets'
compiled measures. spaCy splits each whitespace-separated span on its own (prefixes, suffixes,
infixes, special cases), so a span's words are kept per process (wordtable.py) and a text is
split without spaCy once its spans are known; spans not seen before go to spaCy together, one
call per text. One exception: spaCy also matches a multi-word special case (":(" is ":" "(")
across whitespace, and such a match can undo one inside a span; spans that meet as part of such
a pattern are split by spaCy whole. Sentences are the sentencizer's rule run on those words.
Nothing is downloaded: a blank pipeline is rules only.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

import numba
import numpy as np

from shardline.data.clean.kernels import spacylib, textstats, wordsplit, wordtable

_LETTERS = re.compile(r"[A-Za-z]+")


@functools.cache
def pipeline():
    return spacylib.spacy().blank("en")


def _offsets(tokens: list[tuple[int, str]], start: int, end: int) -> np.ndarray:
    """The stripped, non-empty tokens in [start, end) as (start, end) rows relative to `start`."""
    rows = []
    for idx, token in tokens:
        if start <= idx < end and (word := token.strip()):
            lead = idx - start + len(token) - len(token.lstrip())
            rows.append((lead, lead + len(word)))
    return np.array(rows, np.int64).reshape(-1, 2)


_FRESH = 1 << 20  # characters a pipeline tokenizes before a new one replaces it


def _tokens(text: str) -> list[tuple[int, str]]:
    """spaCy's tokens as (start, text). Its string store keeps every string it saw: a new
    pipeline every ~1M characters bounds that (~0.1 s each), where a memory_zone per call, the
    other bound, cost 2.5x a call's time (90 us vs 37 on a short span)."""
    nlp = pipeline()
    _tokens.seen = getattr(_tokens, "seen", 0) + len(text)
    if _tokens.seen > _FRESH:
        pipeline.cache_clear()
        _tokens.seen, nlp = len(text), pipeline()
    return [(t.idx, t.text) for t in nlp.tokenizer(text)]


def _learn(cps: np.ndarray, missing: np.ndarray) -> list[np.ndarray]:
    """spaCy's words of each missing span or run ((start, end) rows in `cps`), as offsets in it."""
    texts = [cps[a:b].tobytes().decode("utf-32-le", "surrogatepass") for a, b in missing.tolist()]
    if any(any(map(str.isspace, t)) for t in texts):  # runs: each seen whole
        return [_offsets(_tokens(t), 0, len(t)) for t in texts]
    # a newline between spans is a token of its own, which no special case holds: spans joined
    # by it split as they do alone (joined by a space, "f():" then "()" would meet as ": (")
    tokens, out, start = _tokens("\n".join(texts)), [], 0
    for t in texts:
        out.append(_offsets(tokens, start, start + len(t)))
        start += len(t) + 1
    return out


@functools.cache
def _pairs() -> frozenset[tuple[str, str]]:
    """Where two spans can meet inside a match of spaCy's multi-word special cases (":" "(" of
    ":("), as the spans' words: the pattern's neighbours, and where a special case inside a span
    has already joined its words ("):" ends as ":" did), the words it made."""
    from spacy.attrs import ORTH

    bare = spacylib.spacy().blank("en").tokenizer
    bare.rules = {}  # a special case's pattern: its words without special cases, as spaCy makes it
    pairs, ends, starts = set(), {}, {}  # ends: a pattern's last word -> the last words made of it
    for special, made in pipeline().tokenizer.rules.items():
        pattern, made = [t.text for t in bare(special)], [m[ORTH] for m in made]
        pairs.update(zip(pattern, pattern[1:]))
        if len(pattern) > 1 and pattern != made:
            ends.setdefault(pattern[-1], {pattern[-1]}).add(made[-1])
            starts.setdefault(pattern[0], {pattern[0]}).add(made[0])
    return frozenset((a, b) for x, y in pairs for a in ends.get(x, (x,)) for b in starts.get(y, (y,)))


@functools.cache
def table() -> wordsplit.Table:
    """This process's table, holding spaCy's special cases made of ASCII letters (the spans it
    answers without spaCy must not be one) and the words that can meet across whitespace."""
    fixed = [(s, _offsets(_tokens(s), 0, len(s))) for s in pipeline().tokenizer.rules if _LETTERS.fullmatch(s)]
    pairs = _pairs()
    left, right = sorted({a for a, _ in pairs}), sorted({b for _, b in pairs})
    matrix = np.zeros((len(left), len(right)), np.bool_)
    lix, rix = {w: i for i, w in enumerate(left)}, {w: i for i, w in enumerate(right)}
    for a, b in pairs:
        matrix[lix[a], rix[b]] = True
    return wordsplit.Table(fixed, (left, right, matrix))


class Words(NamedTuple):
    """A text's words: its code points, and per word its start and end in them, an id (equal
    words, equal ids), its flags (wordtable's) and its polynomial hash; `spans`: its str.split spans with their slots
    in table() while it holds `generation` (wordsplit.split's; None when spaCy split it whole)."""

    cps: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    ids: np.ndarray
    flags: np.ndarray
    polys: np.ndarray  # each word's polynomial hash (textstats.word_polys)
    spans: np.ndarray | None = None
    generation: int = -1

    def strings(self, text: str) -> list[str]:
        return [text[a:b] for a, b in zip(self.starts.tolist(), self.ends.tolist())]


def _analyse(text: str) -> Words:
    cps = textstats.code_points(text)
    found = table().words(cps, _learn)
    if found is None:  # more new spans than an empty table holds: spaCy on the whole text
        rows = _offsets(_tokens(text), 0, len(text))
        ids = np.unique([text[a:b] for a, b in rows.tolist()], return_inverse=True)[1].astype(np.int64)
        flags = np.array([wordtable.flags(cps, textstats.classes(), a, b) for a, b in rows.tolist()], np.uint8)
        starts, ends = rows[:, 0].copy(), rows[:, 1].copy()
        return Words(cps, starts, ends, ids.reshape(-1), flags, textstats.word_polys(cps, starts, ends))
    return Words(cps, *found, table().generation)


analyse = functools.lru_cache(maxsize=2)(_analyse)
analyse.__doc__ = "The text's words, shared by the rule sets that read the same text."


def split(text: str) -> list[str]:
    """datatrove's split_into_words(text) for English."""
    return analyse(text).strings(text)


def sentences(line: str) -> int:
    """How many sentences datatrove's split_into_sentences finds in a stripped `line` (English): the
    sentencizer's count over the line's words (as spaCy tokenizes the line). A token follows a
    sentence-final one and is not punctuation: a sentence starts. Whitespace other than one space
    between words is a token too."""
    w = _analyse(line)  # not cached: a document's lines would push the document out
    return int(_sentences(w.cps, w.starts, w.ends, w.flags))


@numba.njit(cache=True)
def _sentences(cps, starts, ends, flags):
    count, seen = 0, False
    for k in range(starts.size):
        gap = starts[k] - ends[k - 1] if k else 0
        if gap and not (gap == 1 and cps[ends[k - 1]] == 32) and seen:  # a whitespace token
            count, seen = count + 1, False
        final = flags[k] & wordtable.FINAL
        if seen and not final and not flags[k] & wordtable.PUNCT:
            count, seen = count + 1, False
        elif final:
            seen = True
    return count + 1 if starts.size else 0
