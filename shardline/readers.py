"""Read raw files into (doc_id, text) records without ever crashing on a bad record.

Contract: a reader yields documents and counts what it could not use in `ReadStats`:
- invalid UTF-8 is decoded with U+FFFD replacement; the document is kept and counted;
- a malformed record (bad JSON, not an object, missing or non-string field, null cell) is
  skipped, counted, and sampled as `file:line: why` for stats.json;
- a file that cannot be read at all (truncated parquet, missing column) raises `BadInput`
  naming the file and the remedy: that is not a record-level problem.
Document ids are `<relpath>:<n>`: the 1-based line of the record (jsonl; txt blocks: the line
the block starts on) or the row (parquet); a whole-file txt document is `<relpath>:1`.
The same input therefore always gives the same ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from .config import Source
from .errors import BadInput

MAX_SAMPLES = 5


@dataclass
class ReadStats:
    records: int = 0
    bad: int = 0
    invalid_utf8: int = 0
    samples: list[str] = field(default_factory=list)

    def reject(self, where: str, why: str) -> None:
        self.bad += 1
        if len(self.samples) < MAX_SAMPLES:
            self.samples.append(f"{where}: {why}")


def _decode(raw: bytes, stats: ReadStats) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.invalid_utf8 += 1
        return raw.decode("utf-8", errors="replace")


def _txt(path: Path, rel: str, source: Source, stats: ReadStats) -> Iterator[tuple[str, str]]:
    text = _decode(path.read_bytes(), stats)
    if source.txt_unit == "file":
        stats.records += 1
        yield f"{rel}:1", text
        return
    block: list[str] = []
    start = 0
    for lineno, line in enumerate([*text.split("\n"), ""], 1):
        if line.strip():
            start = start if block else lineno
            block.append(line)
        elif block:
            stats.records += 1
            yield f"{rel}:{start}", "\n".join(block)
            block = []


def _jsonl(path: Path, rel: str, source: Source, stats: ReadStats) -> Iterator[tuple[str, str]]:
    key = source.text_field
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            stats.records += 1
            where = f"{rel}:{lineno}"
            try:
                obj = json.loads(_decode(raw, stats))
            except json.JSONDecodeError as e:
                stats.reject(where, f"invalid JSON ({e.msg} at column {e.colno})")
                continue
            text = obj.get(key) if isinstance(obj, dict) else None
            if not isinstance(text, str):
                why = "not a JSON object" if not isinstance(obj, dict) else (
                    f"no field {key!r}" if key not in obj else f"field {key!r} is {type(text).__name__}, not a string")
                stats.reject(where, why)
                continue
            yield where, text


def _parquet(path: Path, rel: str, source: Source, stats: ReadStats) -> Iterator[tuple[str, str]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for a damaged footer
        raise BadInput(f"{rel}: not a readable parquet file ({e}); re-download it "
                       f"('dvc repro download') or remove it from the source") from None
    names = pf.schema_arrow.names
    if source.text_field not in names:
        raise BadInput(f"{rel}: no column {source.text_field!r} (columns: {names}); "
                       f"set sources[{source.name}].text_field")
    row = 0
    try:
        for batch in pf.iter_batches(columns=[source.text_field], batch_size=4096):
            for value in batch.column(0).to_pylist():
                row += 1
                stats.records += 1
                if isinstance(value, str):
                    yield f"{rel}:{row}", value
                else:
                    stats.reject(f"{rel}:{row}", f"column {source.text_field!r} is {type(value).__name__}")
    except OSError as e:
        raise BadInput(f"{rel}: parquet data is damaged after row {row} ({e}); re-download it") from None


READERS = {"txt": _txt, "jsonl": _jsonl, "parquet": _parquet}


def read(path: Path, rel: str, source: Source, stats: ReadStats) -> Iterator[tuple[str, str]]:
    return READERS[source.format](path, rel, source, stats)
