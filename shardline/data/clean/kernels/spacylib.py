"""spaCy, imported for a tokenizer only: without torch where torch is not imported yet.

Contract: `spacy()` is the spacy module. spaCy's thinc imports torch when it can, 1.6 s of every
clean worker's start here, and a tokenizer never uses it; so torch is held back (`import torch`
fails) while spaCy imports, unless torch is imported already. thinc then runs without torch in
this process; torch itself imports as usual afterwards. A missing spaCy is one line naming the
extra (shardline.core.extras).
"""

from __future__ import annotations

import functools
import sys

from shardline.core import extras

WHAT = "a quality rule (clean.language, gopher_repetition, gopher_quality, c4, fineweb)"


@functools.cache
def spacy():
    if "torch" in sys.modules or "spacy" in sys.modules:
        return extras.need("spacy", WHAT)
    sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        return extras.need("spacy", WHAT)
    finally:
        del sys.modules["torch"]
