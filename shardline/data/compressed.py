"""Compressed raw files (gzip, zstd, bz2, xz): recognised by their magic bytes, read as the bytes
they decode to.

Contract:
- `codec(path)` names a file's compression from its first bytes (its name does not count: a
  `.gz` that is plain text is read as plain text); None for a plain file.
- `open_at(path, codec, start)` is a binary stream of the decoded bytes from decoded offset
  `start`. Decoding cannot seek, so the last stream a thread opened is kept and continued when
  the next span of the same file starts at or after where it stopped: the spans of one file,
  read in order by one worker (the frame's `Part.group`), decode it once. `release()` closes it
  when a file's last span is read.
- Damage (a truncated or corrupt stream) raises `Damaged` with the compressed byte offset the
  decoder had read up to and the decoded bytes it had produced: the readers keep the records
  before it and count the damage as one bad record (`clean.max_bad_fraction`). Truncation is
  found where it is; corruption where the decoder notices it. bz2 checks every block, but
  deflate (gzip) has no checksum until a member's end: what zlib decodes from corrupt bytes
  before it fails is garbage, read as records (most fail the JSON parse or the rules).
- `decoded_spans` cuts a decoded stream at record separators exactly as `filespans.spans` cuts a
  plain file, so a compressed copy gives the same parts, ids and shards as the plain file.
- `id_name(rel, codec)`: the file name documents are identified by, the compression suffix
  dropped, for the same reason.

Decoders: gzip by python-isal (Intel's ISA-L: 627 MB/s on bench.data's corpus, where pyarrow's
zlib gave 197 and zlib-ng 499; the clean stage on .jsonl.gz then keeps pace with plain files),
zstd and bz2 by pyarrow (the project's parquet engine; multi-frame and multi-stream files
included), xz by the standard library's lzma, which pyarrow lacks.
"""

from __future__ import annotations

import io
import lzma
import os
import re
import threading
from typing import BinaryIO

_MAGIC = ((b"\x1f\x8b", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"\xfd7zXZ\x00", "xz"))
_BZ2 = re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)")  # block size, then a block's or the end's magic
SUFFIXES = {"gzip": (".gz", ".gzip"), "zstd": (".zst", ".zstd"), "bz2": (".bz2",), "xz": (".xz",)}
_CHUNK = 1 << 20
_STEP = 1 << 16


class Damaged(Exception):
    """The compressed stream is truncated or corrupt at compressed byte `offset`."""

    def __init__(self, codec: str, offset: int, decoded: int, why: str):
        super().__init__(f"{codec} data damaged at byte {offset} (after {decoded} decoded bytes): {why}")
        self.offset, self.decoded = offset, decoded


def codec(path: str | os.PathLike) -> str | None:
    with open(path, "rb") as f:
        head = f.read(10)
    if _BZ2.match(head):  # "BZh" alone could begin a text file
        return "bz2"
    return next((name for magic, name in _MAGIC if head.startswith(magic)), None)


def id_name(rel: str, which: str | None) -> str:
    for suffix in SUFFIXES.get(which or "", ()):
        if rel.endswith(suffix):
            return rel[: -len(suffix)]
    return rel


class _Decoded(io.RawIOBase):
    """Decoded bytes as a raw stream; decoder errors become `Damaged` with the byte offsets."""

    def __init__(self, path: str | os.PathLike, which: str):
        import pyarrow as pa

        self.codec, self.decoded = which, 0
        self._errors: tuple = (OSError, EOFError, lzma.LZMAError, ValueError)
        self._file = open(path, "rb")
        try:
            if which == "gzip":
                from isal import igzip, igzip_lib

                self._stream = igzip.IGzipFile(fileobj=self._file, mode="rb")
                self._errors += (igzip_lib.IsalError,)  # an invalid deflate block: not an OSError kin
            elif which == "xz":
                self._stream = lzma.LZMAFile(self._file)
            else:
                self._stream = pa.CompressedInputStream(pa.PythonFile(self._file, mode="r"), which)
        except BaseException:
            self._file.close()
            raise

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        try:  # small reads: what one read had decoded is lost when it meets damage
            data = self._stream.read(min(len(buf), _STEP))
        except self._errors as e:
            raise Damaged(self.codec, self._file.tell(), self.decoded, str(e) or type(e).__name__) from None
        n = len(data)
        buf[:n] = data
        self.decoded += n
        return n

    def close(self) -> None:
        if not self.closed:
            self._stream.close()
            self._file.close()
        super().close()


