"""Dataset sources: a dataset by name, config, split and revision, read through Hugging Face
`datasets` (streaming), written as the project's raw files.

Contract:
- `download(source, layout, log)` streams the split's records and writes their text column
  (`text_field`, as it is: a null stays null, for the clean stage to count) to
  `data/raw/<source>/files/<split>-NNNNN.parquet`: a new file every `FILE_BYTES` of text, a row
  group every `ROWS` records (the clean stage cuts a big file at row groups). Then the manifest,
  last: {source, dataset (name, config, split, revision as asked), revision (the commit; null for
  a folder), content (a folder's content hash; null for the Hub), format, text_field, writer,
  files [{path, bytes, sha256, rows}], bytes}. From there clean, tokenize and shard read it as any
  parquet source: the same ids (`<split>-00000.parquet:<row>`), resume and determinism.
- `dataset.name` is a local folder when one of that name exists (relative: the project root's):
  a repository in the Hub's layout (`load_dataset(folder, streaming=True)`) or what
  `save_to_disk` wrote (`load_from_disk`, streamed by `to_iterable_dataset`); else a Hub id. A Hub
  revision is resolved to a commit first (`objects.hub_folder`, as hf:// sources are) and the split
  is streamed at that commit; with HF_HUB_OFFLINE=1 it is read from the local Hub cache's snapshot
  of that commit instead, and what the cache holds is taken as complete. A folder is identified
  by the sha256 of its files.
- A rerun whose key (name, config, split; the commit or content, not the revision as asked;
  text_field; writer) equals the manifest's, every file present with its sha256, reads nothing:
  not even the stream is opened.
- Resume: after each file, `stream.json` beside the manifest holds the files so far and the
  stream's position (`IterableDataset.state_dict`); a killed run continues there and ends with
  the files an unbroken run writes. Another key starts over, and its first act is to remove the
  old manifest: no manifest vouches for files of another version. A note or manifest that is
  damaged or edited is said in one line and made again (shardline.data.hflocal: the note vouches
  for itself with a digest), never read as another position.
- A name that resolves to nothing, a config or split the dataset lacks, a text field that is not
  a string column, `datasets` not installed: BadInput, one line naming sources[<name>] and the field.
  A local dataset (a folder, the Hub cache's snapshot) that cannot be read: one line naming its
  damaged file (`hflocal.damaged`) and what to do; the files written before it are kept.
  `datasets`' own log lines stay quiet while it reads: the line's error is the one said.
"""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from shardline.core import chaos, extras, fsio
from shardline.core.config import Source
from shardline.core.errors import BadInput, DownloadError, is_transient
from shardline.core.layout import Layout
from shardline.core.filenames import HF_CARD, HF_SAVED, dataset_file
from shardline.data import hflocal, objects

Log = Callable[[str], None]
FILE_BYTES = 128 << 20  # text per raw file: bounds how many files a corpus makes; clean parts them by row group
ROWS = 1000  # records per streamed batch and per parquet row group
WRITER = 1  # the raw files' layout for the same records: bump when their bytes change


class Origin(NamedTuple):
    """Where the records come from, and what identifies them."""

    kind: str  # hub | repo (a folder in the Hub's layout) | saved (save_to_disk's)
    path: str  # what load_dataset / load_from_disk opens
    revision: str | None  # the commit a Hub revision resolved to
    content: str | None  # a folder's files, hashed


def _field(source: Source, name: str) -> str:
    return f"sources[{source.name}].{name}"


def _first(e: BaseException) -> str:
    """An exception's first line: the message stays one line."""
    return (str(e).strip().splitlines() or [""])[0]


def _datasets(source: Source):
    return extras.need("datasets", _field(source, "dataset"))


