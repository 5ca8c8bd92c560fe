"""Read raw files into (doc_id, text) records without ever crashing on a bad record.

Contract: a reader yields documents and counts what it could not use in `ReadStats`:
- invalid UTF-8 (and lone surrogates from JSON escapes) becomes U+FFFD; the document is kept
  and counted;
- a malformed record (bad JSON, not an object, missing or non-string field, null cell) is
  skipped, counted, and sampled as `file:line: why` for stats.json;
- a file that cannot be read at all (truncated parquet, missing column) raises `BadInput`
  naming the file and the remedy: that is not a record-level problem.
Document ids are `<relpath>:<n>`: the 1-based line of the record (jsonl; txt blocks: the line
the block starts on) or the row (parquet); a whole-file txt document is `<relpath>:1`. A WARC
record's id is its URL (`shardline.data.warc`): the same page in two crawls is the same
document, on the same side of the held-out split.
The same input therefore always gives the same ids.
`documents()` yields each record as the `Document` the cleaning rules see (a WARC record's URL
and date with it, not beside it); `read()` yields its (id, text).

Big files are read in `Span`s (filespans.py: where a file is cut) so one huge file still gives
many parallel, resumable parts; a span knows the line (row) it starts on, so ids do not depend on
how a file was split.

Compressed jsonl and txt (`shardline.data.compressed`) are read as the bytes they decode to:
spans and lines count decoded bytes, and ids name the file without its compression suffix, so
a compressed copy gives exactly the documents and ids of the plain file. Damage in a compressed
stream ends the file: the records before it are kept, the damage is one bad record whose sample
names the file and byte offset.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Iterator

import orjson

from shardline.core.config import Source
from shardline.core.errors import BadInput
from shardline.data import compressed
from shardline.data.document import Document
from shardline.data.filespans import WHOLE, Span
from shardline.data.readstats import ReadStats, decode  # noqa: F401 (ReadStats: callers name it here)

_SURROGATE = re.compile("[\ud800-\udfff]")
def _no_surrogates(text: str, stats: ReadStats) -> str:
    """JSON escapes can encode lone surrogates ("\\ud800"), which are not text: replace them."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        stats.invalid_utf8 += 1
        return _SURROGATE.sub("\ufffd", text)


class _Plain:
    """A plain file read like a `compressed.Reader`: from `start`, tracking the offset consumed."""

    def __init__(self, path: Path, start: int):
        self._f = open(path, "rb")
        self._f.seek(start)
        self.pos = start

    def readline(self) -> bytes:
        line = self._f.readline()
        self.pos += len(line)
        return line

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.pos += len(data)
        return data

    def close(self) -> None:
        self._f.close()


def _open(path: Path, which: str | None, start: int):
    return compressed.open_at(path, which, start) if which else _Plain(path, start)


def _done(f, which: str | None) -> None:
    """A plain file is closed; a decoded stream is kept for the file's next span, unless the file
    is read to its end."""
    if not which:
        f.close()
    elif f.at_end():
        compressed.release()


def _damaged(stats: ReadStats, rel: str, e: compressed.Damaged) -> None:
    stats.damage(f"{rel}: byte {e.offset}", e.offset, str(e))


def _read_all(f, n: int, stats: ReadStats, rel: str) -> tuple[bytes, bool]:
    """Up to `n` bytes (-1: all) and whether the stream ended in damage (then: what came before)."""
    chunks, left = [], n
    try:
        while left != 0 and (chunk := f.read(min(left, 1 << 20) if left > 0 else 1 << 20)):
            chunks.append(chunk)
            left -= len(chunk) if left > 0 else 0
    except compressed.Damaged as e:
        _damaged(stats, rel, e)
        return b"".join(chunks), True
    return b"".join(chunks), False


def _txt(path: Path, rel: str, source: Source, stats: ReadStats, span: Span, which: str | None) -> Iterator[tuple[str, str]]:
    f = _open(path, which, span.start)
    try:
        raw, damaged = _read_all(f, span.end - span.start if span.end >= 0 else -1, stats, rel)
    finally:
        _done(f, which)
    if damaged:
        if source.txt_unit == "file":
            return  # a document cut short is not the document
        raw = raw[: raw.rfind(b"\n\n") + 1]  # nor is the block the damage cut
    rel = compressed.id_name(rel, which)
    text = decode(raw, stats)
    if source.txt_unit == "file":
        stats.records += 1
        yield f"{rel}:1", text
        return
    block: list[str] = []
    start = 0
    for lineno, line in enumerate([*text.split("\n"), ""], span.first):
        if line.strip():
            start = start if block else lineno
            block.append(line)
        elif block:
            stats.records += 1
            yield f"{rel}:{start}", "\n".join(block)
            block = []