def _identity(path: str | os.PathLike) -> tuple:
    st = os.stat(path)
    return str(path), st.st_ino, st.st_mtime_ns, st.st_size


class Reader:
    """A decoded stream and the decoded offset the caller has consumed up to (`pos`)."""

    def __init__(self, path: str | os.PathLike, which: str):
        self.path, self.raw = _identity(path), _Decoded(path, which)
        self.stream: BinaryIO = io.BufferedReader(self.raw, _CHUNK)  # type: ignore[assignment]
        self.pos = 0

    def readline(self) -> bytes:
        line = self.stream.readline()
        self.pos += len(line)
        return line

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n) if n >= 0 else self.stream.read()
        self.pos += len(data)
        return data

    def at_end(self) -> bool:
        try:
            return not self.stream.peek(1)
        except Damaged:  # the damage is the end: the span's reader has reported it, or will
            return True

    def skip(self, n: int) -> None:
        while n > 0 and (data := self.read(min(n, _CHUNK))):
            n -= len(data)


_KEPT = threading.local()  # per thread: parts may run on threads (Prefect's, Dask's), each its own stream


def open_at(path: str | os.PathLike, which: str, start: int) -> Reader:
    """A reader at decoded offset `start`, continuing this thread's last one when it is the same
    file (path, inode, mtime, size) and has not passed `start`. One stream per thread is kept."""
    last: Reader | None = getattr(_KEPT, "reader", None)
    if last is None or last.path != _identity(path) or last.pos > start or last.raw.closed:
        if last is not None:
            last.raw.close()
        last = _KEPT.reader = Reader(path, which)
    last.skip(start - last.pos)
    return last


def release() -> None:
    """Close this thread's kept stream (a file's last span is read)."""
    last: Reader | None = getattr(_KEPT, "reader", None)
    if last is not None:
        last.raw.close()
        _KEPT.reader = None


def decoded_size(path: str | os.PathLike, which: str) -> tuple[int, str | None]:
    """(decoded bytes, None) or, for a damaged file, (the bytes before the damage, why)."""
    with _Decoded(path, which) as raw:
        buf = bytearray(_CHUNK)
        try:
            while raw.readinto(buf):
                pass
        except Damaged as e:
            return e.decoded, str(e)
        return raw.decoded, None


def decoded_spans(reader: Reader, sep: bytes, part_bytes: float) -> list[tuple[int, int, int]]:
    """(start, end, first line) of each span, as `filespans.spans` finds them in a plain file: a
    span ends just after the first `sep` that ends past start + part_bytes, or at the end."""
    n = len(sep)
    out: list[tuple[int, int, int]] = []
    buf, at, eof = bytearray(), 0, False  # buf holds decoded bytes [at, at + len(buf))
    start, line, counted = 0, 1, 0  # counted: newlines in [start, at)
    while True:
        pos = max(int(start + part_bytes) - n + 1, 0)
        end = None
        while True:
            if at + len(buf) > pos:
                i = buf.find(sep, max(pos - at, 0))
                if i >= 0:
                    end = at + i + n
                    break
            if eof:
                break
            # searched up to here: only a separator straddling two reads can still start in buf
            keep = max(len(buf) - (n - 1), 0)
            counted += buf.count(b"\n", 0, keep)
            del buf[:keep]
            at += keep
            chunk = reader.read(_CHUNK)
            eof = not chunk
            buf += chunk
        if end is None:
            end = at + len(buf)
            if end > start:
                out.append((start, end, line))
            return out
        out.append((start, end, line))
        line += counted + buf.count(b"\n", 0, end - at)
        del buf[: end - at]
        at, start, counted = end, end, 0
