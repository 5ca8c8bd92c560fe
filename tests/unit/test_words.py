"""words.py and wordtable.py: spaCy's words from a table of spans, and the two kinds of span it
answers without spaCy. The equality with spaCy on real and random text is in test_reference.py;
here: why the shortcut is exact, and that a full or too small table changes no answer."""

import itertools
import random

import numpy as np
import spacy
from hypothesis import given, settings
from hypothesis import strategies as st

from shardline.data.clean.kernels import textstats, words, wordsplit, wordtable

NLP = spacy.blank("en")
NLP.add_pipe("sentencizer")


def spacy_words(text: str) -> list[str]:
    return [t.text.strip() for t in NLP.tokenizer(text) if t.text.strip()]


def plain_spans():
    letters, digits = "abcxyzABCXYZ", "0123456789"
    rng = random.Random(0)
    yield from ("".join(p) for n in (1, 2, 3) for p in itertools.product(letters, repeat=n))
    yield from ("".join(p) for n in (1, 2, 3, 4) for p in itertools.product(digits, repeat=n))
    for _ in range(20_000):
        yield "".join(rng.choices("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", k=rng.randint(4, 40)))
        yield "".join(rng.choices(digits, k=rng.randint(5, 40)))


def test_spacy_splits_no_plain_span_but_its_special_cases():
    """What the table answers without spaCy: a span of ASCII letters alone or digits alone is one
    word unless it is a special case. spaCy's English prefixes, suffixes, infixes, token and URL
    patterns match none of them (so the tokenizer has nothing to split), and its special cases
    made of letters are in the table before any span is answered; none is made of digits."""
    t = NLP.tokenizer
    for span in plain_spans():
        assert not (t.prefix_search(span) or t.suffix_search(span) or list(t.infix_finditer(span))
                    or (t.token_match and t.token_match(span)) or (t.url_match and t.url_match(span))), span
    specials = [s for s in t.rules if s.isascii() and (s.isalpha() or s.isdigit())]
    assert specials and not any(s.isdigit() for s in specials)
    table = words.table()
    for s in specials:  # in the table, with spaCy's words: "cannot" is "can" "not"
        w = words.analyse(s)
        assert w.strings(s) == spacy_words(s)
    assert words.split("cannot gonna Dont 1999 abc") == ["can", "not", "gon", "na", "Do", "nt", "1999", "abc"]
    assert table.state[1] > len(specials)


def test_equal_words_equal_ids_and_flags_as_their_characters_say():
    text = "The cat, the cat; THE dog... (ok) — fin. 42 ?!"
    w = words.analyse(text)
    strings = w.strings(text)
    assert strings == spacy_words(text)
    for (a, ia), (b, ib) in itertools.combinations(zip(strings, w.ids.tolist()), 2):
        assert (a == b) == (ia == ib), (a, b)
    assert w.polys.tolist() == textstats.word_polys(w.cps, w.starts, w.ends).tolist()  # as the table keeps them
    flags = dict(zip(strings, w.flags.tolist()))
    assert flags["cat"] == wordtable.NONSYMBOL | wordtable.LETTER
    assert flags["."] == wordtable.FINAL | wordtable.PUNCT
    assert flags["..."] == wordtable.PUNCT  # not one sentence-final character
    assert flags["42"] == wordtable.NONSYMBOL
    assert flags["—"] == wordtable.PUNCT


def test_a_table_too_small_for_a_corpus_empties_itself_and_answers_the_same():
    big = words.table()
    members = (big.left_words, big.right_words, big.pairs)
    small = wordsplit.Table(big.fixed, members, slots=2048, arena=16_000)  # room for ~300 spans past its fixed ones
    resets = []
    reset = small.reset
    small.reset = lambda: (resets.append(1), reset())
    texts = ["Mr. Smith met J. R. Tolkien: (he said) 10km, U.S. and/or 3.14 :) <unk> . " * 3, "short text", ""]
    texts += [" ".join(f"word{i}-{k} w{i}x, ({i}{k})" for i in range(60)) for k in range(8)]
    for text in texts * 2:
        starts, ends, *_ = small.words(textstats.code_points(text), words._learn)
        assert [text[a:b] for a, b in zip(starts.tolist(), ends.tolist())] == spacy_words(text)
    assert len(resets) >= 3


def test_a_text_bigger_than_the_table_is_split_by_spacy_whole(monkeypatch):
    tiny = wordsplit.Table([], ([], [], np.zeros((0, 0), np.bool_)), slots=8, arena=64)  # 4 spans at most
    monkeypatch.setattr(words, "table", lambda: tiny)
    text = "a b c d e f g h i j k l, m. (n) " * 5
    w = words._analyse(text)
    assert w.strings(text) == spacy_words(text)
    assert len(set(w.ids.tolist())) == len(set(spacy_words(text)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*"aZé9.,;:'\"-()[]!?…’", " ", "  ", "\t", "Mr.", "U.S.", ":)", ": (", "e.g.",
                                 "etc.", "No.", "3.14", "?!", "...", "“Quoted.”"]), max_size=40).map("".join))
def test_sentences_are_the_sentencizers(line):
    line = line.strip()
    assert words.sentences(line) == len(list(NLP(line).sents))
