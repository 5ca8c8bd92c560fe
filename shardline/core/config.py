"""params.yaml -> typed, frozen config objects.

Contract: a params file is read into a `Params` or a `ConfigError` listing *every* problem at once,
each as `<dotted.path>: <what is wrong>` (unknown keys get a did-you-mean). The engine only ever
sees these frozen objects, never raw dicts. One model per params section (in sections_data.py,
sections_run.py, sections_model.py and sections_watch.py, re-exported here); the docstring under each field is its
documentation. The clean section is its rules' settings, assembled beside the rules
(shardline.data.clean.stage.settings), above this floor, which imports nothing above it: `Params` is
completed with it by `complete(Clean)`, and the loader that does so, `shardline.paramsfile`
(`load`, `parse`, `schema`), sits above both. Here: `read(path)`, a params file's YAML with its
errors as ConfigError, and `parse(schema, raw, origin)`, the validation with every problem named.
"""

from __future__ import annotations

import difflib
import math
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from shardline.core.errors import ConfigError
from shardline.core.filenames import HF_TOKENIZER, PARAMS
from shardline.core.sections_data import Download, Eval, Shard, Source, Tokenizer, _Section  # noqa: F401
from shardline.core.sections_model import Model  # noqa: F401
from shardline.core.sections_run import Loader, Parts, Pipeline, Retrain, Store, Train  # noqa: F401
from shardline.core.sections_watch import Log, Profile  # noqa: F401
from shardline.core import inert, sections_search, yamlfile
from shardline.core.sections_search import MixSearch


_CLEAN: list[type[_Section]] = []  # the clean section's model, once `complete` is given it


def complete(clean: type[_Section]) -> type[Params]:
    """`Params`, complete: with `clean`, the clean section's model its rule registry assembles
    (shardline.data.clean.stage.settings, given by shardline.paramsfile.schema, above this floor).
    The section names the settings that cannot differ per source (`STAGE_WIDE`)."""
    _CLEAN[:] = [clean]
    Params.model_rebuild(_types_namespace={"Clean": clean})
    return Params


Clean: type[_Section]  # a name only: `Params.clean`'s type, resolved by complete()