def _jsonl(path: Path, rel: str, source: Source, stats: ReadStats, span: Span, which: str | None) -> Iterator[tuple[str, str]]:
    key = source.text_field
    f = _open(path, which, span.start)
    name = compressed.id_name(rel, which)
    try:
        for lineno in itertools.count(span.first):
            if 0 <= span.end <= f.pos:
                break
            try:
                raw = f.readline()
            except compressed.Damaged as e:
                _damaged(stats, rel, e)
                break
            if not raw:
                break
            if not raw.strip():
                continue
            stats.records += 1
            try:  # valid UTF-8 whose field is a string, the common case: orjson, ~3x json's speed
                obj = orjson.loads(raw)
                if isinstance(obj, dict) and isinstance(text := obj.get(key), str):
                    yield f"{name}:{lineno}", text  # orjson refuses lone surrogates and invalid UTF-8
                    continue
            except orjson.JSONDecodeError:
                pass
            where = f"{name}:{lineno}"  # the rest exactly as json reads it: the same repairs and reasons
            try:
                obj = json.loads(decode(raw, stats))
            except json.JSONDecodeError as e:
                stats.reject(where, f"invalid JSON ({e.msg} at column {e.colno})")
                continue
            except ValueError as e:  # what parses but Python refuses: an integer of more than 4300 digits
                stats.reject(where, f"invalid JSON ({str(e).split(';')[0]})")
                continue
            text = obj.get(key) if isinstance(obj, dict) else None
            if not isinstance(text, str):
                why = "not a JSON object" if not isinstance(obj, dict) else (
                    f"no field {key!r}" if key not in obj else f"field {key!r} is {type(text).__name__}, not a string")
                stats.reject(where, why)
                continue
            yield where, _no_surrogates(text, stats)
    finally:
        _done(f, which)


def _parquet(path: Path, rel: str, source: Source, stats: ReadStats, span: Span) -> Iterator[tuple[str, str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for a damaged footer
        raise BadInput(f"{rel}: not a readable parquet file ({_first_line(e)}); re-download it "
                       f"('dvc repro download') or remove it from the source") from None
    names = pf.schema_arrow.names
    if source.text_field not in names:
        raise BadInput(f"{rel}: no column {source.text_field!r} (columns: {names}); "
                       f"set sources[{source.name}].text_field")
    row = span.first - 1
    groups = range(span.start, span.end if span.end >= 0 else pf.num_row_groups)
    try:
        for batch in pf.iter_batches(columns=[source.text_field], batch_size=4096, row_groups=groups):
            for value in _texts(batch.column(0), stats):
                row += 1
                stats.records += 1
                if isinstance(value, str):
                    yield f"{rel}:{row}", value
                else:
                    stats.reject(f"{rel}:{row}", f"column {source.text_field!r} is {type(value).__name__}")
    except (OSError, pa.ArrowException) as e:  # a page that does not decode: OSError, or ArrowInvalid
        raise BadInput(f"{rel}: parquet data is damaged after row {row} ({_first_line(e)}); re-download it") from None


def _texts(column, stats: ReadStats) -> list:
    """A string column's values; damaged bytes in it (not UTF-8) as U+FFFD, counted, as in every reader."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        import pyarrow as pa

        raw = column.cast(pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary())
        return [v if v is None else decode(v, stats) for v in raw.to_pylist()]


def _first_line(e: Exception) -> str:
    """Arrow's message of a damaged file, whose later lines repeat its C++ context: one line."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _warc(path: Path, rel: str, stats: ReadStats) -> Iterator[Document]:
    from shardline.data import warc  # resiliparse: loaded by the sources that need it

    for url, date, text in warc.records(path, stats, rel):
        yield Document(text, url, url, {"date": date})


def documents(path: Path, rel: str, source: Source, stats: ReadStats,
              span: Span = Span(*WHOLE)) -> Iterator[Document]:
    """Each record as a `Document`: its id and text, and a WARC record's URL (also its id) and
    date, as the cleaning rules see it."""
    if source.format == "warc":
        return _warc(path, rel, stats)
    return (Document(text, doc_id) for doc_id, text in read(path, rel, source, stats, span))


def read(path: Path, rel: str, source: Source, stats: ReadStats,
         span: Span = Span(*WHOLE)) -> Iterator[tuple[str, str]]:
    """(id, text) of each document (a WARC record's id is its URL)."""
    if source.format == "warc":
        return ((d.id, d.text) for d in _warc(path, rel, stats))
    if source.format == "parquet":
        return _parquet(path, rel, source, stats, span)
    return (_txt if source.format == "txt" else _jsonl)(path, rel, source, stats, span, compressed.codec(path))
