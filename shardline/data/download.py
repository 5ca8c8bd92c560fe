"""download stage: materialise every source under data/raw/<source>/files/ plus a manifest.

Contract:
- Each source's files land under `data/raw/<name>/files/<relpath>` (atomic writes), then
  `data/raw/<name>/manifest.json` is written LAST: {source, uri, format, files: [{path, bytes,
  sha256, origin}], bytes}. A source without a manifest is unfinished.
- Resume: a file already present with the right content is not fetched again (HTTP: the
  `.part` file continues with a Range request, see `shardline.data.http`).
- Files and source folders no longer named by params.yaml are removed, so data/raw is exactly
  what the params describe.
- uri forms: local path / glob / directory / file://; http(s)://; an object store URL (s3://,
  gs://, any fsspec protocol: one object, a prefix or a glob; `shardline.data.objects`);
  hf://datasets/<org>/<name>@<revision>/<glob> (the revision resolved to a commit, pinned in the
  manifest as `revision`); builtin://python-stdlib (the interpreter's standard-library .py
  files, tests and pydoc_data excluded) and builtin://pydoc-topics (the reference-manual prose shipped in
  pydoc_data), both located at run time; or a list of these (e.g. many https:// files).
- A source with `dataset:` instead of a uri is a dataset by name, config, split and revision,
  streamed through `datasets` into parquet files (`shardline.data.hfdatasets`, its own contract).
- Each manifest entry holds what identifies the file where it came from: `sha256` always,
  `etag`/`version` for store objects. A store object whose identity changed is fetched again
  (a new data version); one that did not is not fetched again.
"""

from __future__ import annotations

import glob
import json
import os
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlparse

from shardline.core import chaos, fsio, retry, stores
from shardline.data import compressed, hfdatasets, http, objects
from shardline.core.config import Params, Source
from shardline.core.errors import BadInput, ChecksumMismatch
from shardline.core.layout import Layout
from shardline.core.filenames import BUILTIN_TOPICS, PARTIAL, PARTIAL_NOTE, partial_note_of
from shardline.core.parallel import Mapper, per_source, thread_map
from shardline.core.progress import Progress, Sink
from shardline.core.remedies import remedy

Log = Callable[[str], None]
_GLOB_CHARS = set("*?[")
FETCH_THREADS = 8  # store objects fetched at once per source: each waits on the network, not a core


@dataclass(frozen=True)
class Item:
    """One file to materialise: `rel` under files/, fetched from `origin` by `kind`."""

    rel: str
    kind: str  # local | http | object | builtin-topics
    origin: str
    meta: dict = field(default_factory=dict, hash=False)  # a store object's size, etag, version


MANIFEST_FILE = {"path": str, "sha256": str}  # what readers take of each file a manifest lists


def read_manifest(layout: Layout, name: str) -> dict:
    """A source's manifest, checked (a damaged one is one line naming it and the rebuild)."""
    p = layout.manifest(name)
    if not p.exists():
        raise BadInput(f"{layout.rel(p)}: missing; run the download stage first ('dvc repro download')")
    manifest = fsio.read_record(p, remedy(layout, p), keys={"files": list}, shown=layout.rel(p))
    for i, entry in enumerate(manifest["files"]):
        fsio.check_fields(entry, MANIFEST_FILE, layout.rel(p), remedy(layout, p), f"files[{i}]")
    return manifest


def _stdlib_items() -> list[Item]:
    root = Path(sysconfig.get_paths()["stdlib"])
    # pydoc_data/topics.py is builtin://pydoc-topics' prose as one Python literal: in the code source,
    # the prose source's held-out topics would be trained on
    skip_dirs = {"site-packages", "dist-packages", "__pycache__", "idle_test", "pydoc_data"}
    items = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip_dirs and not d.startswith("test"))
        for f in sorted(filenames):
            if f.endswith(".py") and not f.startswith("test_"):
                p = Path(dirpath, f)
                items.append(Item(str(p.relative_to(root)), "local", str(p)))
    return items


def _local_items(source: Source, spec: str, root: Path) -> list[Item]:
    uri = spec
    if spec.startswith("file://"):
        spec = unquote(urlparse(spec).path)
    path = Path(spec) if os.path.isabs(spec) else root / spec
    if any(c in spec for c in _GLOB_CHARS):
        parts = path.parts
        base = Path(*parts[: next(i for i, p in enumerate(parts) if set(p) & _GLOB_CHARS)])
        files = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if os.path.isfile(p))
    elif path.is_dir():
        base = path
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    else:
        base = path.parent
        files = [path] if path.is_file() else []
    if not files:
        raise BadInput(f"sources[{source.name}].uri: {uri!r} matched no files "
                       f"(looked in {path}); fix the path or glob in params.yaml")
    return [Item(str(f.relative_to(base)), "local", str(f)) for f in files]


