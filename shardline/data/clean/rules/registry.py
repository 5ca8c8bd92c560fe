"""The clean stage's rules in their one order, and the one place a document meets them: every
other listing (the clean section's fields, the rules a part runs, the checks stats.json counts,
the rules_order it records) derives from `RULES`, and every decision (the clean stage's, and
`shardline explain`'s about one document) is `apply`'s.

Contract: `RULES` orders the entries (`verdict.RuleEntry`) each rule module declares next to its
code and its setting, and those other distributions add through their "shardline.rules" entry
points (shardline.core.plugins): theirs run after FineWeb's sets and before decontaminate and pii,
in the order of their names; one that is no RuleEntry of its own name, or takes a name the clean
section has, stops the loading with one line naming it. A plug-in that cannot be imported blocks
only a run that switches it on: its key stays in the clean section, and setting it is that one
line. A plug-in's rule is named by its key where it has no `name` of its own. `build(cfg, files)` makes the enabled
rules of a clean section `cfg` (`settings.Clean`) in that order (`files`: an `inputs.Inputs`, the
files they read: the URL blocklist, the decontamination index; without it the rules that need one
are left out); `names(cfg)` lists every check they can drop or change a document by, in that order
(a rule set has several); `apply` runs a `Document` through them. Rules hold no state and are
picklable (they run in worker processes). Exact and near dedup are not here: they need every
earlier document, so phase 2 (select.py) owns them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple

from pydantic import AfterValidator, Field

from shardline.core import plugins
from shardline.data.clean.rules import basic, c4, decontam, fineweb, gopher, language, pii, urls
from shardline.data.clean.verdict import Drop, RuleEntry, Rule
from shardline.data.document import Document

FILTERS: tuple[RuleEntry, ...] = (
    urls.URL_BLOCKLIST,  # the document's URL, judged before its text is read
    basic.NORMALIZE, basic.STRIP_CONTROL, basic.WHITESPACE,  # transforms first: filters judge the text kept
    basic.MIN_CHARS, basic.MAX_CHARS, basic.MAX_LINE_CHARS, basic.MAX_REPEATED_LINE_FRACTION,
    basic.MIN_ALPHA_FRACTION, basic.MAX_REPLACEMENT_FRACTION,
    language.LANGUAGE,
    gopher.GOPHER_REPETITION, gopher.GOPHER_QUALITY, c4.C4_QUALITY, fineweb.FINEWEB,  # FineWeb's order
)
LAST: tuple[RuleEntry, ...] = (
    decontam.DECONTAMINATE,  # after every filter: no index lookup for a document they drop
    pii.PII,  # the last transform: as in FineWeb, PII goes after every filter
)
BUILTIN = tuple(e.key for e in (*FILTERS, *LAST))


@dataclass(frozen=True)
class _Plugged:
    """A plug-in's rule under its key: the name stats.json counts its transforms by (the guide's
    rules need not carry one)."""

    rule: Rule
    name: str

    @property
    def checks(self) -> tuple[str, ...]:
        return getattr(self.rule, "checks", (self.name,))

    def __call__(self, doc: Document) -> "str | Drop":
        return self.rule(doc)


def _broken(error: str):
    def refuse(value):
        raise ValueError(error)  # the field's line: only a params.yaml that switches the rule on reads it
    return refuse


def _plugged(taken: set[str]) -> tuple[RuleEntry, ...]:
    """The rules other distributions add, each marked with the release it came from."""
    out = []
    for name in plugins.names("rules"):
        try:
            entry = plugins.load("rules", name)
        except plugins.PluginError as e:  # blocks only a run that sets it: the key is kept, refusing any value
            out.append(RuleEntry(name, Annotated[Any, AfterValidator(_broken(str(e)))],
                                 Field(None, description=str(e)), lambda value, files: None,
                                 origin=plugins.origin("rules", name)))
            continue
        where = plugins.where("rules", name)
        if not isinstance(entry, RuleEntry) or entry.key != name:
            got = f"one keyed {entry.key!r}" if isinstance(entry, RuleEntry) else plugins.kind_of(entry)
            raise plugins.PluginError(f"{where}: its entry point must name a RuleEntry keyed {name!r}, not {got}")
        if name in taken:
            raise plugins.PluginError(f"{where}: the clean section already has {name!r}; the plug-in must "
                                      "take another name")
        make = entry.make
        out.append(dataclasses.replace(entry, origin=plugins.origin("rules", name),
                                       make=lambda value, files, make=make, name=name: _named(make(value, files), name)))
    return tuple(out)


def _named(rule: "Rule | None", name: str) -> "Rule | None":
    return None if rule is None else _Plugged(rule, name)


RULES: tuple[RuleEntry, ...] = (*FILTERS, *_plugged(set(BUILTIN)), *LAST)  # settings.py: none is stage-wide
REFERENCED = tuple(e.key for e in RULES if e.reference)  # their parts' keys name the reference they follow


class _Named(NamedTuple):  # files named, never read: names() makes each rule to ask its checks
    blocklist: tuple[str, str] = ("-", "-")
    index: str = "-"


def build(cfg: Any, files: Any = None) -> list[Rule]:
    """The enabled rules, in order; `files`: an `inputs.Inputs` (the clean stage builds the
    decontamination index it names from cfg.decontaminate's evaluation sets)."""
    return [r for e in RULES if (r := e.make(getattr(cfg, e.key), files)) is not None]


def names(cfg: Any) -> list[str]:
    """Every check the rules can drop or change a document by, in order (a rule set has several)."""
    return [check for rule in build(cfg, _Named())
            for check in getattr(rule, "checks", (rule.name,))]  # type: ignore[attr-defined]


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def apply(rules: list[Rule], doc: Document | str, counts: dict[str, list[int]],
          size: int | None = None) -> "str | Drop":
    """Run `doc` through `rules`: the text kept, or the first Drop. Tallies [docs_dropped,
    bytes_removed] in `counts` per check (a drop) or rule (a transform); a transform's text
    replaces the document's, and what a rule found (the language) is in its metadata. `size`: the
    text's UTF-8 length, when the caller has it. A bare text is judged as a document without id,
    URL or metadata."""
    if isinstance(doc, str):
        doc = Document(doc)
    text = doc.text
    size = len(text.encode()) if size is None else size
    for rule in rules:
        out = rule(doc)
        if out is text:
            continue
        if isinstance(out, Drop):
            out = out._replace(value=_plain(out.value), limit=_plain(out.limit))  # numpy counts -> JSON-able
            c = counts.setdefault(out.rule, [0, 0])
            c[0] += 1
            c[1] += size
            return out
        new = len(out.encode())
        c = counts.setdefault(rule.name, [0, 0])  # type: ignore[attr-defined]
        c[1] += size - new
        doc.text = text = out
        size = new
    return text
