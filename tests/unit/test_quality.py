"""The quality rule sets, check by check, on real text: the opening of Coriolanus (tinyshakespeare,
public domain), François Pinard's essay in the standard library's heapq module and a few lines of
stdlib source (PSF licence), and web boilerplate built from them. Each check: a text it keeps, a
text it drops with the exact value it measured, and the same text kept with the check off."""

import pickle
import re
from collections import Counter

import numpy as np
import pytest
import spacy
from datatrove.utils.text import PUNCTUATION_SET
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from shardline.data.clean.rules import registry as rules
from shardline.data.clean.rules.c4 import C4, C4Rule
from shardline.data.clean.rules.fineweb import FineWeb, FineWebRule
from shardline.data.clean.rules.gopher import GopherQuality, GopherQualityRule, GopherRepetition, GopherRepetitionRule
from shardline.data.clean.rules.ruleset import RuleSet
from shardline.data.clean.stage.settings import Clean
from shardline.data.clean.verdict import Drop
from shardline.data.document import Document as D


def build(gopher_quality, gopher_repetition, c4, fineweb):
    """The enabled rule sets, as the registry builds them for a clean section."""
    cfg = Clean(gopher_quality=gopher_quality, gopher_repetition=gopher_repetition, c4=c4, fineweb=fineweb)
    return [r for r in rules.build(cfg) if isinstance(r, RuleSet)]


SHAKESPEARE = """First Citizen:
Before we proceed any further, hear me speak.

All:
Speak, speak.

First Citizen:
You are all resolved rather to die than to famish?

All:
Resolved. resolved.

First Citizen:
First, you know Caius Marcius is chief enemy to the people.

All:
We know't, we know't.

First Citizen:
Let us kill him, and we'll have corn at our own price.
Is't a verdict?

All:
No more talking on't; let it be done: away, away!

Second Citizen:
One word, good citizens.

First Citizen:
We are accounted poor citizens, the patricians good.
What authority surfeits on would relieve us: if they
would yield us but the superfluity, while it were
wholesome, we might guess they relieved us humanely;
but they think we are too dear: the leanness that
afflicts us, the object of our misery, is as an
inventory to particularise their abundance; our
sufferance is a gain to them Let us revenge this with
our pikes, ere we become rakes: for the gods know I
speak this in hunger for bread, not in thirst for revenge.

Second Citizen:
Would you proceed especially against Caius Marcius?

All:
Against him first: he's a very dog to the commonalty.

Second Citizen:
Consider you what services he has done for his country?

First Citizen:
Very well; and could be content to give him good
report fort, but that he pays himself with being proud."""

OPENING = SHAKESPEARE[:SHAKESPEARE.index("\n\nFirst Citizen:\nWe are")]  # the short speeches
SPEECH = SHAKESPEARE.split("\n")[33:43]  # "We are accounted poor citizens, ..." (10 lines)

HEAPQ = """Heaps are arrays for which a[k] <= a[2*k+1] and a[k] <= a[2*k+2] for
all k, counting elements from 0.  For the sake of comparison,
non-existing elements are considered to be infinite.  The interesting
property of a heap is that a[0] is always its smallest element.

In the tree above, each cell `k' is topping `2*k+1' and `2*k+2'.  In
a usual binary tournament we see in sports, each cell is the winner
over the two cells it tops, and we can trace the winner down the tree
to see all opponents s/he had.  However, in many computer applications
of such tournaments, we do not need to trace the history of a winner.
To be more memory efficient, when a winner is promoted, we try to
replace it by something else at a lower level, and the rule becomes
that a cell and the two cells it tops contain three different items,
but the top cell "wins" over the two topped cells.

If this heap invariant is protected at all time, index 0 is clearly
the overall winner.  The simplest algorithmic way to remove it and
find the "next" winner is to move some loser (let's say cell 30 in the
diagram above) into the 0 position, and then percolate this new 0 down
the tree, exchanging values, until the invariant is re-established.
This is clearly logarithmic on the total number of items in the tree.
By iterating over all items, you get an O(n ln n) sort.

Various structures for implementing schedulers have been extensively
studied, and heaps are good for this, as they are reasonably speedy,
the speed is almost constant, and the worst case is not much different
than the average case.  However, there are other representations which
are more efficient overall, yet the worst cases might be terrible."""

