"""Where a big raw file is cut, so one huge file still gives many parallel, resumable parts.

Contract: `spans(path, source, size, part_bytes, which)` cuts a file into `Span`s of about
`part_bytes`, at record boundaries, in one read: jsonl at line boundaries, blank-line txt at blank
lines, parquet by row groups; a whole-file txt document, a WARC file (its gzip members cannot be
found from the middle) and a file under `part_bytes` are one span (`WHOLE`). A span knows the
line (row) it starts on, so the readers' ids do not depend on how a file was cut. A compressed
file (`which`) is cut in the bytes it decodes to (compressed.decoded_spans); damage in it gives
one span, whose reader meets the damage and reports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from shardline.core.config import Source
from shardline.data import compressed

WHOLE = (0, -1, 1)  # a span covering a whole file


class Span(NamedTuple):
    """Part of a file: bytes [start, end) (parquet: row groups) beginning at line (row) `first`."""

    start: int
    end: int  # -1: to the end
    first: int


def spans(path: Path, source: Source, size: int, part_bytes: float, which: str | None = None) -> list[Span]:
    """Cut a file into spans of about `part_bytes`, at record boundaries (one read of the file).
    `size` counts decoded bytes, and spans cut them, when the file is compressed (`which`)."""
    if size <= part_bytes or (source.format == "txt" and source.txt_unit == "file") or source.format == "warc":
        return [Span(*WHOLE)]  # a WARC is read whole: its gzip members cannot be found from the middle
    if source.format == "parquet":
        import pyarrow.parquet as pq

        try:
            md = pq.ParquetFile(path).metadata
        except Exception:  # unreadable: let the reader raise its clear error on the whole file
            return [Span(*WHOLE)]
        out, start, rows, acc, first = [], 0, 0, 0, 1
        for g in range(md.num_row_groups):
            acc += md.row_group(g).total_byte_size
            rows += md.row_group(g).num_rows
            if acc >= part_bytes or g == md.num_row_groups - 1:
                out.append(Span(start, g + 1, first))
                start, acc, first = g + 1, 0, rows + 1
        return out
    sep = b"\n" if source.format == "jsonl" else b"\n\n"
    if which:
        reader = compressed.Reader(path, which)
        try:
            return [Span(*s) for s in compressed.decoded_spans(reader, sep, part_bytes)]
        except compressed.Damaged:  # one span: its reader meets the damage and reports it
            return [Span(*WHOLE)]
        finally:
            reader.raw.close()
    out, start, line = [], 0, 1
    with open(path, "rb") as f:
        while start < size:
            end = _boundary(f, int(start + part_bytes), sep, size)
            out.append(Span(start, end, line))
            line += _count_newlines(f, start, end)
            start = end
    return out


def _boundary(f, target: int, sep: bytes, size: int) -> int:
    """The first offset >= target just after `sep` (or the file's end)."""
    if target >= size:
        return size
    pos = max(target - len(sep) + 1, 0)  # a separator may straddle the target
    while True:
        f.seek(pos)
        chunk = f.read(1 << 16)
        i = chunk.find(sep)
        if i >= 0:
            return pos + i + len(sep)
        if len(chunk) < 1 << 16:
            return size
        pos += len(chunk) - len(sep) + 1


def _count_newlines(f, start: int, end: int) -> int:
    f.seek(start)
    n, left = 0, end - start
    while left > 0 and (chunk := f.read(min(left, 1 << 20))):
        n += chunk.count(b"\n")
        left -= len(chunk)
    return n