def resolve(source: Source, root: Path, policy: retry.Policy = retry.Policy()) -> list[Item]:
    """The files a source consists of, in a stable order (none for a dataset source: its records
    are streamed, and the files they make are known only once written)."""
    if source.dataset is not None:
        return []
    if isinstance(source.uri, tuple):
        items = [i for uri in source.uri for i in _resolve_one(source, uri, root, policy)]
        seen: dict[str, str] = {}
        for i in items:
            if seen.setdefault(i.rel, i.origin) != i.origin:
                raise BadInput(f"sources[{source.name}].uri: {seen[i.rel]} and {i.origin} would both be "
                               f"stored as {i.rel!r}; list files whose names differ")
        return items
    return _resolve_one(source, source.uri, root, policy)


def _resolve_one(source: Source, uri: str, root: Path, policy: retry.Policy) -> list[Item]:
    if uri.startswith("builtin://"):
        which = uri[len("builtin://"):]
        expected = {"python-stdlib": "txt", "pydoc-topics": "jsonl"}
        if which not in expected:
            raise BadInput(f"sources[{source.name}].uri: unknown builtin {which!r}; "
                           f"use builtin://python-stdlib or builtin://pydoc-topics")
        if source.format != expected[which]:
            raise BadInput(f"sources[{source.name}].format: {uri} is {expected[which]}, not {source.format}")
        if which == "python-stdlib":
            return _stdlib_items()
        return [Item(BUILTIN_TOPICS, "builtin-topics", "pydoc_data.topics", {"size": len(_topics())})]
    if uri.startswith(("http://", "https://")):
        name = Path(unquote(urlparse(uri).path)).name or "download"
        return [Item(name, "http", uri)]
    if uri.startswith("hf://"):
        commit, folder, files = objects.hub_snapshot(uri[len("hf://"):])
        if not files:
            raise BadInput(f"sources[{source.name}].uri: {uri} matched no files at commit {commit}; fix the glob")
        return [Item(f, "local", str(folder / f), {"revision": commit}) for f in files]
    if "://" in uri and not uri.startswith("file://"):
        stores.check_bucket(uri, f"sources[{source.name}].uri", policy)  # else "matched no objects"
        found = objects.list_objects(uri, policy)
        if not found:
            raise BadInput(f"sources[{source.name}].uri: {uri!r} matched no objects; fix the URL or glob in params.yaml")
        return [Item(o.rel, "object", o.url, o.meta) for o in found]
    return _local_items(source, uri, root)


def _topics() -> bytes:
    """builtin://pydoc-topics as the file it becomes: its size is known before it is written."""
    from pydoc_data import topics  # ships with CPython: the language reference as prose

    lines = [json.dumps({"id": k, "text": v}, ensure_ascii=False) for k, v in sorted(topics.topics.items())]
    return ("\n".join(lines) + "\n").encode()


def _policy(params: Params) -> retry.Policy:
    return retry.of(params.download, "download")


def _materialise(item: Item, dest: Path, source: Source, params: Params, log: Log,
                 old: dict | None) -> tuple[str, dict]:
    """Put `item` at `dest` unless it is already there; return its sha256 and what identifies it
    where it came from (an HTTP ETag)."""
    if item.kind == "http":
        if old and old.get("etag") and dest.exists() and not source.sha256:
            now = http.head_etag(item.origin, params.download.timeout_s)
            if now is not None and now != old["etag"]:  # a new version on the server: a new data version
                log(f"download: {item.origin}: changed on the server (ETag {old['etag']} -> {now}); fetching it again")
                dest.unlink()
        r = http.fetch(item.origin, dest, sha256=source.sha256, policy=_policy(params), log=log)
        etag = r.etag or ((old or {}).get("etag") if r.attempts == 0 else None)
        return r.sha256, {"etag": etag} if etag else {}
    if item.kind == "local":
        if dest.exists() and dest.stat().st_size == os.path.getsize(item.origin):
            have = fsio.sha256_file(dest)
            if have == fsio.sha256_file(item.origin):
                return have, {}
        return fsio.copy_file(item.origin, dest), {}
    if item.kind == "object":
        if old and dest.exists() and dest.stat().st_size == item.meta["size"] == old["bytes"] \
                and ("etag" in item.meta or "version" in item.meta) \
                and all(old.get(k) == v for k, v in item.meta.items() if k != "size"):
            return old["sha256"], {}  # the same object as last run: its etag (or version) in the store says so
        return objects.fetch_object(item.origin, dest, item.meta, _policy(params), log), {}
    fsio.write_bytes(dest, _topics())
    return fsio.sha256_file(dest), {}