TOURNAMENT = """The strange invariant above is meant to be an efficient memory
representation for a tournament.  The numbers below are `k', not a[k]:

                                   0

                  1                                 2

          3               4                5               6

      7       8       9       10      11      12      13      14

    15 16   17 18   19 20   21 22   23 24   25 26   27 28   29 30"""

HEAPPOP = '''def heappop(heap):
    """Pop the smallest item off the heap, maintaining the heap invariant."""
    lastelt = heap.pop()    # raises appropriate IndexError if heap is empty
    if heap:
        returnitem = heap[0]
        heap[0] = lastelt
        _siftup(heap, 0)
        return returnitem
    return lastelt'''

RE_HEADER = """#
# Secret Labs' Regular Expression Engine
#
# re-compatible interface for the sre matching engine
#
# Copyright (c) 1998-2001 by Secret Labs AB.  All rights reserved.
#"""

PARAGRAPHS = HEAPQ.split("\n\n")
PROSE = "\n\n".join(p.replace("\n", " ") for p in PARAGRAPHS)  # the essay unwrapped, as web text comes
SENTENCE = PROSE[:PROSE.index("0.") + 2]  # "Heaps are arrays for which ... counting elements from 0."
LINKS = "\n".join(" ".join(p.split()[:6]) + "..." for p in PARAGRAPHS + TOURNAMENT.split("\n\n")[:1])
BULLETS = "\n".join("- " + line for line in SPEECH)
FOOTED = "\n\n".join([PARAGRAPHS[0], PARAGRAPHS[3], PARAGRAPHS[1], PARAGRAPHS[3], PARAGRAPHS[2], PARAGRAPHS[3]])
COOKIES = "We use cookies to improve your experience. By using this site you accept our Privacy Policy."
JAVASCRIPT = "Please enable JavaScript in your browser to see the comments."
LOREM = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt."
BASE64_DOC = "Encode the bytes-like objects using {encoding} and return a bytes object."  # base64.py


_NLP = spacy.blank("en")


def split(text: str) -> list[str]:
    """datatrove's split_into_words, by hand: spaCy on the whole text, tokens stripped, blanks out."""
    return [t.text.strip() for t in _NLP(text) if t.text.strip()]


def words(text: str) -> int:
    """Gopher quality's word count: words with a character outside datatrove's punctuation."""
    return sum(any(ch not in PUNCTUATION_SET for ch in w) for w in split(text))


OFF = {
    GopherQuality: dict.fromkeys(GopherQualityRule.FIELDS),
    GopherRepetition: dict.fromkeys(["dup_line_frac", "dup_para_frac", "dup_line_char_frac", "dup_para_char_frac",
                                     "top_n_grams", "dup_n_grams"]),
    C4: {"remove_citations": False, "filter_no_terminal_punct": False, "min_num_sentences": None,
         "min_words_per_line": None, "max_word_length": None, "filter_lorem_ipsum": False, "filter_javascript": False,
         "filter_curly_bracket": False, "filter_policy": False},
    FineWeb: dict.fromkeys(FineWebRule.FIELDS),
}
RULE = {GopherQuality: GopherQualityRule, GopherRepetition: GopherRepetitionRule,
        C4: C4Rule, FineWeb: FineWebRule}


def only(cls, **on):
    """The rule of `cls` with every check off except `on` (value ... = the field's default)."""
    cfg = {k: cls.model_fields[k].default if v is ... else v for k, v in on.items()}
    return RULE[cls](cls(**{**OFF[cls], **cfg}))


def top_share(text: str, n: int) -> float:
    grams = Counter(" ".join(g) for g in zip(*(split(text)[i:] for i in range(n))))
    gram, count = grams.most_common(1)[0]
    return count * len(gram) / len(text)


