"""Words and sentences as the reference splits them: datatrove 0.10.1's default English word
tokenizer, which is spaCy's blank English tokenizer (with its sentencizer for sentences).

Contract: `split(text)` equals datatrove's `split_into_words(text)` (spaCy's tokens, stripped,
empty ones left out), and `sentences(line)` equals `len(split_into_sentences(line))`. They are
spaCy's own answers, not an imitation. spaCy splits each whitespace-separated span on its own
(prefixes, suffixes, infixes, special cases), so a span's words are cached per process and a text
is str.split plus dictionary lookups; spans not seen before go to spaCy together, one call per
text. One exception: spaCy also matches a multi-word special case (":(" is ":" "(") across
whitespace, and such a match can undo one inside a span; a text where two spans meet as part of
such a pattern is split by spaCy whole. Sentences are the sentencizer's rule run on those words.
Nothing is downloaded: a blank pipeline is rules only.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from itertools import chain, compress, count
from operator import itemgetter

from shardline.core.errors import ShardlineError
from shardline.data.clean import textstats

_CACHED = 1 << 20  # spans; about 150 MB at most before the cache starts over
_LONGEST = 64  # longer spans are rare and seldom repeat: split, not kept
_SPANS: dict[str, tuple[str, ...]] = {}  # span (or spans that meet, as in the text) -> its words
_WORD = re.compile(r"\S+")  # str.split's spans, as a pattern (\s is str.isspace)


@functools.cache
def pipeline():
    try:
        import spacy
    except ImportError:
        raise ShardlineError("the quality rule sets count words as spaCy's English tokenizer does; "
                             "pip install -e . (spacy is a dependency of shardline)") from None
    return spacy.blank("en")


@functools.cache
def _ends() -> frozenset[str]:
    """The sentencizer's sentence-final characters (spaCy's default, which datatrove uses)."""
    from spacy.pipeline.sentencizer import Sentencizer

    return frozenset(Sentencizer.default_punct_chars)


def _learn(spans: list[str]) -> dict[str, tuple[str, ...]]:
    """Split the spans not seen before in one call of spaCy's tokenizer; cache the short ones."""
    new = [s for s in dict.fromkeys(spans) if s not in _SPANS]
    nlp, found = pipeline(), {}
    with nlp.memory_zone():  # spaCy's string store would otherwise keep every string it saw
        # a newline between spans is a token of its own, which no special case holds: spans joined
        # by it split as they do alone (joined by a space, "f():" then "()" would meet as ": (")
        tokens = [(t.idx, t.text) for t in nlp.tokenizer("\n".join(new))]
    at = start = 0
    for span in new:  # the tokens come in order: a span's start at or after its start, before its end
        end = start + len(span)
        while tokens[at][0] < start:
            at += 1
        first = at
        while at < len(tokens) and tokens[at][0] < end:
            at += 1
        found[span] = (span,) if at - first == 1 else tuple(t for _, t in tokens[first:at])
        start = end + 1
    if len(_SPANS) + len(found) > _CACHED:
        _SPANS.clear()
    _SPANS.update((s, p) for s, p in found.items() if len(s) <= _LONGEST)
    return found


@functools.cache
def _pairs() -> frozenset[tuple[str, str]]:
    """Where two spans can meet inside a match of spaCy's multi-word special cases (":" "(" of
    ":("), as the spans' words: the pattern's neighbours, and where a special case inside a span
    has already joined its words ("):" ends as ":" did), the words it made."""
    import spacy
    from spacy.attrs import ORTH

    bare = spacy.blank("en").tokenizer
    bare.rules = {}  # a special case's pattern: its words without special cases, as spaCy makes it
    pairs, ends, starts = set(), {}, {}  # ends: a pattern's last word -> the last words made of it
    for special, made in pipeline().tokenizer.rules.items():
        pattern, made = [t.text for t in bare(special)], [m[ORTH] for m in made]
        pairs.update(zip(pattern, pattern[1:]))
        if len(pattern) > 1 and pattern != made:
            ends.setdefault(pattern[-1], {pattern[-1]}).add(made[-1])
            starts.setdefault(pattern[0], {pattern[0]}).add(made[0])
    return frozenset((a, b) for x, y in pairs for a in ends.get(x, (x,)) for b in starts.get(y, (y,)))


def _spacy(text: str) -> tuple[str, ...]:
    nlp = pipeline()
    with nlp.memory_zone():
        return tuple(w for t in nlp.tokenizer(text) if (w := t.text.strip()))


def split(text: str) -> list[str]:
    """datatrove's split_into_words(text) for English."""
    spans = text.split()
    try:
        pieces = list(map(_SPANS.__getitem__, spans))  # all seen before: no Python loop
    except KeyError:
        found = _learn(spans)
        pieces = [_SPANS.get(s) or found[s] for s in spans]
    # spaCy also matches a multi-word special case across whitespace (":" "(" as ":("), and such a
    # match can stop one inside a span ("foo(x): ((" keeps ")" ":" apart). Only where two spans
    # meet as a pair of such a pattern: spans joined by those meetings go to spaCy together.
    meets = list(compress(count(), map(_pairs().__contains__, zip(map(itemgetter(-1), pieces),
                                                                 map(itemgetter(0), pieces[1:])))))
    if not meets:
        return list(chain.from_iterable(pieces))
    _, _, starts, ends = textstats.tokens(text)  # where each span is (str.split's spans)
    out, done, k = [], 0, 0
    while k < len(meets):
        first = last = meets[k]  # spans first..last+1 meet one after another
        while k + 1 < len(meets) and meets[k + 1] == last + 1:
            k, last = k + 1, last + 1
        out += chain.from_iterable(pieces[done:first])
        run = text[starts[first]:ends[last + 1]]  # the whitespace as it is: spaCy sees what it sees whole
        out += _SPANS.get(run) or _SPANS.setdefault(run, _spacy(run))
        done, k = last + 2, k + 1
    out += chain.from_iterable(pieces[done:])
    return out


@functools.lru_cache(maxsize=1 << 16)
def _punct(word: str) -> bool:
    """spaCy's is_punct: every character is Unicode punctuation (P*)."""
    return all(unicodedata.category(c)[0] == "P" for c in word)


def sentences(line: str) -> int:
    """How many sentences datatrove's split_into_sentences finds in a stripped `line` (English): the
    sentencizer's count, from the line's words. A token follows a sentence-final one and is not
    punctuation: a sentence starts. Whitespace other than one space between words is a token too."""
    ends, count, seen, last = _ends(), 0, False, None
    for m in _WORD.finditer(line):
        if last is not None and line[last:m.start()] != " " and seen:  # a whitespace token
            count, seen = count + 1, False
        last = m.end()
        for word in split(m.group()):
            final = word in ends
            if seen and not final and not _punct(word):
                count, seen = count + 1, False
            elif final:
                seen = True
    return count + 1 if last is not None else 0
