"""spaCy, imported for a tokenizer only: without torch where torch is not imported yet.

Contract: `spacy()` is the spacy module. spaCy's thinc imports torch when it can, 1.6 s of every
clean worker's start here, and a tokenizer never uses it; so torch is held back (`import torch`
fails) while spaCy imports, unless torch is imported already. thinc then runs without torch in
this process; torch itself imports as usual afterwards. A missing spaCy is a ShardlineError
naming the install.
"""

from __future__ import annotations

import functools
import sys

from shardline.core.errors import ShardlineError


@functools.cache
def spacy():
    try:
        if "torch" in sys.modules or "spacy" in sys.modules:
            import spacy
            return spacy
        sys.modules["torch"] = None  # type: ignore[assignment]
        try:
            import spacy
        finally:
            del sys.modules["torch"]
        return spacy
    except ImportError:
        raise ShardlineError("the quality rule sets count words as spaCy's English tokenizer does; "
                             "pip install -e . (spacy is a dependency of shardline)") from None