def dup_share(text: str, n: int) -> float:
    """datatrove's find_all_duplicate walk: n-grams keyed by their characters run together."""
    seen, dup, i, w = set(), 0, 0, split(text)
    while i < len(w) - n + 1:
        gram = "".join(w[i:i + n])
        if gram in seen:
            dup, i = dup + len(gram), i + n
        else:
            seen.add(gram)
            i += 1
    return dup / len(text)


# (set, check, limit or ... for the default, a text it keeps, a text it drops, the value measured)
DROPS = [
    (GopherQuality, "min_doc_words", ..., PROSE, SHAKESPEARE.split("\n")[1], 8),
    (GopherQuality, "max_doc_words", 100, SHAKESPEARE.split("\n")[1], PROSE, words(PROSE)),
    (GopherQuality, "min_avg_word_length", ..., PROSE, "No, no, no, no, no.", 2.0),  # 10 letters, 5 words
    (GopherQuality, "max_avg_word_length", ..., PROSE, "        except (GeneratorExit, StopAsyncIteration):",
     round((6 + 13 + 18) / 3, 4)),  # _collections_abc.py; "(" "," "):" are punctuation
    (GopherQuality, "max_symbol_word_ratio", ..., PROSE, RE_HEADER, round(7 / 38, 4)),  # 7 '#' in 38 words
    (GopherQuality, "max_symbol_word_ratio", ..., PROSE, LINKS, round(LINKS.count("...") / len(split(LINKS)), 4)),
    (GopherQuality, "max_bullet_lines_ratio", ..., "First Citizen:\n" + "\n".join(BULLETS.split("\n")[:9]), BULLETS,
     1.0),  # 9 bullets of 10 lines is 0.9: not above the limit
    (GopherQuality, "max_ellipsis_lines_ratio", ..., PROSE, LINKS, 1.0),
    (GopherQuality, "max_non_alpha_words_ratio", ..., PROSE, TOURNAMENT, round(22 / 59, 4)),  # 22 words, 37 others
    (GopherQuality, "min_stop_words", ..., "Yet may he live awhile; and, it may be,",  # "and," "be,": 2 stop words
     SHAKESPEARE.split("\n")[7], 1),  # "You are all resolved rather to die than to famish?": "to" only
    (GopherRepetition, "dup_para_frac", ..., PROSE, FOOTED, round(2 / 6, 4)),  # the last paragraph, three times
    (GopherRepetition, "dup_para_char_frac", ..., PROSE, FOOTED, round(2 * len(PARAGRAPHS[3]) / len(FOOTED), 4)),
    (GopherRepetition, "dup_line_frac", ..., SHAKESPEARE, OPENING, round(6 / 19, 4)),  # "First Citizen:" 4x...
    (GopherRepetition, "dup_line_char_frac", ..., SHAKESPEARE, FOOTED,
     round(2 * (len(PARAGRAPHS[3]) - PARAGRAPHS[3].count("\n")) / len(FOOTED), 4)),
    *[(GopherRepetition, "top_n_grams", ((n, limit),), PROSE, "No, no, no, no, no.", round(share, 4))
      for n, limit, share in [(2, 0.2, 16 / 19), (3, 0.18, 18 / 19), (4, 0.16, 27 / 19)]],  # ", no" 4x, ", no ," 3x...
    *[(GopherRepetition, "dup_n_grams", ((n, limit),), PROSE, SENTENCE + " " + SENTENCE, round(dup_share(
        SENTENCE + " " + SENTENCE, n), 4)) for n, limit in GopherRepetition().dup_n_grams],
    (C4, "filter_lorem_ipsum", ..., PROSE, PROSE + "\n" + LOREM, 1),
    (C4, "filter_curly_bracket", ..., PROSE, PROSE + "\n" + BASE64_DOC, 1),
    (C4, "min_num_sentences", ..., PROSE, SHAKESPEARE.split("\n")[1], 1),
    (FineWeb, "line_punct_thr", ..., PROSE, HEAPPOP, 0.0),  # '"' is no terminal punctuation (0.10)
    (FineWeb, "short_line_thr", ..., SHAKESPEARE, OPENING, round(14 / 19, 4)),  # blank lines left out
    (FineWeb, "char_duplicates_ratio", ..., PROSE, SHAKESPEARE,  # 5 "First Citizen:", 4 "All:", 2 "Second..."
     round((5 * 14 + 4 * 4 + 2 * 15) / (len(SHAKESPEARE) - SHAKESPEARE.count("\n")), 4)),
    (FineWeb, "new_line_ratio", ..., PROSE, "\n".join(__import__("heapq").__all__), round(7 / 8, 4)),
]


