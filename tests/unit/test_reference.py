"""The quality rules next to their reference, datatrove 0.10.1 itself (with spaCy's blank English,
its default word tokenizer): keep or drop, and C4's kept text, on real prose, code, text mixing
both, and documents built to sit on either side of every default limit.

The texts are what every install has: the language reference (pydoc_data's topics, PSF licence),
the standard library's own source, and humanize's translated messages (a Prefect dependency).
With ../shared/corpora present, the slow test adds its WikiText and Shakespeare documents.
"""

import json
import sysconfig
from pathlib import Path

import pydoc_data.topics
import pytest
import spacy
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import reference
from shardline.data.clean.kernels import words
from tests.unit.test_language import UDHR_1, humanize_messages

CORPORA = Path(__file__).resolve().parents[3] / "shared" / "corpora"
NLP = spacy.blank("en")


def prose() -> list[str]:
    return [t for _, t in sorted(pydoc_data.topics.topics.items()) if len(t) > 2000]


def code(n: int) -> list[str]:
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"), key=lambda p: p.name)
    return [p.read_text(encoding="utf-8")[:20_000] for p in files[:n]]


def assert_agree(texts: list[str]) -> None:
    found = reference.compare(texts)
    for name, a in found.items():
        assert a.agree == a.docs, (name, f"{a.agree}/{a.docs}", [(texts[i][:80], m, t) for i, m, t in a.differ[:3]])


def reference_words(text: str) -> list[str]:
    return [t.text.strip() for t in NLP(text) if t.text.strip()]


PIECES = [*"aZé9 .,;:'\"-–—()[]{}#$%&*/\\!?…’“”\n\t\u00a0", "n't", "'s", "Mr.", "U.S.", "can", "not", "gonna",
          "http://x.io/a", "10km", "e.g.", ":)", "$5", "3.14", "co-op", "ab", "Dont"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=30).map("".join))
def test_words_are_spacys_on_any_text(text):
    """Per-span, cached: the same words as spaCy on the whole text, on a second look too."""
    assert words.split(text) == reference_words(text)
    assert words.split(text) == reference_words(text)


def test_words_on_real_text_and_sentences_as_the_sentencizer_counts():
    for text in prose()[:20] + code(5):
        assert words.split(text) == reference_words(text)
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    for line in ["Mr. Smith met J. R. Tolkien. He asked \"why?\" Go! U.S. Army.", "One... two!! three?!", "no end"]:
        assert words.sentences(line) == len(list(nlp(line).sents))


@pytest.mark.timeout(600)
def test_every_rule_set_decides_as_datatrove_does():
    texts = prose() + code(12) + reference.near_thresholds(prose()[:4], code(4))  # datatrove: ~0.1 s a document
    texts += list(UDHR_1.values()) + [humanize_messages(lang) for lang in ("it_IT", "de_DE", "fr_FR")]
    texts += ["", "\n\n", "word", "#" * 60, "- a\n- b\n- c\n"]  # empty and degenerate
    assert len(texts) > 250
    assert_agree(texts)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not CORPORA.is_dir(), reason="../shared/corpora is not here")
def test_every_rule_set_decides_as_datatrove_does_on_the_shared_corpora():
    texts = [json.loads(line)["text"] for f in ("wikitext2-test.jsonl", "tinyshakespeare.jsonl")
             for line in (CORPORA / f).read_text(encoding="utf-8").splitlines()]
    assert_agree(texts[::8] + reference.near_thresholds(texts[:2], code(2)))
