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

Design: docs/architecture.md (Data contracts: Checkpoints, Lineage).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from shardline import __version__
from shardline.core.errors import BadInput
from shardline.core.layout import MANIFEST

MANIFEST_VERSION = 1  # of the manifest and the files it lists; bump on any change to either
# The lineage's version 1 was written as no field (readers take absence as 1). Version 2 adds
# `heldout`, each source's held-out fingerprint, and is written: a release that reads only 1 then
# names the version instead of calling the field unknown. Version 3 adds `clean_rule_code`, the
# code that decided each rule (`shardline diff` names a rule whose code changed). This release
# reads 1 to 3.
LINEAGE_VERSION = 4  # 4: vocab_size and plugins

NULL = type(None)
_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "an object",
          list: "a list", NULL: "null"}


class _Bad(Exception):  # a field's problem, raised where it is found; file and remedy are added at the top
    def __init__(self, at: str, problem: str):
        self.at, self.problem = at, problem


def _show(value: Any) -> str:
    s = repr(value)
    return s if len(s) <= 40 else s[:37] + "..."


def _check(value: Any, kind: Any, at: str) -> Any:
    """`value` as `kind` reads it: a JSON type (float takes an int, no number takes a bool), a tuple
    of them, (kind, NULL), a record class, [kind] (a list, read as a tuple), {kind} (an object of
    those), or a function (value, at) -> value."""
    if type(value) is kind:  # the common case, first: a string, an integer (a bool is not one), an object
        return value
    if isinstance(kind, tuple) and len(kind) == 2 and kind[1] is NULL and not (
            isinstance(kind[0], type) and kind[0] in _NAMES):  # (a composite kind, NULL)
        return None if value is None else _check(value, kind[0], at)
    if isinstance(kind, list):
        return tuple(_check(v, kind[0], f"{at}[{i}]") for i, v in enumerate(_check(value, list, at)))
    if isinstance(kind, set):
        return {k: _check(v, next(iter(kind)), f'{at}["{k}"]') for k, v in _check(value, dict, at).items()}
    if isinstance(kind, type) and issubclass(kind, _Record):
        return kind.parse(_check(value, dict, at), f"{at}.")
    if not isinstance(kind, (type, tuple)):
        return kind(value, at)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if any(isinstance(value, k) and not (isinstance(value, bool) and k in (int, float)) for k in kinds) \
            or float in kinds and isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _Bad(at, f"must be {' or '.join(_NAMES[k] for k in kinds)}, got {_show(value)}")


def _plain(value: Any) -> Any:
    """A field's value as JSON: a record by its to_json, a tuple as a list."""
    if isinstance(value, _Record):
        return value.to_json()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _absent(*keys: str):
    """Which keys the file left out (so they stay out when written back): not part of the value."""
    return field(default=frozenset(keys), compare=False, repr=False, kw_only=True)


@dataclass(frozen=True)
class _Record:
    """A frozen dataclass read from and written as one JSON object. SPEC: its keys in the writer's
    order, each (key, kind) or (key, kind, default): a key with a default may be absent (an older
    writer of the same version left it out). ATTR: a key's attribute, where it is not the key."""

    SPEC: ClassVar[tuple]
    ATTR: ClassVar[dict] = {}
    KEYS: ClassVar[frozenset]
    absent: frozenset = _absent()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.KEYS = frozenset(key for key, *_ in cls.SPEC)

    @classmethod
    def parse(cls, obj: dict, prefix: str = ""):
        if not cls.KEYS.issuperset(obj):
            raise _Bad(prefix + sorted(set(obj) - cls.KEYS)[0], "is not a field of this format")
        values, absent = {}, set()
        for key, kind, *default in cls.SPEC:
            attr = cls.ATTR.get(key, key)
            if key in obj:
                values[attr] = _check(obj[key], kind, prefix + key)
            elif not default:
                raise _Bad(prefix + key, "missing")
            else:
                values[attr] = default[0]() if callable(default[0]) else default[0]
                absent.add(key)
        return cls(**values, absent=frozenset(absent))

    def to_json(self) -> dict:
        return {key: _plain(getattr(self, self.ATTR.get(key, key))) for key, *_ in self.SPEC if key not in self.absent}


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


class _Version(Exception):  # another format_version, as _Bad
    def __init__(self, at: str, found: Any, reads: int):
        self.at, self.found, self.reads = at, found, reads


def _version(obj: dict, prefix: str, reads: int) -> None:
    """Every version from 1 to `reads` is read (a field a version lacks reads as its default)."""
    found = obj.get("format_version", 1)
    if type(found) is not int or not 1 <= found <= reads:
        raise _Version(prefix + "format_version", found, reads)


def _read(obj: Any, cls: type, reads: int, file: str, wrote: str | None, fix: str, fix_version: str = ""):
    """`cls` parsed from `obj` (what `file` holds), or BadInput: its version first, then its fields.
    `fix`: what to do about a bad field; `fix_version`: about another version (default: `fix`)."""
    try:
        if not isinstance(obj, dict):
            raise _Bad("", f"must be a JSON object, got {_show(obj)}")
        _version(obj, "", reads)
        return cls.parse(obj)
    except _Version as v:
        by = f"shardline {wrote}" if wrote else "another shardline release (lineage.json does not say which)"
        what = "format" if v.at == "format_version" else v.at.rpartition(".")[0] + " format"
        reads = v.reads if v.reads == 1 else f"1 to {v.reads}"
        raise BadInput(f"{file}: {v.at} {v.found!r}, but this shardline ({__version__}) reads {what} {reads}; "
                       f"it was written by {by}: {fix_version or fix}") from None
    except _Bad as b:
        raise BadInput(f"{file}: {b.at or 'the file'}: {b.problem}; it is not what shardline {__version__} writes "
                       f"(edited, or written by another tool): {fix}") from None