@pytest.mark.parametrize("cls, check, limit, keeps, drops, value", DROPS,
                         ids=[f"{c.__name__}.{k}-{i}" for i, (c, k, *_) in enumerate(DROPS)])
def test_each_check_keeps_drops_and_switches_off(cls, check, limit, keeps, drops, value):
    rule = only(cls, **{check: limit})
    assert rule(D(keeps)) is keeps
    setting = cls.model_fields[check].default if limit is ... else limit
    name = f"{rule.name}.{check}" + (f".{setting[0][0]}" if check.endswith("_n_grams") else "")
    got = rule(D(drops))
    assert got[:3] == (name, value, setting[0][1] if check.endswith("_n_grams") else 0 if setting is True else setting)
    empty = (f"{rule.name}.empty",) if cls in (GopherRepetition, FineWeb) else ()
    assert rule.checks == (("c4", name, "c4.all_lines_removed") if cls is C4 else (*empty, name))  # c4: lines first
    off = only(cls, **{check: False if setting is True else None})
    assert off(D(drops)) is drops


def test_values_are_plain_counts_on_real_text():
    """Hashes and bounds never change a value: with the limit just under a text's share the set
    drops it with that share, at the share it keeps it."""
    texts = [SHAKESPEARE, OPENING, PROSE, HEAPQ, FOOTED, TOURNAMENT, LINKS, SENTENCE + " " + SENTENCE, HEAPPOP]
    for text in texts:
        for n in range(1, 11):
            share = top_share(text, n)
            assert only(GopherRepetition, top_n_grams=((n, share - 1e-9),))(D(text)).value == round(share, 4)
            assert only(GopherRepetition, top_n_grams=((n, share),))(D(text)) is text
            dup = dup_share(text, n)
            if dup:
                assert only(GopherRepetition, dup_n_grams=((n, dup - 1e-9),))(D(text)).value == round(dup, 4)
            assert only(GopherRepetition, dup_n_grams=((n, dup),))(D(text)) is text


def test_ngrams_repeat_by_their_characters_as_datatrove_joins_them():
    # "".join: "ab c" repeats "a bc" for the duplicate n-grams; the top n-gram is keyed by its words
    text = "x" * 40 + " ab c d e f g  a bc d e f g"
    assert dup_share(text, 5) == 6 / len(text)  # "a bc d e f" repeats "ab c d e f": 6 characters
    assert only(GopherRepetition, dup_n_grams=((5, 0.05),))(D(text)).value == round(6 / len(text), 4)
    assert only(GopherRepetition, top_n_grams=((2, 0.05),))(D(text)).value == round(2 * len("d e") / len(text), 4)
    assert only(GopherRepetition, top_n_grams=((2, 0.1),))(D(text)) is text  # "ab c" and "a bc" are not one 2-gram


def test_gopher_quality_counts_datatroves_words():
    # spaCy's words: "and," is "and" ","; "(self," three words; "don't" two
    assert only(GopherQuality, min_stop_words=...)(D("Yet may he live awhile; and, it may be,")) == \
        "Yet may he live awhile; and, it may be,"
    assert only(GopherQuality, min_stop_words=...)(D("To be, or not To be")).value == 1  # case counts: "be" only
    assert only(GopherQuality, min_doc_words=...)(D("def f(self, x): don't return x;")).value == words(
        "def f(self, x): don't return x;") == 7  # def f(self , x ): do n't return x ; less "," and ";"
    starred = "\n".join("* " + x for x in SPEECH)  # datatrove's bullets are '•' and '-' only
    assert only(GopherQuality, max_bullet_lines_ratio=...)(D(starred)) is starred
    assert only(GopherQuality, max_bullet_lines_ratio=...)(D("\n".join("• " + x for x in SPEECH))).value == 1.0