class Params(_Section):
    sources: tuple[Source, ...]
    """Where the raw text comes from; one entry per source."""
    download: Download = Download()
    """Retries and timeouts of remote sources (download stage)."""
    clean: Clean = Field(default_factory=lambda: _CLEAN[0]())
    """Cleaning rules, in their fixed order (clean stage)."""
    tokenizer: Tokenizer = Tokenizer()
    """Tokenizer training and encoding (tokenize stage)."""
    shard: Shard = Shard()
    """Block length and shard size (shard stage)."""
    eval: Eval = Eval()
    """The held-out split per source (clean stage) and evaluation during training (train stage)."""
    pipeline: Pipeline = Pipeline()
    """Prefect retries and timeouts."""
    parts: Parts = Parts()
    """Where the parted stages' per-part work runs: threads, processes, a Dask or a Ray cluster."""
    retrain: Retrain = Retrain()
    """The scheduled retraining deployment: when, and what to do after new data trained."""
    store: Store = Store()
    """Retries and timeouts of object stores: streamed shards, push-shards, parts.store."""
    loader: Loader = Loader()
    """The streaming loader: shuffle seed, batch geometry, workers, verification."""
    mix: dict[str, float] | None = None
    """Sampling weight per source at load time (normalised; every source needs one). Changing
    it needs no re-shard. Exact: every prefix of n blocks holds w_s*n blocks of s, within 1."""
    model: Model = Model()
    """The GPT: layers, heads, width, dropout (vocab comes from the tokenizer)."""
    train: Train = Train()
    """The training loop, checkpoints and their retention."""
    log: Log = Log()
    """The trackers a run also reports to (TensorBoard, W&B, MLflow); none by default."""
    mix_search: MixSearch = MixSearch()
    """`shardline mix-search`: proxy runs over mixes, a fitted law per source, a recommended mix."""

    @field_validator("sources")
    @classmethod
    def _some_sources(cls, v: tuple) -> tuple:
        if not v:
            raise ValueError("must list at least one source")
        return v

    @model_validator(mode="after")
    def _check(self) -> "Params":
        names = [s.name for s in self.sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        problems = [f"sources: duplicate name {d!r}" for d in dupes]
        if self.mix is not None:
            problems += [f"mix: missing source {n!r}; give every source a weight" for n in names if n not in self.mix]
        for k, w in (self.mix or {}).items():
            if k not in names:
                problems.append(f"mix.{k}: unknown source{_did_you_mean(k, names)}")
            elif not (math.isfinite(w) and w > 0):  # inf would pass > 0, and NaN-normalise every weight
                problems.append(f"mix.{k}: must be a finite number > 0, got {w}")
        for i, source in enumerate(self.sources):
            problems += self._source_clean_problems(i, source)
        if self.train.init_from and self.tokenizer.path:
            problems.append("tokenizer.path: train.init_from brings its model's own tokenizer.json, which becomes the "
                            "line's; remove tokenizer.path (or train.init_from)")
        problems += self.tokenizer.problems(self.tokenizer_given)
        problems += sections_search.problems(self)
        problems += inert.problems(self)  # settings that would have no effect
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _source_clean_problems(self, i: int, source: Source) -> list[str]:
        where = f"sources[{i}].clean"
        shared = [k for k in (source.clean or {}) if k in type(self.clean).STAGE_WIDE]
        if shared:
            return [f"{where}.{k}: stage-wide; set it in the clean section" for k in shared]
        try:
            self.clean_for(source)
        except ValidationError as e:
            return [ln.replace("clean", where, 1) for err in e.errors()
                    for ln in _format({**err, "loc": ("clean", *err["loc"])}).split("\n")]
        return []

    @property
    def tokenizer_given(self) -> str | None:
        """The tokenizer.json the line uses instead of training one: tokenizer.path, or the one
        in train.init_from's model directory (relative paths are the project root's)."""
        if self.train.init_from:
            return str(Path(self.train.init_from) / HF_TOKENIZER)
        return self.tokenizer.path

    def clean_for(self, source: Source) -> _Section:
        """The clean section as it applies to one source: its own `clean:` rules replace the section's."""
        if not source.clean:
            return self.clean
        return type(self.clean).model_validate({**self.clean.model_dump(), **source.clean})

    def section(self, name: str) -> Any:
        """A section as plain JSON-able data (for hashing and lineage)."""
        v = getattr(self, name)
        if isinstance(v, tuple):
            return [x.model_dump(mode="json") for x in v]
        return v.model_dump(mode="json") if isinstance(v, BaseModel) else v


# Sections that were renamed: an old params.yaml is told the new name instead of "unknown key".
RENAMED = {"engine": "parts"}


def _did_you_mean(key: str, options) -> str:
    close = difflib.get_close_matches(key, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _inner(ann) -> list[tuple[Any, bool]]:
    """What a field's annotation holds, and whether a key of a mapping comes before it in a path."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is dict:
        return [(args[-1], True)]
    if origin in (list, tuple):
        return [(a, False) for a in args if a is not Ellipsis]
    if origin in (typing.Union, types.UnionType):
        return [x for a in args for x in _inner(a)]
    return [(ann, False)]


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The model class that owns the container at `loc` (for did-you-mean on unknown keys)."""
    model: Any = Params
    keyed = False  # the field before was a mapping of sections (mix_search.bounds): this part is its key
    for part in loc:
        if isinstance(part, int) or keyed:
            keyed = False
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        nxt = next(((m, k) for m, k in _inner(field.annotation) if isinstance(m, type) and issubclass(m, BaseModel)),
                   None)
        if nxt is None:
            return None
        model, keyed = nxt
    return model


def _format(err: dict) -> str:
    loc = tuple(err["loc"])
    path = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")
    kind, ctx, got = err["type"], err.get("ctx", {}), err.get("input")
    if kind == "extra_forbidden" and len(loc) == 1 and loc[0] in RENAMED:
        return f"{path}: this section is now called {RENAMED[path]!r} (same keys); rename it in the params file"
    if kind == "extra_forbidden":
        owner = _model_at(loc[:-1])
        hint = _did_you_mean(str(loc[-1]), owner.model_fields) if owner else ""
        known = getattr(owner, "known_keys", None)  # a section whose keys plug-ins add (clean) names them all
        return f"{path}: unknown key{hint}" + (f"; {known()}" if known else "")
    if kind == "missing":
        return f"{path}: required"
    ops = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in ops:
        bound = next(iter(ctx.values()))
        return f"{path}: must be {ops[kind]} {bound}, got {got!r}"
    if kind == "literal_error":
        return f"{path}: must be one of {ctx.get('expected')}, got {got!r}"
    if kind == "value_error":
        msg = str(ctx.get("error", err["msg"]))
        # model validators name their own fields ("sha256: ..."); field validators do not.
        named = (re.match(r"[\w\[\].]+: ", m) for m in msg.split("\n"))
        return "\n".join(m if not path else f"{path}.{m}" if hit else f"{path}: {m}"
                          for m, hit in zip(msg.split("\n"), named))
    return f"{path}: {err['msg'].lower()}, got {got!r}"


def parse(schema: type[Params], raw: Any, origin: str = PARAMS) -> Params:
    """`raw` (params.yaml's mapping) validated by `schema` (complete(Clean)), or one ConfigError
    naming every problem."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: must be a mapping of sections, got {type(raw).__name__}")
    try:
        return schema.model_validate(raw)
    except ValidationError as e:
        lines = [ln for err in e.errors() for ln in _format(err).split("\n")]
        raise ConfigError(f"{origin}: {len(lines)} problem(s):\n  " + "\n  ".join(lines)) from None


def read(path: str | Path = PARAMS) -> Any:
    """The params file's YAML, parsed (not validated); a file missing, not UTF-8 or not YAML is a ConfigError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found; run from the project root or pass --params") from None
    except UnicodeDecodeError as e:
        line = path.read_bytes()[:e.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line}: not UTF-8 (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                          "save the file as UTF-8") from None
    try:
        return yamlfile.load(text, str(path))  # a key given twice refused (PyYAML keeps the last)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
