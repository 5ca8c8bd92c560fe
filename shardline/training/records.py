"""The typed, versioned records of a checkpoint: its manifest and its lineage.

Contract:
- `Manifest` is a checkpoint's manifest.json (checkpoint.save and bucket.save write it last);
  `Lineage` is what the checkpoint was trained on (shardline.training.lineage.collect builds it;
  the manifest holds it; a Hugging Face export holds it alone as lineage.json). Every reader
  parses through `from_json(obj, where)`, every writer writes `to_json()`: no other module
  indexes their JSON.
- `to_json()` is the JSON the writers have always written, key for key, in their order; written
  with sort_keys (as every writer does), a record read from a file gives back its bytes, so
  existing checkpoints verify and a re-export writes the same lineage.json. Fields an older writer
  left out (all version 1) read as their defaults and stay out when written back (`absent`).
- Versions: the manifest's `format_version` (MANIFEST_VERSION: its fields and the files it lists)
  and the lineage's own (LINEAGE_VERSION: it travels alone in exports). No field: 1. Any other is
  BadInput, one line naming the version found, the release that wrote it and the version this one
  reads, before any field is read: a newer release's checkpoint is never misread or removed.
- A field missing, of the wrong type, or not in this version: BadInput naming the file, the
  field's dotted path and what to do; never a KeyError or TypeError traceback.

How a record reads and writes its JSON: recordtype.py. Design: docs/architecture.md (Data
contracts: Checkpoints, Lineage).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from shardline.core.filenames import MANIFEST
from shardline.training.recordtype import NULL, _Bad, _check, _read, _Record, _show, _version

MANIFEST_VERSION = 1  # of the manifest and the files it lists; bump on any change to either
# The lineage's version 1 was written as no field (readers take absence as 1). Version 2 adds
# `heldout`, each source's held-out fingerprint, and is written: a release that reads only 1 then
# names the version instead of calling the field unknown. Version 3 adds `clean_rule_code`, the
# code that decided each rule (`shardline diff` names a rule whose code changed). This release
# reads 1 to 3.
LINEAGE_VERSION = 4  # 4: vocab_size and plugins

@dataclass(frozen=True)
class FileMeta(_Record):  # a listed file, as verify checks it
    bytes: int
    sha256: str
    SPEC: ClassVar = (("bytes", int), ("sha256", str))


@dataclass(frozen=True)
class DataVersion(_Record):
    """The shards' content hash the loader verified, DVC's md5 of data/shards (None: no dvc.lock
    then) and the tokenizer's sha256 (None: none recorded)."""

    shards_sha256: str
    dvc_md5: str | None
    tokenizer_sha256: str | None
    SPEC: ClassVar = (("shards_sha256", str), ("dvc_md5", (str, NULL)), ("tokenizer_sha256", (str, NULL)))


@dataclass(frozen=True)
class SpecialIds(_Record):  # the document boundaries attention reads, as ids (None: the tokenizer has none)
    eos: int | None = None
    bos: int | None = None
    SPEC: ClassVar = (("eos", (int, NULL)), ("bos", (int, NULL)))


@dataclass(frozen=True)
class Code(_Record):  # the git commit checked out, and whether code differed from it (None: no git)
    commit: str | None
    dirty: bool | None
    SPEC: ClassVar = (("commit", (str, NULL)), ("dirty", (bool, NULL)))


@dataclass(frozen=True)
class Run(_Record):
    prefect_flow_run_id: str | None  # the orchestrator's run
    SPEC: ClassVar = (("prefect_flow_run_id", (str, NULL)),)


@dataclass(frozen=True)
class RawFile(_Record):
    path: str
    sha256: str
    SPEC: ClassVar = (("path", str), ("sha256", str))