def test_c4_removes_exactly_the_lines_datatrove_does():
    rule = C4Rule(C4(min_num_sentences=None))
    kept = rule(D(SHAKESPEARE))
    lines = [
        "Before we proceed any further, hear me speak.",
        "You are all resolved rather to die than to famish?",
        "First, you know Caius Marcius is chief enemy to the people.",
        "We know't, we know't.",
        "Let us kill him, and we'll have corn at our own price.",
        "Is't a verdict?",  # 3 words: kept; "Speak, speak." has 2
        "No more talking on't; let it be done: away, away!",
        "One word, good citizens.",
        "We are accounted poor citizens, the patricians good.",
        "speak this in hunger for bread, not in thirst for revenge.",
        "Would you proceed especially against Caius Marcius?",
        "Against him first: he's a very dog to the commonalty.",
        "Consider you what services he has done for his country?",
        "report fort, but that he pays himself with being proud.",
    ]
    assert kept == "\n".join(lines)
    assert C4Rule(C4())(D(SHAKESPEARE)) == kept  # 14 sentences: enough
    # blank lines go; "[0]" goes too, a citation to datatrove's pattern ("[k]" is not)
    assert C4Rule(C4())(D(PROSE)) == "\n".join(PROSE.split("\n\n")).replace("a[0]", "a")
    assert C4Rule(C4())(D(kept)) is kept


LINE_CHECKS = [  # (check, a line it removes; PROSE's lines stay)
    ("max_word_length", "Logo: data:image/png;base64," + "iVBORw0KGgoAAAANSUhEUg" * 46 + "."),
    ("filter_no_terminal_punct", SHAKESPEARE.split("\n")[0]),  # "First Citizen:"
    ("filter_no_terminal_punct", "Read the rest of this essay..."),  # an ellipsis is no end
    ("min_words_per_line", "Speak, speak."),
    ("filter_javascript", JAVASCRIPT),
    ("filter_policy", COOKIES),
]


@pytest.mark.parametrize("check, line", LINE_CHECKS)
def test_c4_line_checks_remove_their_lines(check, line):
    page = PROSE.replace("\n\n", "\n")  # lines that every check keeps
    mixed = page.replace("\n", "\n" + line + "\n", 1)
    assert only(C4, **{check: ...})(D(page)) is page
    assert only(C4, **{check: ...})(D(mixed)) == page
    assert only(C4)(D(mixed)) is mixed  # off


def test_c4_citations_all_lines_removed_and_sentences():
    wiki = "Heaps are arrays[1] for which a[k] <= a[2*k+1].[citation needed] See the tree above.[edit]"
    assert only(C4, remove_citations=True)(D(wiki)) == "Heaps are arrays for which a[k] <= a[2*k+1]. See the tree above."
    assert only(C4, filter_no_terminal_punct=True)(D("First Citizen:\nAll:")) == Drop("c4.all_lines_removed", 0, 1)
    assert only(C4, min_num_sentences=4)(D(PARAGRAPHS[0].replace("\n", " "))).value == 3
    # an initial or a title is no sentence end; '?' and '!' are, closing quotes may follow
    assert only(C4, min_num_sentences=9)(D("Mr. Smith met J. R. Tolkien. He asked \"why?\" Go! U.S. Army.")).value == 4


def test_fineweb_punctuation_zero_and_short_line_length():
    code = "\n".join(HEAPPOP.split("\n")[2:])  # no docstring: no line ends in punctuation
    assert only(FineWeb, line_punct_thr=...)(D(code)) == Drop("fineweb.line_punct_thr", 0.0, 0.12)
    spared = FineWebRule(FineWeb(**{**OFF[FineWeb], "line_punct_thr": 0.12, "line_punct_exclude_zero": True}))
    assert spared(D(code)) is code
    assert spared(D(code + "\n#\n# The end.")).value == round(1 / 9, 4)  # one line does: no longer spared
    lax = FineWebRule(FineWeb(**{**OFF[FineWeb], "short_line_thr": 0.67, "short_line_length": 10}))
    assert lax(D(OPENING)) is OPENING  # 4 of its 19 non-blank lines have at most 10 characters
    assert only(FineWeb, short_line_thr=0.5)(D(OPENING)).value == round(14 / 19, 4)