def _content(folder: Path) -> str:
    """sha256 over a folder's files (names and bytes), hidden ones (.git, .cache) left out."""
    files = sorted(p for p in folder.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    return fsio.stable_hash([[str(p.relative_to(folder)), fsio.sha256_file(p)] for p in files])


def origin(source: Source, root: Path) -> Origin:
    d = source.dataset
    folder = Path(d.name).expanduser()
    folder = folder if folder.is_absolute() else root / folder
    if folder.is_dir():
        if d.revision is not None:
            raise BadInput(f"{_field(source, 'dataset.revision')}: {d.revision!r}, but {d.name} is a local folder, "
                           "which has no revisions (its content hash identifies it); remove the revision")
        saved = any((folder / name).exists() for name in HF_SAVED)
        return Origin("saved" if saved else "repo", str(folder), None, _content(folder))
    revision = d.revision or "main"
    try:
        snapshot = objects.hub_folder(d.name, revision, [HF_CARD])
    except Exception as e:  # noqa: BLE001 - huggingface_hub's errors: not found, offline, gated
        why = _first(e).split(". ")[0]  # the advice after it is about huggingface_hub's arguments, not params
        raise BadInput(f"{_field(source, 'dataset.name')}: {d.name!r} at {revision!r} is neither a local folder "
                       f"nor a Hub dataset that resolves ({type(e).__name__}: {why}); offline (HF_HUB_OFFLINE=1) "
                       "only the local Hub cache answers") from None
    offline = objects.hub_offline()
    return Origin("hub", str(snapshot) if offline else d.name, snapshot.name, None)


def _names(datasets, path: str, config: str | None, rev: dict) -> tuple[list[str], list[str]]:
    """The configs and the splits (of `config`) the dataset has; empty where it cannot say."""
    try:
        configs = list(datasets.get_dataset_config_names(path, **rev))
    except Exception:  # noqa: BLE001 - a diagnosis only: the load's own error stands then
        configs = []
    try:
        splits = list(datasets.get_dataset_split_names(path, config, **rev))
    except Exception:  # noqa: BLE001
        splits = []
    return configs, splits


def _saved_split(datasets, source: Source, o: Origin):
    d = source.dataset
    try:
        ds = datasets.load_from_disk(o.path)
    except Exception as e:  # noqa: BLE001 - datasets raises JSONDecodeError, TypeError, FileNotFoundError, ArrowInvalid
        raise unreadable(source, o, e) from None
    if d.config is not None:
        raise BadInput(f"{_field(source, 'dataset.config')}: {d.config!r}, but {d.name} is a save_to_disk folder, "
                       "which has no configs; remove the config")
    splits = list(ds) if isinstance(ds, datasets.DatasetDict) else [str(ds.split) if ds.split else "train"]
    if d.split not in splits:
        raise BadInput(f"{_field(source, 'dataset.split')}: {d.split!r} is not a split of {d.name} (splits: "
                       f"{', '.join(splits)})")
    return (ds[d.split] if isinstance(ds, datasets.DatasetDict) else ds).to_iterable_dataset()


def unreadable(source: Source, o: Origin, e: BaseException) -> BadInput:
    """One line for a dataset that failed to read: its damaged file, when it is a folder here
    (hflocal.damaged), else what `datasets` said."""
    folder = Path(o.path) if o.kind != "hub" or Path(o.path).is_dir() else None
    found = hflocal.damaged(folder) if folder is not None else None
    if found is not None:
        path, why = found
        return BadInput(f"{_field(source, 'dataset')}: {path}: {why}; restore that file of "
                        f"{source.dataset.name} (or fetch the dataset again), then re-run: the files written so far "
                        "are kept")
    return BadInput(f"{_field(source, 'dataset')}: {source.dataset.name} cannot be read ({type(e).__name__}: "
                    f"{_first(e)}); check the dataset's files, then re-run: the files written so far are kept")


def open_stream(source: Source, o: Origin):
    """The split as an IterableDataset of its text column, in Arrow batches."""
    datasets, d = _datasets(source), source.dataset
    if o.kind == "saved":
        stream = _saved_split(datasets, source, o)
    else:
        rev = {"revision": o.revision} if o.path == d.name else {}
        try:
            stream = datasets.load_dataset(o.path, d.config, split=d.split, streaming=True, **rev)
        except Exception as e:  # noqa: BLE001 - datasets raises ValueError, FileNotFoundError, its own types
            configs, splits = _names(datasets, o.path, d.config, rev)
            if d.config is not None and configs and d.config not in configs:
                raise BadInput(f"{_field(source, 'dataset.config')}: {d.config!r} is not a config of {d.name} "
                               f"(configs: {', '.join(configs)})") from None
            if splits and d.split not in splits:
                raise BadInput(f"{_field(source, 'dataset.split')}: {d.split!r} is not a split of {d.name}"
                               f"{f' ({d.config})' if d.config else ''} (splits: {', '.join(splits)})") from None
            raise unreadable(source, o, e) from None
    features = stream.features
    if features is not None:
        _check_column(source, features.get(source.text_field), list(features))
    return stream.select_columns([source.text_field]).with_format("arrow")


def _check_column(source: Source, feature, columns: list[str]) -> None:
    tf = source.text_field
    if feature is None:
        raise BadInput(f"{_field(source, 'text_field')}: {tf!r} is not a column of {source.dataset.name} "
                       f"(columns: {', '.join(columns)}); set sources[{source.name}].text_field")
    if getattr(feature, "dtype", None) not in ("string", "large_string"):
        raise BadInput(f"{_field(source, 'text_field')}: column {tf!r} of {source.dataset.name} is {feature}, "
                       "not text; name a string column")


def _head(source: Source, o: Origin) -> dict:
    """The manifest's fields besides its files."""
    return {"source": source.name, "uri": None, "dataset": source.dataset.model_dump(), "revision": o.revision,
            "content": o.content, "format": source.format, "text_field": source.text_field, "writer": WRITER}


def _key(head: dict) -> dict:
    """What the files depend on: the dataset, its commit or content (not the revision as asked:
    `main` and the commit it names are one version), the text field, the writer."""
    return {**{k: head.get(k) for k in ("revision", "content", "text_field", "writer")},
            "dataset": {k: v for k, v in (head.get("dataset") or {}).items() if k != "revision"}}


def _earlier(path: Path, shown: str, log: Log) -> dict | None:
    """The manifest an earlier run wrote at `path`: None when there is none, or when it is damaged
    (said in one line): then its files are made again rather than trusted."""
    try:
        value = fsio.read_json(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        value = None
    if isinstance(value, dict) and isinstance(value.get("files"), list):
        return value
    log(f"download: {shown}: damaged (not a manifest); the source's files are made again")
    return None


def _write_file(dest: Path, batches: Iterator, source: Source) -> dict:
    """Batches into one parquet file until it holds FILE_BYTES of text; its manifest entry. Takes
    no batch past the one that fills it, so the stream's state then is where the next file starts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([pa.field(source.text_field, pa.string())])
    rows = size = 0
    with fsio.atomic_writer(dest) as f, contextlib.closing(pq.ParquetWriter(f, schema, compression="zstd")) as writer:
        # closed inside the temp file's block, on a failure too: pyarrow would close it at exit, on a closed file
        for batch in batches:
            column = batch.column(source.text_field) if source.text_field in batch.column_names else None
            if column is None or not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                _check_column(source, None if column is None else column.type, batch.column_names)
            writer.write_table(pa.table([column.cast(pa.string())], schema=schema), row_group_size=ROWS)
            rows, size = rows + batch.num_rows, size + column.nbytes
            if size >= FILE_BYTES:
                break
    return {"path": dest.name, "bytes": dest.stat().st_size, "sha256": fsio.sha256_file(dest), "rows": rows}


def _stream_files(source: Source, o: Origin, layout: Layout, note: dict, log: Log) -> list[dict]:
    stream, files_dir = open_stream(source, o), layout.raw_files(source.name)
    entries = list(note["files"])
    if note.get("state") is not None:
        stream.load_state_dict(note["state"])  # the note vouched for it (hflocal.read_note)
        log(f"download: {source.name}: resuming after {len(entries)} file(s) written")
    batches = iter(stream.iter(batch_size=ROWS))
    try:
        while (first := next(batches, None)) is not None:
            entry = _write_file(files_dir / dataset_file(source.dataset.split, len(entries)),
                                itertools.chain([first], batches), source)
            entries.append({**entry, **({"revision": o.revision} if o.revision else {})})
            hflocal.write_note(layout.stream_note(source.name), note["key"], entries, stream.state_dict())
            log(f"download: {source.name}: {entry['path']}, {entry['rows']:,} records, {entry['bytes'] / 1e6:.1f} MB")
            chaos.done("download", f"{source.name}/{entry['path']}")
            chaos.point("download.file")
    except (BadInput, DownloadError):
        raise
    except Exception as e:  # noqa: BLE001 - the Hub's and datasets' errors while streaming
        # requests' and httpx's network errors are not OSErrors with an errno: named as objects._transient names them
        if is_transient(e) or any(w in type(e).__name__ for w in ("Connection", "Timeout", "ServerError")):
            raise DownloadError(f"{_field(source, 'dataset')}: {source.dataset.name}: {type(e).__name__}: {e}; a "
                                "rerun continues after the last file written", transient=True) from None
        raise unreadable(source, o, e) from None  # a damaged file of the dataset, named when it is here
    return entries


def download(source: Source, layout: Layout, log: Log = print) -> dict:
    """Materialise a dataset source and write its manifest (last); returns the manifest."""
    o = origin(source, layout.root)
    head = _head(source, o)
    files_dir, manifest_path, note_path = (layout.raw_files(source.name), layout.manifest(source.name),
                                           layout.stream_note(source.name))
    old = _earlier(manifest_path, layout.rel(manifest_path), log)
    if old and _key(old) == _key(head) and hflocal.intact(files_dir, old["files"]):
        log(f"download: {source.name}: {source.dataset.name} unchanged "
            f"({o.revision or 'content ' + o.content[:12]}); {len(old['files'])} file(s) kept")
        return old
    manifest_path.unlink(missing_ok=True)  # the files change now: no manifest may vouch for them
    note = hflocal.read_note(note_path, _key(head), files_dir, layout.rel(note_path), log)
    with hflocal.quiet():
        entries = _stream_files(source, o, layout, note, log)
    if not entries:
        raise BadInput(f"{_field(source, 'dataset.split')}: {source.dataset.split!r} of {source.dataset.name} holds no "
                       "records; name a split that does")
    fsio.prune(files_dir, {files_dir / e["path"] for e in entries})
    manifest = {**head, "files": entries, "bytes": sum(e["bytes"] for e in entries)}
    fsio.write_json(manifest_path, manifest)
    note_path.unlink(missing_ok=True)
    log(f"download: {source.name}: {source.dataset.name} ({o.revision or 'local folder'}): {len(entries)} file(s), "
        f"{sum(e['rows'] for e in entries):,} records, {manifest['bytes'] / 1e6:.1f} MB")
    return manifest
