"""Common Crawl input (`format: warc`): WARC and WET files, gzip'd or plain, read as (url, date, text).

Contract:
- `records(path, stats, rel, counts)` yields `(url, date, text)` per usable record, in file order:
  - a `response` whose payload is HTML (`text/html`, `application/xhtml+xml`; Common Crawl's
    detected `WARC-Identified-Payload-Type` when present, else the HTTP `Content-Type`) gives
    its main text, `extract(html)`, whatever the HTTP status (CC files redirects and errors apart);
  - a `conversion` record (WET) gives its payload as UTF-8;
  - url is `WARC-Target-URI`, date `WARC-Date`, both as written (the date ISO 8601).
- Not documents and not bad: request, metadata, warcinfo, revisit records pass silently; a non-HTML
  response counts in `WarcCounts.skipped`, a record whose text is blank (all navigation) in `.empty`.
- `stats.records` counts the records yielded and the bad ones; those that hold no document
  (`WarcCounts`: non-HTML, blank) count in `stats.skipped` instead. `stats.reject` is called for a
  response broken on its own (no HTTP status line, an undecodable Content-Encoding), and once
  for a damaged file: the records before the damage are yielded, the reject names the byte
  offset (in the file as stored) of the record the damage is in, `<rel>: byte N`, and reading
  stops. No traceback, and no partial record: a block must be as long as its Content-Length.
- HTML bytes become text: UTF-8 when they are valid UTF-8, whatever a header claims (servers
  label UTF-8 as latin-1 far more often than the reverse; datatrove's WARC reader also tries
  UTF-8 first), else the declared charset (HTTP header, else `<meta>`; WHATWG names, so latin-1
  is cp1252), else UTF-8 with U+FFFD, counted in `stats.invalid_utf8`.
- `is_warc(head)` recognises a WARC (or WET) from its first decoded bytes.

Why resiliparse (DCLM's extractor) and its fastwarc reader: on 200 real HTML pages (19.7 MB, one
core) it ran 170-190 pages/s (17-18 MB/s), trafilatura with FineWeb's settings 6-7 (0.6-0.7 MB/s),
main text comparable and navigation dropped by both; extraction is ~95% of reading a WARC.
fastwarc decodes .warc.gz at ~670 MB/s of HTML, warcio at ~200. Neither reports a truncated gzip
member (fastwarc even hands over the cut record): hence the length checks and `_first_cut`.
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from typing import Iterator

from shardline.core import extras
from shardline.data.readstats import ReadStats, decode

extras.need("resiliparse", "format warc")  # the warc extra: one line naming it where it is not installed
extras.need("fastwarc", "format warc")
from fastwarc.warc import ArchiveIterator, WarcRecord, WarcRecordType  # noqa: E402
from resiliparse.extract.html2text import extract_plain_text  # noqa: E402
from resiliparse.parse.encoding import map_encoding_to_html5  # noqa: E402

HTML_TYPES = ("text/html", "application/xhtml+xml")
_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([\w.:-]+)""", re.I)
_CHUNK = 1 << 16


@dataclass
class WarcCounts:
    """Records that are no document but no fault either (they are not in `ReadStats.bad`)."""

    skipped: int = 0  # responses that are not HTML (images, PDFs, JSON, ...)
    empty: int = 0  # records whose (main) text is empty or whitespace


def is_warc(head: bytes) -> bool:
    """Whether decoded bytes begin a WARC file: every record, the first included, starts 'WARC/1.x'."""
    return head.startswith(b"WARC/")


def extract(html: str) -> str:
    """The page's main text, as DCLM extracts it."""
    return extract_plain_text(html, main_content=True)