def test_defaults_keep_prose():
    sets = build(GopherQuality(), GopherRepetition(), C4(), FineWeb())
    text = PROSE
    for rule in sets:
        text = rule(D(text))
        assert isinstance(text, str), text
    assert text == "\n".join(PROSE.split("\n\n")).replace("a[0]", "a")  # C4's doing (see below)


def test_build_order_checks_and_pickling():
    sets = build(GopherQuality(), GopherRepetition(), C4(), FineWeb())
    assert [r.name for r in sets] == ["gopher_repetition", "gopher_quality", "c4", "fineweb"]
    assert [r.name for r in build(None, GopherRepetition(), None, FineWeb())] == ["gopher_repetition",
                                                                                           "fineweb"]
    assert build(None, None, None, None) == []
    assert sets[0].checks[:6] == ("gopher_repetition.empty", "gopher_repetition.dup_para_frac", "gopher_repetition.dup_para_char_frac",
                                  "gopher_repetition.dup_line_frac", "gopher_repetition.dup_line_char_frac",
                                  "gopher_repetition.top_n_grams.2")
    assert sets[0].checks[-1] == "gopher_repetition.dup_n_grams.10" and len(sets[0].checks) == 14
    assert sets[1].checks == tuple(f"gopher_quality.{f}" for f in GopherQualityRule.FIELDS)
    assert sets[2].checks == ("c4", "c4.filter_lorem_ipsum", "c4.filter_curly_bracket", "c4.min_num_sentences",
                              "c4.all_lines_removed")  # "c4": the lines its other checks remove (bytes)
    assert sets[3].checks == ("fineweb.empty", *(f"fineweb.{f}" for f in FineWebRule.FIELDS))
    for rule in sets:
        back = pickle.loads(pickle.dumps(rule))
        assert back == rule and back.checks == rule.checks
        assert [back(D(t)) for t in (SHAKESPEARE, OPENING, PROSE)] == [rule(D(t)) for t in (SHAKESPEARE, OPENING, PROSE)]


def test_settings_are_validated_by_name():
    def error(cls, **kw) -> str:
        with pytest.raises(ValidationError) as e:
            cls(**kw)
        return str(e.value)

    assert "min_doc_words" in error(GopherQuality, min_doc_words=-1)
    assert "max_doc_words (10)" in error(GopherQuality, min_doc_words=20, max_doc_words=10)
    assert "min_stop_words" in error(GopherQuality, min_stop_words=9)
    assert "dup_line_frac" in error(GopherRepetition, dup_line_frac=1.5)
    assert re.search(r"top_n_grams\.0\.0", error(GopherRepetition, top_n_grams=((0, 0.2),)))
    assert "dup_n_grams: n=5 is given twice" in error(GopherRepetition, dup_n_grams=((5, 0.1), (5, 0.2)))
    assert "max_word_length" in error(C4, max_word_length=0)
    assert "short_line_thr" in error(FineWeb, short_line_thr=2)
    assert "bogus" in error(FineWeb, bogus=1)
    assert GopherRepetition(top_n_grams=None, dup_n_grams=()).top_n_grams is None


_WORDS = st.lists(st.sampled_from(["a", "b", "ab", "c", "bc", "abc", "the", "é", "x"]), max_size=60)