def _decoding(source: Source, dest: Path, digest: str, old: dict | None, log: Log, layout: Layout) -> dict:
    """A compressed jsonl/txt file's codec and decoded size: the clean stage parts it by the bytes
    it decodes to. Damage is logged here and counted by the clean stage, which keeps what precedes it."""
    if source.format not in ("jsonl", "txt") or not (which := compressed.codec(dest)):
        return {}
    if old and old.get("sha256") == digest and "decoded_bytes" in old:
        return {"compression": which, "decoded_bytes": old["decoded_bytes"]}
    size, damage = compressed.decoded_size(dest, which)
    if damage:
        log(f"download: {layout.rel(dest)}: {damage}; the clean stage keeps the records before it")
    return {"compression": which, "decoded_bytes": size}


def download_source(source: Source, params: Params, layout: Layout, log: Log = print,
                    progress: Progress | None = None, items: list[Item] | None = None) -> dict:
    """Materialise one source and write its manifest; returns the manifest."""
    sdir = layout.manifest(source.name).parent
    files_dir = layout.raw_files(source.name)
    if sdir.exists():
        fsio.remove_temps(sdir)
    if source.dataset is not None:
        return hfdatasets.download(source, layout, log)
    items = resolve(source, layout.root, _policy(params)) if items is None else items
    if source.sha256 and len(items) != 1:
        raise BadInput(f"sources[{source.name}].sha256: given, but the uri names {len(items)} files; "
                       "a sha256 pins exactly one file")
    try:  # what an earlier run learnt about a file it already had (its decoded size)
        before = {e["path"]: e for e in read_manifest(layout, source.name)["files"]}
    except (BadInput, OSError, ValueError, KeyError, TypeError):
        before = {}
    entries = []
    fresh = {i.rel: not (files_dir / i.rel).exists() for i in items}
    # store objects are latency-bound one by one: fetched on threads first (the loop then records them)
    stored = [i for i in items if i.kind == "object"]
    fetched = dict(zip((i.rel for i in stored), thread_map(
        lambda i: _materialise(i, files_dir / i.rel, source, params, log, before.get(i.rel)), stored,
        workers=FETCH_THREADS))) if len(stored) > 1 else {}
    for item in items:
        dest = files_dir / item.rel
        digest, seen = fetched.get(item.rel) or _materialise(item, dest, source, params, log, before.get(item.rel))
        if source.sha256 and digest != source.sha256:
            dest.unlink()
            raise ChecksumMismatch(f"{layout.rel(dest)}: sha256 mismatch for {item.origin}: expected "
                                   f"{source.sha256}, got {digest}; fix sources[{source.name}].sha256")
        if fresh[item.rel]:
            chaos.done("download", f"{source.name}/{item.rel}")
            chaos.point("download.file")
        entries.append({"path": item.rel, "bytes": dest.stat().st_size, "sha256": digest, "origin": item.origin,
                        **{k: v for k, v in item.meta.items() if k != "size"}, **seen,
                        **_decoding(source, dest, digest, before.get(item.rel), log, layout)})
        if progress is not None:
            progress.advance(entries[-1]["bytes"], skipped=not fresh[item.rel])
    fsio.prune(files_dir, {files_dir / e["path"] for e in entries} | set(files_dir.rglob(f"*{PARTIAL}"))
               | set(files_dir.rglob(f"*{PARTIAL_NOTE}")))
    revisions = sorted({e["revision"] for e in entries if "revision" in e})  # each file keeps its own too
    uri = list(source.uri) if isinstance(source.uri, tuple) else source.uri  # as JSON has it
    manifest = {"source": source.name, "uri": uri, "format": source.format,
                **({"revision": revisions[0]} if len(revisions) == 1 else {}),
                "files": entries, "bytes": sum(e["bytes"] for e in entries)}
    fsio.write_json(layout.manifest(source.name), manifest)
    for e in entries:  # the manifest records what the notes held (an HTTP file's ETag)
        partial_note_of(files_dir / e["path"]).unlink(missing_ok=True)
    log(f"download: {source.name}: {len(entries)} file(s), {manifest['bytes'] / 1e6:.1f} MB")
    return manifest


def run(params: Params, layout: Layout, log: Log = print, mapper: Mapper = thread_map,
        sink: Sink | None = None) -> dict[str, dict]:
    items = {s.name: resolve(s, layout.root, _policy(params)) for s in params.sources}
    sizes = [os.path.getsize(i.origin) if i.kind == "local" else i.meta.get("size")
             for its in items.values() for i in its]
    # an HTTP file's size is known only once it is fetched: then no total (a part of one would be run past)
    total = sum(sizes) if None not in sizes else 0
    progress = Progress("download", len(sizes), total, log, what="files", sink=sink)
    return per_source(layout.raw, params.sources,
                      lambda s: download_source(s, params, layout, progress.say, progress, items[s.name]), mapper)