def records(path: str | os.PathLike, stats: ReadStats, rel: str,
            counts: WarcCounts | None = None) -> Iterator[tuple[str, str, str]]:
    """(url, date, text) of each usable record of a WARC or WET file; see the module's contract."""
    counts = counts if counts is not None else WarcCounts()
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    last = None  # offset of the last record read whole: damage lies after it
    try:
        # parse_http=False: the block is read raw so its length can be checked, then parsed
        for rec in ArchiveIterator(os.fspath(path), parse_http=False, fsspec_args=False):
            kind, where, expected = rec.record_type, rec.stream_pos, rec.content_length
            document = kind in (WarcRecordType.response, WarcRecordType.conversion)
            # Common Crawl's own payload detection, when there, is cheaper and surer than the
            # server's Content-Type: a PDF or video it names is consumed, never held in memory
            identified = rec.headers.get("WARC-Identified-Payload-Type")
            wanted = kind == WarcRecordType.conversion or (
                document and (identified is None or _mime(identified) in HTML_TYPES))
            # fastwarc hands over what the file still had, and a file cut inside a WARC header
            # gives a record without Content-Length: both are the end of a truncated file
            if "Content-Length" not in rec.headers:
                _damaged(stats, rel, where, "WARC header cut off (no Content-Length)")
                return
            block = rec.reader.read() if wanted else b""
            got = len(block) if wanted else rec.reader.consume()
            if got < expected:
                _damaged(stats, rel, where, f"record cut off ({got} of {expected} bytes)")
                return
            last = where
            if not wanted:
                counts.skipped += document
                stats.skipped += document
                continue
            url = rec.headers.get("WARC-Target-URI", "")
            date = rec.headers.get("WARC-Date", "")
            if kind == WarcRecordType.conversion:
                text = decode(block, stats)
            else:
                text = _response_text(rec, block, stats, f"{rel}:{url}", counts, check_type=identified is None)
                if text is None:
                    continue
            if text.strip():
                stats.records += 1
                yield url, date, text
            else:
                counts.empty += 1
                stats.skipped += 1
    except OSError as e:  # fastwarc: corrupt gzip data, an unparseable WARC header
        cut = _first_cut(path, last or 0) if gzipped else None
        if cut or last is not None:
            _damaged(stats, rel, *(cut or (last, f"unreadable WARC data after this record ({e})")))
        else:
            _bad(stats, f"{rel}: byte 0", f"not a WARC or WET file ({e}); check the source's format")
        return
    # a .gz cut inside a record's WARC header ends the iteration quietly: only the gzip stream knows
    cut = _first_cut(path, last or 0) if gzipped else None
    if cut:
        _damaged(stats, rel, *cut)


def _response_text(rec: WarcRecord, block: bytes, stats: ReadStats, where: str, counts: WarcCounts,
                   check_type: bool) -> str | None:
    """The main text of an HTML response; None for a skipped or rejected one."""
    rec.set_bytes_content(block)
    try:
        # Content- and Transfer-Encoding undone: Common Crawl stores payloads decoded, other crawlers may not
        rec.parse_http(auto_decode="all")
        status = rec.http_headers.status_code if rec.http_headers is not None else None  # None: no HTTP head
        body = rec.reader.read()
    except OSError as e:
        _bad(stats, where, f"undecodable HTTP payload ({e})")
        return None
    if status is None:
        _bad(stats, where, "response without an HTTP status line")
        return None
    if check_type and _mime(rec.http_content_type or "") not in HTML_TYPES:
        counts.skipped += 1
        stats.skipped += 1
        return None
    return extract(_html(body, rec.http_charset, stats))


def _mime(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def _html(body: bytes, declared: str | None, stats: ReadStats) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if not declared:
        m = _META_CHARSET.search(body, 0, 4096)
        declared = m.group(1).decode("ascii") if m else None
    codec = map_encoding_to_html5(declared, fallback_utf8=False) if declared else None
    if codec and codec != "utf-8":
        try:
            return body.decode(codec, errors="replace")
        except LookupError:
            pass
    return decode(body, stats)


def _bad(stats: ReadStats, where: str, why: str) -> None:
    stats.records += 1  # a broken record is a record (max_bad_fraction's denominator), a skipped one is not
    stats.reject(where, why)


def _damaged(stats: ReadStats, rel: str, offset: int, what: str) -> None:
    stats.damage(f"{rel}: byte {offset}", offset, what)


def _first_cut(path: str | os.PathLike, start: int) -> tuple[int, str] | None:
    """(offset, why) of the first gzip member from `start` on that does not decode to its end.
    A WARC.gz is one member per record, so from the last good record this decodes a few records;
    a file gzip'd whole has no member there (fastwarc's offsets are then where its buffer stood)."""
    with open(path, "rb") as f:
        f.seek(start)
        start = start if f.read(2) == b"\x1f\x8b" else 0
        f.seek(start)
        member = pos = start
        d = zlib.decompressobj(31)
        data = f.read(_CHUNK)
        while data:
            try:
                d.decompress(data)  # output discarded (at most ~1000x a chunk): only where members end matters
            except zlib.error as e:
                return member, f"corrupt gzip data ({e})"
            rest = d.unused_data  # the next member's first bytes; empty until this one ends
            pos += len(data) - len(rest)
            if d.eof:
                member, d = pos, zlib.decompressobj(31)
            data = rest or f.read(_CHUNK)
    return (member, "gzip stream cut off inside this record (the file is truncated)") if pos > member else None