@settings(max_examples=400, deadline=None)
@given(_WORDS, st.integers(1, 10))
def test_ngram_measures_are_datatroves_functions(words, n):
    """The compiled measures against datatrove's own find_top_duplicate and find_all_duplicate,
    on words chosen to repeat and to run together ("ab" "c" is "a" "bc" once joined)."""
    from datatrove.pipeline.filters.gopher_repetition_filter import (find_all_duplicate, find_top_duplicate,
                                                                     get_n_grams)

    from shardline.data.clean.kernels import textstats as ts

    text = " ".join(words)
    starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]]).astype(np.int64)[:len(words)]
    ends = starts + np.array([len(w) for w in words], np.int64)
    ids = np.array([sorted(set(words)).index(w) for w in words], np.int64)
    grams = get_n_grams(words, n)
    chars = max(len(text), 1)
    share = ts.top_ngrams(ids, ends - starts, np.array([n]), np.array([1.0]), chars)[0]
    assert share == (find_top_duplicate(grams) / chars if grams else -1.0)
    # the next n: counted exactly, or spared by the bound from the n-grams (then within its limit), or
    # not reached (the first share is above its limit)
    after = ts.top_ngrams(ids, ends - starts, np.array([n, n + 1]), np.array([1.0, 0.05]), chars)[1]
    exact = find_top_duplicate(grams_after) / chars if (grams_after := get_n_grams(words, n + 1)) else -1.0
    assert after == exact or (after == 0.0 and exact <= 0.05) or (after == -1.0 and share > 1.0)
    cps = ts.code_points(text)
    polys = ts.word_polys(cps, starts, ends)
    assert ts.dup_ngram_chars(cps, starts, ends, polys, np.array([n, n + 1], np.int64)).tolist() == [
        find_all_duplicate(words, n), find_all_duplicate(words, n + 1)]


_LINES = st.lists(st.sampled_from(["a", "b", "ab", " ", "\t", "\n", "\n\n", "\r", "\r\n", "\x0b", "\x85", "\u00a0",
                                   "\ufffd", "\x07", "\x9b", "é", "a b", "\u2028", "x" * 30]), max_size=40).map("".join)


@settings(max_examples=500, deadline=None)
@given(_LINES)
def test_line_measures_are_the_python_they_replace(text):
    """lines.py against the splits it replaces: datatrove's paragraphs and lines with its
    find_duplicates, and the basic rules' own measures."""
    from datatrove.pipeline.filters.gopher_repetition_filter import find_duplicates

    from shardline.data.clean.rules import basic
    from shardline.data.clean.kernels import lines

    for k, strip, pattern in ((2, True, r"\n{2,}"), (1, False, r"\n+")):
        pieces = re.split(pattern, text.strip() if strip else text)
        assert lines.piece_duplicates(text, k, strip) == (len(pieces), *find_duplicates(pieces))
    stripped = [ln for ln in map(str.strip, text.split("\n")) if ln]
    longest, n, repeats, letters, spaces, fffd, changes_ws, changes_ctl = lines.line_stats(text)
    assert longest == max(map(len, text.split("\n")))
    assert (n, n - repeats) == (len(stripped), len(set(stripped)))
    assert (letters, spaces) == (len(re.findall(basic.LETTER, text)), len(re.findall(basic.SPACE, text)))
    assert fffd == text.count("\ufffd")
    ws = text.replace("\r\n", "\n").replace("\r", "\n")
    ws = re.sub(r"\n{4,}", "\n\n\n", re.sub(r"[ \t]+\n", "\n", ws)).rstrip().lstrip("\n")
    assert changes_ws == (ws != text)
    assert changes_ctl == (basic._CONTROL.sub("", text) != text)


def _whitespace_by_python(text: str) -> str:
    """The whitespace rule as it was written in Python, before it was compiled."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if " \n" in text or "\t\n" in text:
        lines = text.split("\n")
        last = lines.pop()
        text = "\n".join([ln.rstrip(" \t") for ln in lines] + [last])
    if "\n\n\n\n" in text:
        text = re.sub(r"\n{4,}", "\n\n\n", text)
    return text.rstrip().lstrip("\n")


@settings(max_examples=800, deadline=None)
@given(_LINES)
def test_the_compiled_whitespace_rule_is_the_python_one(text):
    from shardline.data.clean.rules import basic

    out = basic.whitespace(D(text))
    assert out == _whitespace_by_python(text)
    assert (out is text) == (out == text)  # unchanged: the same object, as before
