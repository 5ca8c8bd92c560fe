"""The clean stage's rules in their one order: every other listing (the clean section's fields,
the rules a part runs, the checks stats.json counts, the rules_order it records) derives from it.

Contract: `RULES` orders the entries (`verdict.RuleEntry`) each rule module declares next to its code
and its setting. `build(cfg, index)` makes the enabled text rules of a clean section `cfg`
(`settings.Clean`) in that order; `names(cfg)` lists every check they can drop or change a
document by, in that order (a rule set has several); `apply` runs a document through them. An
entry without `make` (the URL blocklist) is judged by the stage on the record's URL, so it has no
rule here, only its check. Rules hold no state and are picklable (they run in worker processes).
Exact and near dedup are not here: they need every earlier document, so phase 2 (select.py) owns
them.
"""

from __future__ import annotations

from typing import Any

from shardline.data.clean import basic, c4, decontam, fineweb, gopher, language, pii, urls
from shardline.data.clean.verdict import Drop, RuleEntry, Rule

RULES: tuple[RuleEntry, ...] = (
    urls.URL_BLOCKLIST,  # the record's URL, judged before the text is read
    basic.NORMALIZE, basic.STRIP_CONTROL, basic.WHITESPACE,  # transforms first: filters judge the text kept
    basic.MIN_CHARS, basic.MAX_CHARS, basic.MAX_LINE_CHARS, basic.MAX_REPEATED_LINE_FRACTION,
    basic.MIN_ALPHA_FRACTION, basic.MAX_REPLACEMENT_FRACTION,
    language.LANGUAGE,
    gopher.GOPHER_REPETITION, gopher.GOPHER_QUALITY, c4.C4_QUALITY, fineweb.FINEWEB,  # FineWeb's order
    decontam.DECONTAMINATE,
    pii.PII,  # the last transform: as in FineWeb, PII goes after every filter
)
REFERENCED = tuple(e.key for e in RULES if e.reference)  # their parts' keys name the reference they follow


def _made(entry: RuleEntry, cfg: Any, index: str | None) -> Rule | None:
    return entry.make(getattr(cfg, entry.key), index) if entry.make is not None else None


def build(cfg: Any, index: str | None = None) -> list[Rule]:
    """The enabled text rules, in order; `index`: the decontamination index's path (the clean
    stage builds it from cfg.decontaminate's evaluation sets)."""
    return [r for e in RULES if (r := _made(e, cfg, index)) is not None]


def names(cfg: Any) -> list[str]:
    """Every check the rules can drop or change a document by, in order (a rule set has several)."""
    out: list[str] = []
    for e in RULES:
        if e.make is None:
            out += [e.key] if getattr(cfg, e.key) else []
        elif (rule := _made(e, cfg, "index")) is not None:
            out += getattr(rule, "checks", (rule.name,))  # type: ignore[attr-defined]
    return out


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def apply(rules: list[Rule], text: str, counts: dict[str, list[int]], notes: dict | None = None,
          size: int | None = None) -> "str | Drop":
    """Run `text` through `rules`: the text kept, or the first Drop. Tallies [docs_dropped,
    bytes_removed] in `counts` per check (a drop) or rule (a transform); what a rule found (the
    language) goes to `notes`. `size`: the text's UTF-8 length, when the caller has it."""
    size = len(text.encode()) if size is None else size
    for rule in rules:
        out = rule(text)
        if isinstance(out, Drop):
            out = out._replace(value=_plain(out.value), limit=_plain(out.limit))  # numpy counts -> JSON-able
            c = counts.setdefault(out.rule, [0, 0])
            c[0] += 1
            c[1] += size
            return out
        if isinstance(out, tuple):  # language.Found: the text and what was measured
            if notes is not None:
                notes.update(out._asdict())
            out = out.text
        if out is not text:
            new = len(out.encode())
            c = counts.setdefault(rule.name, [0, 0])  # type: ignore[attr-defined]
            c[1] += size - new
            text, size = out, new
    return text
