"""params.yaml's `clean` section (`Clean`), assembled from the rule registry: one field per
`rules.RULES` entry (its setting, declared next to the rule's code; a plug-in's in its
distribution), in the rules' order, then the stage-wide settings, which cannot differ per source
because they compare documents across sources (`STAGE_WIDE`). Frozen and validated like every
section (core/section_base.py); the loader (shardline/paramsfile.py) completes `Params` with it, and names every
known rule when params.yaml names one it does not know (`known_keys`).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, create_model, model_validator

from shardline.core import plugins
from shardline.core.plugins import PluginError
from shardline.core.section_base import _Section
from shardline.data.clean.rules import registry as rules
from shardline.data.clean.stage.minhash import NearDedup

_STAGE = {
    "dedup": (bool, Field(True, description="Exact dedup by content hash within and across sources; the first in "
                                            "params order wins.")),
    "near_dedup": (NearDedup | None, Field(None, description="MinHash LSH near-duplicate removal within and across "
                                           "sources; the first in params order wins, as with exact dedup.")),
    "drop_samples": (int, Field(20, ge=0, description="Per source and rule, this many dropped documents (a "
                                "deterministic sample: the lowest keyed hashes of their ids) go to "
                                "data/clean/<source>/dropped/<rule>.jsonl.")),
    "max_bad_fraction": (float, Field(0.01, ge=0, le=1, description="Fail the stage when unreadable records "
                                      "(malformed JSON, missing field) exceed this fraction of a source's records. "
                                      "Below it they are counted and sampled in stats.json.")),
    "part_mb": (float, Field(4.0, gt=0, description="Raw files are grouped into parts of about this many MB; a part "
                             "is the unit of parallel work and of resume.")),
}
STAGE_WIDE = tuple(_STAGE)
for _e in rules.RULES:
    if _e.key in _STAGE:  # a plug-in's (rules.py refuses one named as a built-in rule)
        raise PluginError(f"plug-in rule {_e.key!r} (from {_e.origin}): the clean section already has {_e.key!r} "
                          "(a stage-wide setting); the plug-in must take another name")


class _Rules(_Section):
    STAGE_WIDE: ClassVar[tuple[str, ...]] = STAGE_WIDE  # what a source's own `clean:` may not set (core/config.py)

    @classmethod
    def known_keys(cls) -> str:
        """Every key the section knows, for the line about one it does not (core/config.py)."""
        return f"{plugins.known('rules', rules.BUILTIN)}; stage-wide: {', '.join(STAGE_WIDE)}"


def _check(self):
    if self.min_chars is not None and self.max_chars is not None and self.min_chars > self.max_chars:
        raise ValueError(f"min_chars: {self.min_chars} must be <= max_chars ({self.max_chars})")
    return self


Clean = create_model(
    "Clean", __base__=_Rules, __module__=__name__,  # picklable by name: parts carry it to worker processes
    __doc__=f"Rules run in this fixed order: {', '.join(e.key for e in rules.RULES)}; then, over the whole "
            "corpus, exact dedup and near_dedup. Set a rule to null (or false) to switch it off; `{}` switches a "
            "rule set on with its defaults. A source's `clean:` replaces any rule for itself.",
    __validators__={"_check": model_validator(mode="after")(_check)},
    **{e.key: (e.setting, e.field) for e in rules.RULES}, **_STAGE)