def _uri(value: Any, at: str) -> str | tuple[str, ...] | None:
    """A source's uri as params.yaml gives it: one location, several, or none (a Hub dataset source)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise _Bad(at, f"must be a string, a list of strings or null, got {_show(value)}")


@dataclass(frozen=True)
class RawSource(_Record):
    """A source and its raw files (None: no download manifest when it trained); `dataset`, for a
    source read through `datasets` (sources[].dataset), what was asked and the commit (or, for a
    local folder, the content hash) it resolved to. Absent for every other source."""

    name: str
    uri: str | tuple[str, ...] | None
    files: tuple[RawFile, ...] | None
    dataset: dict | None = None
    SPEC: ClassVar = (("name", str), ("uri", _uri), ("files", ([RawFile], NULL)), ("dataset", (dict, NULL), None))


@dataclass(frozen=True)
class Init(_Record):
    """train.init_from: the model directory, its architecture, each weight file's sha256 and (eval
    on) its held-out eval before training."""

    source: str  # JSON "from"
    architecture: str
    weights_sha256: Mapping[str, str]
    eval: dict | None = None
    SPEC: ClassVar = (("from", str), ("architecture", str), ("weights_sha256", {str}), ("eval", (dict, NULL), None))
    ATTR: ClassVar = {"from": "source"}


def _sections(value: Any, at: str) -> dict:
    """The params sections, by value (their schema is the config's); the five every reader indexes."""
    for name in ("model", "train", "loader", "shard", "tokenizer"):
        _check(_check(value, dict, at).get(name), dict, f"{at}.{name}")
    return value


@dataclass(frozen=True)
class Lineage(_Record):
    """What a checkpoint was trained on (shardline.training.lineage says what each field holds).
    `continued_from` (resume's), `rollbacks` (the guard's ledger) and every `eval`
    (shardline.training.evaluate's) stay the JSON of the module that writes and reads them."""

    data_version: DataVersion
    special_ids: SpecialIds
    clean_rules: dict
    clean_rule_inputs: dict | None
    source_clean_rules: dict
    mix: dict | None
    sources: tuple[RawSource, ...]
    params: dict
    code: Code
    run: Run
    parent: str | None
    data_change: tuple[str, ...]
    continued_from: dict | None
    rollbacks: tuple[dict, ...]
    init: Init | None
    # each source's held-out set as the clean stage split it (its data/clean/split.json): the sha256
    # of its documents' content digests in order; None: a version-1 lineage, or no split on record
    heldout: Mapping[str, str] | None = None
    # per source, each rule it ran and the code that decided it (stats.json's rule_code); None: before version 3
    clean_rule_code: Mapping[str, Mapping[str, str]] | None = None
    # the network's vocabulary as built (what a plug-in architecture is rebuilt with; gpt2's and llama's
    # is read from their head's tensor); None: before it was recorded
    vocab_size: int | None = None
    # per kind, each plug-in the run used and the distribution and release it came from ({"architectures":
    # {"token_mlp": "shardline-token-mlp 0.1.0"}}; a rule's is in clean_rule_code); None: none used
    plugins: Mapping[str, Mapping[str, str]] | None = None
    format_version: int = LINEAGE_VERSION
    SPEC: ClassVar = (
        ("format_version", int, 1), ("data_version", DataVersion), ("special_ids", SpecialIds, SpecialIds),
        ("clean_rules", dict), ("clean_rule_inputs", (dict, NULL), None), ("source_clean_rules", dict, dict),
        ("mix", ({float}, NULL)), ("sources", [RawSource]), ("params", _sections), ("code", Code), ("run", Run),
        ("parent", (str, NULL)), ("data_change", [str]), ("continued_from", (dict, NULL), None),
        ("rollbacks", [dict], ()), ("init", (Init, NULL), None), ("heldout", ({str}, NULL), None),
        ("clean_rule_code", ({dict}, NULL), None), ("vocab_size", (int, NULL), None), ("plugins", ({dict}, NULL), None))

    @classmethod
    def from_json(cls, obj: Any, where: str, wrote: str | None = None) -> "Lineage":
        """The lineage file `where` holds (an export's lineage.json); `wrote`: the release that wrote it."""
        return _read(obj, cls, LINEAGE_VERSION, where, wrote,
                     "export its checkpoint again ('shardline export CKPT OUT --force')", "read it with that release")

    def after(self, checkpoint: str) -> "Lineage":
        """The lineage the run's next checkpoint records, once `checkpoint` is saved."""
        return dataclasses.replace(self, parent=checkpoint, data_change=())


def _format(value: Any, at: str) -> str:
    if value not in ("full", "sharded"):
        raise _Bad(at, f"must be 'full' or 'sharded', got {_show(value)}")
    return value


@dataclass(frozen=True)
class Manifest(_Record):
    """A checkpoint's manifest (shardline.training.checkpoint's contract): its step, its format
    ("full", or "sharded" with each rank's files in `ranks`), every file's bytes and sha256, the
    lineage, the held-out eval at this step (None: eval off), the library versions that wrote it."""

    step: int
    format: str
    files: Mapping[str, FileMeta]
    lineage: Lineage
    eval: dict | None
    versions: Mapping[str, str]
    created: float
    ranks: tuple[tuple[str, ...], ...] | None = None
    format_version: int = MANIFEST_VERSION
    SPEC: ClassVar = (
        ("format_version", int, 1), ("step", int), ("format", _format, "full"), ("files", {FileMeta}),
        ("lineage", Lineage), ("eval", (dict, NULL), None), ("versions", {str}), ("created", float),
        ("ranks", [[str]], None))

    @classmethod
    def new(cls, step: int, files: Mapping[str, dict], lineage: Lineage, eval: dict | None, shards: list | None,
            versions: Mapping[str, str], created: float) -> "Manifest":
        """What a save writes last: `files` {name: {bytes, sha256}}; `shards` (a sharded save) each
        rank's {file: meta}, in rank order (a full one has no "ranks")."""
        return cls(step, "full" if shards is None else "sharded",
                   {name: FileMeta(meta["bytes"], meta["sha256"]) for name, meta in files.items()}, lineage, eval,
                   versions, created, None if shards is None else tuple(tuple(sorted(m)) for m in shards),
                   absent=frozenset() if shards is not None else frozenset({"ranks"}))

    @classmethod
    def from_json(cls, obj: Any, where: str) -> "Manifest":
        """The manifest of checkpoint `where` (a folder, or a store's URL)."""
        parent, _, name = str(where).rstrip("/").rpartition("/")
        wrote = (obj.get("versions") if isinstance(obj, dict) else None) or {}
        return _read(obj, cls, MANIFEST_VERSION, f"{parent}/{name}/{MANIFEST}",
                     wrote.get("shardline", "unknown") if isinstance(wrote, dict) else "unknown",
                     f"restore it from a copy, or move {name} out of {parent} to resume from an older checkpoint",
                     f"use that release for it, or move {name} out of {parent} to resume from an older checkpoint")

    @classmethod
    def parse(cls, obj: dict, prefix: str = ""):
        lineage = obj.get("lineage")
        if isinstance(lineage, dict):  # the lineage's version before its fields, as the manifest's
            _version(lineage, "lineage.", LINEAGE_VERSION)
        return super().parse(obj, prefix)
