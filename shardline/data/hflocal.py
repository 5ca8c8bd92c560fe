"""What a dataset source (shardline.data.hfdatasets) keeps and reads on this machine, checked.

Contract:
- `read_note(path, key, files_dir, shown, log)`: the stream note (`stream.json` beside the raw
  manifest) a killed download left, when it is one this key wrote and every file it lists is on
  disk with its sha256; else a fresh note. The note carries a digest of itself: an edited or
  damaged note (emptied, cut short, another type, a state `datasets` would read as another
  position) is said in one line and the stream starts over, writing the same files again; it is
  bookkeeping, never trusted when it does not vouch for itself (a state `datasets` accepts but
  reads wrong would repeat or skip records, silently).
- `write_note(path, key, files, state)` writes it with that digest.
- `damaged(folder)`: the first file of a local dataset folder (a repository in the Hub's layout, a
  save_to_disk folder, a Hub cache snapshot) that cannot be read whole: a parquet or Arrow file cut
  short or not of its format, a JSON file of save_to_disk's that does not parse or holds another
  type, a file or split folder that JSON names that is not there; as (path, "damaged (...)" or
  "missing (...)"). Asked only after reading the dataset failed, so an intact folder costs nothing.
- `quiet()`: `datasets`' log lines and progress bars off while the download stage reads.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Callable

from shardline.core import fsio
from shardline.core.filenames import HF_ARROW, HF_SAVED, HF_SAVED_INFO, PARQUET

Log = Callable[[str], None]
STATE, SPLITS = HF_SAVED  # a Dataset's state.json (its Arrow files), a DatasetDict's (its split folders)
SAVED_JSON = (*HF_SAVED, HF_SAVED_INFO)  # what save_to_disk writes beside its Arrow files


def _digest(note: dict) -> str:
    return fsio.stable_hash({k: note.get(k) for k in ("key", "files", "state")})


def write_note(path: Path, key: dict, files: list[dict], state: dict | None) -> None:
    note = {"key": key, "files": files, "state": state}
    fsio.write_json(path, {**note, "digest": _digest(note)})


def intact(files_dir: Path, entries) -> bool:
    """Every entry names a file under `files_dir` of its bytes and sha256."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) and {"path", "bytes", "sha256"} <= e.keys()
                                                for e in entries):
        return False  # a damaged entry vouches for nothing
    return all(isinstance(e["path"], str) and (p := files_dir / e["path"]).is_file() and p.stat().st_size == e["bytes"]
               and fsio.sha256_file(p) == e["sha256"] for e in entries)


def read_note(path: Path, key: dict, files_dir: Path, shown: str, log: Log) -> dict:
    """The note to continue from (module docstring); a fresh one when there is none to trust."""
    fresh = {"key": key, "files": [], "state": None}
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return fresh
    try:
        note = json.loads(data)
    except ValueError:
        note = None
    why = ("empty" if not data.strip() else "not valid JSON (truncated or damaged)" if note is None else
           f"holds a JSON {fsio.json_type(note)}, not the note's object" if not isinstance(note, dict) else
           "does not match its digest (edited or damaged)" if note.get("digest") != _digest(note) else None)
    if why is None and note["key"] != key:
        return fresh  # another version's download: started over, as a changed dataset always is
    if why is None and not intact(files_dir, note["files"]):
        why = "lists files that are not on disk as it says"
    if why is not None:
        log(f"download: {shown}: {why}; the stream starts over (the files it wrote are written again)")
        return fresh
    return note


def damaged(folder: str | Path) -> tuple[Path, str] | None:
    """(the first damaged file of `folder`, why), or None when every file reads whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(folder).parts))
    for p in files:
        try:
            why = _json_problem(p) if p.name in SAVED_JSON else None
            if why:
                return why
            if p.suffix == PARQUET:
                pf = pq.ParquetFile(p)
                for i in range(pf.num_row_groups):
                    pf.read_row_group(i)
            elif p.suffix == HF_ARROW:
                with pa.memory_map(str(p)) as source:
                    pa.ipc.open_stream(source).read_all()
        except (OSError, ValueError, pa.ArrowException) as e:
            return p, f"damaged ({type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]})"
    return None


def _json_problem(p: Path) -> tuple[Path, str] | None:
    """What is wrong with one of save_to_disk's JSON files: it parses to an object, and what it
    names (a Dataset's Arrow files, a DatasetDict's split folders) is there. Raises ValueError
    for JSON that does not parse."""
    value = json.loads(p.read_bytes())
    if not isinstance(value, dict):
        return p, f"damaged (holds a JSON {fsio.json_type(value)}, not an object)"
    field, kind = ("splits", "folder") if p.name == SPLITS else ("_data_files", "file")
    if p.name == HF_SAVED_INFO or field not in value:
        return None
    names = value[field]
    if not isinstance(names, list) or not all(isinstance(n, str) or (isinstance(n, dict) and
                                                                     isinstance(n.get("filename"), str)) for n in names):
        return p, f"damaged (field {field!r} is a JSON {fsio.json_type(names)}, not a list of names)"
    for n in names:
        there = p.parent / (n if isinstance(n, str) else n["filename"])
        if not (there.is_dir() if kind == "folder" else there.is_file()):
            return there, f"missing ({p.name} names it)"
    return None


@contextlib.contextmanager
def quiet():
    """`datasets`' own log lines (its "Failed to read file ..." before the error it raises) and
    progress bars off while it reads: the stage says its own lines, one per file. (Its bars' tqdm
    lock also raced under load: "type object 'tqdm' has no attribute '_lock'".)"""
    try:
        import datasets  # configures its logger on import: set the level after that
    except ImportError:
        datasets = None
    logger = logging.getLogger("datasets")
    level, bars = logger.level, datasets is not None and not datasets.are_progress_bars_disabled()
    logger.setLevel(logging.CRITICAL)
    if bars:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        logger.setLevel(level)
        if bars:
            datasets.enable_progress_bars()
