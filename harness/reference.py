"""datatrove next to the clean stage's quality rules: the same documents through both, one rule
set at a time, at both sides' defaults. The reference is datatrove 0.10.1 with its default English
word tokenizer (spaCy's blank English); `pip install -e .[bench]` installs it.

    compare(texts) -> {set: Agreement}

A set agrees on a document when both keep it or both drop it, and, for C4, both keep the same text.
`Agreement.differ` holds each disagreeing document's index and both sides' answers: Shardline's
Drop (check, measured value, limit) or kept, and datatrove's reason. `near_thresholds()` builds
documents that sit on either side of every limit, from real text, for the tests and the bench.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field

import numpy as np

REFERENCE = "0.10.1"
SETS = ("gopher_repetition", "gopher_quality", "c4", "fineweb", "language")
CHAIN = ("language", "gopher_repetition", "gopher_quality", "c4", "fineweb")  # FineWeb's order


@dataclass
class Agreement:
    docs: int = 0
    agree: int = 0
    differ: list[tuple[int, object, object]] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.agree / self.docs if self.docs else 1.0


class _Arrays:
    """fasttext-predict's model answering as fasttext's does (numpy scores), for datatrove."""

    def __init__(self, model):
        self.model = model

    def predict(self, text, k=1):
        labels, scores = self.model.predict(text, k=k)
        return labels, np.asarray(scores)


def theirs() -> dict:
    """datatrove's filters at their defaults, each as text -> (kept, text or reason)."""
    version = importlib.metadata.version("datatrove")
    if version != REFERENCE:
        raise SystemExit(f"the reference is datatrove {REFERENCE}; {version} is installed: "
                         f"pip install datatrove=={REFERENCE}")
    from datatrove.data import Document
    from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                            GopherRepetitionFilter, LanguageFilter)

    from shardline.data.clean.rules import language

    # its dependency check wants the fasttext-numpy2-wheel distribution, which would replace the
    # `fasttext` module of fasttext-predict (fastText's own C++, the reference here; the line computes the
    # same numbers itself: shardline/data/clean/kernels/lid.py); the model FineWeb used is lid.176.bin, ours its .ftz
    import fasttext

    lid = object.__new__(LanguageFilter)
    lid.__init__(languages=["en"])
    lid.model._model = _Arrays(fasttext.load_model(str(language.model_path())))
    filters = {"gopher_repetition": GopherRepetitionFilter(), "gopher_quality": GopherQualityFilter(),
               "c4": C4QualityFilter(), "fineweb": FineWebQualityFilter(), "language": lid}

    def run(f):
        def one(text: str):
            doc = Document(text=text, id="0")
            out = f.filter(doc)
            kept = out is True or (isinstance(out, tuple) and out[0])
            return (True, doc.text) if kept else (False, out[1] if isinstance(out, tuple) else "dropped")
        return one

    return {name: run(f) for name, f in filters.items()}


def ours() -> dict:
    """Shardline's rule sets at their defaults, each as text -> (kept, text or Drop)."""
    from shardline.data.clean.rules.c4 import C4, C4Rule
    from shardline.data.clean.rules.fineweb import FineWeb, FineWebRule
    from shardline.data.clean.rules.gopher import GopherQuality, GopherQualityRule, GopherRepetition, GopherRepetitionRule
    from shardline.data.clean.rules.language import Language, LanguageRule
    from shardline.data.clean.verdict import Drop
    from shardline.data.document import Document

    rules = {"gopher_repetition": GopherRepetitionRule(GopherRepetition()),
             "gopher_quality": GopherQualityRule(GopherQuality()), "c4": C4Rule(C4()),
             "fineweb": FineWebRule(FineWeb()), "language": LanguageRule(Language())}

    def run(rule):
        def one(text: str):
            out = rule(Document(text))
            return (False, out) if isinstance(out, Drop) else (True, out)
        return one

    return {name: run(r) for name, r in rules.items()}


def compare(texts: list[str], sets=SETS, mine=None, reference=None) -> dict[str, Agreement]:
    mine, reference = mine or ours(), reference or theirs()
    out = {}
    for name in sets:
        a = out[name] = Agreement()
        for i, text in enumerate(texts):
            m, t = mine[name](text), reference[name](text)
            a.docs += 1
            if m[0] == t[0] and (not m[0] or name != "c4" or m[1] == t[1]):
                a.agree += 1
            else:
                a.differ.append((i, m[1] if not m[0] else "kept", t[1] if not t[0] else "kept"))
    return out


def near_thresholds(prose: list[str], code: list[str]) -> list[str]:
    """Documents on both sides of the default limits, made from real prose and code: prose cut to
    ~50 words, lines repeated up to ~30%, n-grams repeated, hashes, ellipses and bullets added line
    by line, lines unpunctuated or shortened, prose and code mixed in every proportion."""
    docs = []
    rng = np.random.default_rng(0)
    for p in prose:
        words = p.split()
        docs += [" ".join(words[:k]) for k in range(44, 58, 2)]  # min_doc_words (50)
        lines = [ln for ln in p.split("\n") if ln.strip()] or [p]
        for k in range(1, 6):  # repeated lines and paragraphs around 0.2-0.3
            docs.append("\n".join(lines + lines[:k * len(lines) // 10]))
            docs.append("\n\n".join(lines + lines[:k * len(lines) // 12]))
        for k in (1, 2, 3, 4):  # repeated n-grams
            chunk = " ".join(words[:8 * k])
            docs.append(" ".join(words[:60]) + " " + chunk + " " + chunk)
        for mark in ("#", "...", "…", "• ", "- "):  # symbols per word, bullets, ellipses
            for share in (0.05, 0.1, 0.2, 0.3, 0.9):
                ls = list(lines)
                for j in rng.choice(len(ls), max(1, int(share * len(ls))), replace=False):
                    ls[j] = mark + ls[j] if mark.endswith(" ") else ls[j] + mark
                docs.append("\n".join(ls))
        for share in (0.05, 0.1, 0.12, 0.15, 0.5):  # lines ending in punctuation (FineWeb: 0.12)
            ls = [ln.rstrip(".!?\"'") for ln in lines]
            for j in rng.choice(len(ls), max(1, int(share * len(ls))), replace=False):
                ls[j] = ls[j] + "."
            docs.append("\n".join(ls))
        docs.append("\n".join(w for w in words[:120]))  # one word per line: newlines per word
        docs.append("\n".join(" ".join(words[i:i + 4]) for i in range(0, 200, 4)))  # short lines
    for c in code:
        docs.append(c)
        for p in prose[:8]:  # prose and code mixed: the share of words with a letter moves
            cut = len(c) * int(rng.integers(1, 9)) // 8
            docs.append(p + "\n\n" + c[:cut])
    return docs
