"""The on-disk format of token parts and shards, and of the index.json that vouches for each folder.

Contract:
- Token parts (data/tokens/<source>/[val/]part-NNNNN.bin) are a flat array of ids, EOS after
  every document (BOS before it when the line puts one), no header, little-endian: uint16 when
  the vocabulary fits (<= 65535 ids), else uint32 (`DTYPES`, `dtype_for`). Shards keep that dtype.
- A shard (data/shards/<source>/[val/]shard-NNNNN.bin, names from core.layout) is a flat array
  of fixed-length blocks of `seq_len + 1` ids, no header. Block i of a shard starts at byte
  `i * (seq_len + 1) * itemsize`, so a reader needs no index to seek (`blocks`).
- Every token and shard folder has one index.json, written last (`write_index`) and removed
  first, durably, before anything it lists changes (`remove_index`): an index never vouches for
  a mix of two runs' files. Its fields are built here (`token_index`, `shard_index`) and read
  back as dicts: the token index lists `parts` {file, bytes, tokens, docs, sha256}; the shard
  index lists `shards` {file, blocks, bytes, sha256}, with dtype, seq_len, block_tokens,
  tokenizer_sha256, eos_id, docs and the totals.
- Every index carries `format_version` (`FORMAT_VERSION`, an int; so does every token part's
  done-marker, in its stats). Readers accept only this version (`check_version`): any other is
  BadInput in one line naming the file and what to do (rebuild it with this release, or read it
  with the one that wrote it), never a misread. An index without the field was written before
  it existed, in the one format there was then, and reads as version 1. Bump the version with
  any change to the bytes of a part or shard or to the meaning of an index field.
- A shard is verified against its index entry before any block of it is read (`verify_shard`:
  sha256, or size only), and ShardCorrupt names the file and the remedy. Shards read together
  must agree on seq_len, dtype and tokenizer (`geometry`).

Design: docs/architecture.md (Data contracts: Tokens, Shards).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import numpy as np

from shardline import __version__
from shardline.core import fsio
from shardline.core.errors import BadInput, ShardCorrupt
from shardline.core.filenames import index_of
from shardline.core.remedies import project_of, remedy_for

DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
REMEDY = "re-run 'dvc repro shard' or restore it with 'dvc checkout data/shards'"
FORMAT_VERSION = 1  # of token parts, shards and their index.json (module docstring)


def dtype_for(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 65535 else "uint32"


# ---- index.json

# what readers take from an index, and from each of its entries: a damaged one is one line, not a KeyError
_FIELDS = {"parts": {"dtype": str, "tokenizer_sha256": str, "eos_id": int, "tokens": int, "docs": int, "parts": list},
           "shards": {"dtype": str, "seq_len": int, "tokenizer_sha256": str, "total_blocks": int, "shards": list}}
_ENTRY = {"parts": {"file": str, "bytes": int, "tokens": int, "docs": int, "sha256": str},
          "shards": {"file": str, "blocks": int, "bytes": int, "sha256": str}}


def _stage(kind: str) -> str:
    return "tokenize" if kind == "parts" else "shard"


def check_version(index: dict, where: object, remedy: str | None = None) -> dict:
    """`index` when it is in the format this release reads and holds what readers take from it;
    else BadInput naming `where`, what is wrong and `remedy` (default: rebuild it). A missing
    `format_version` is 1 (written before the field existed)."""
    kind = "parts" if isinstance(index, dict) and "parts" in index else "shards"
    return _checked(index, where, kind, remedy or f"rebuild it with 'dvc repro -f -s {_stage(kind)}'")


def _checked(index, where: object, kind: str, remedy: str) -> dict:
    if not isinstance(index, dict):
        raise BadInput(f"{where}: holds a JSON {fsio.json_type(index)}, not an object; {remedy}")
    found = index.get("format_version", 1)
    if found != FORMAT_VERSION:
        raise BadInput(f"{where}: format_version {found!r}, but this shardline ({__version__}) reads format "
                       f"{FORMAT_VERSION}; rebuild it with this release ('dvc repro -f -s {_stage(kind)}'), or read "
                       "it with the shardline release that wrote it")
    fsio.check_fields(index, _FIELDS[kind], where, remedy)
    for i, entry in enumerate(index[kind]):
        fsio.check_fields(entry, _ENTRY[kind], where, remedy, f"{kind}[{i}]")
    return index


def read_index(folder: str | Path, missing: str, show: Callable[[Path], object] = str) -> dict:
    """A folder's index, checked for its format version and fields; BadInput "<path>: missing<missing>"
    when there is none (`missing` says why and what to do; `show` renders the path), and one line
    naming it, what is wrong and what rebuilds or restores it when it is damaged or of another format."""
    path = index_of(folder)
    remedy = remedy_for(path)
    try:
        index = fsio.read_record(path, remedy, kind=object, shown=show(path))
    except FileNotFoundError:
        raise BadInput(f"{show(path)}: missing{missing}") from None
    layout = project_of(path)  # its folder says what it indexes (outside a project: what it lists)
    tokens = path.is_relative_to(layout.tokens) if layout else isinstance(index, dict) and "parts" in index
    return _checked(index, show(path), "parts" if tokens else "shards", remedy)


def parse_index(data: bytes, where: object) -> dict:
    """An index.json's bytes as fetched from object storage (`where`: its URL), checked as `read_index`
    checks a file."""
    remedy = "publish the shards there again ('shardline push-shards')"
    return check_version(fsio.parse_record(data, where, remedy, kind=object), where, remedy)


def write_index(folder: str | Path, index: dict) -> Path:
    """Write a folder's index (atomically; the last file written into it), unless it holds exactly
    this index already: an unchanged file keeps its mtime (parts.store puts only what changed)."""
    path = index_of(folder)
    try:
        if fsio.read_json(path) == index:
            return path
    except (OSError, ValueError):
        pass
    fsio.write_json(path, index)
    return path


def remove_index(folder: str | Path) -> None:
    """Remove a folder's index, durably, before anything it lists is rewritten."""
    path = index_of(folder)
    if path.exists():
        path.unlink()
        fsio.fsync_dir(folder)


def token_index(source: str, side: str, tokenizer: dict, encoder: str, encoder_reason: str,
                parts: list[dict]) -> dict:
    """A token folder's index: `tokenizer` is data/tokenizer/meta.json, `parts` its files in order."""
    bos = {"bos_id": tokenizer["bos_id"]} if tokenizer.get("bos_id") is not None else {}
    return {"format_version": FORMAT_VERSION, "source": source, "side": side, "dtype": tokenizer["dtype"],
            "tokenizer_sha256": tokenizer["sha256"], "eos_id": tokenizer["eos_id"], **bos, "encoder": encoder, "encoder_reason": encoder_reason,
            "parts": parts, "tokens": sum(e["tokens"] for e in parts), "docs": sum(e["docs"] for e in parts)}


def shard_index(tokens: dict, seq_len: int, shards: list[dict], stream_tokens: int) -> dict:
    """A shard folder's index, made from the token index it was cut from (`stream_tokens` long)."""
    block = seq_len + 1
    blocks = sum(s["blocks"] for s in shards)
    return {"format_version": FORMAT_VERSION, "source": tokens["source"], "side": tokens["side"],
            "dtype": tokens["dtype"], "seq_len": seq_len, "block_tokens": block, "tokenizer_sha256": tokens["tokenizer_sha256"], "eos_id": tokens["eos_id"],
            "docs": tokens["docs"], "shards": shards, "total_blocks": blocks, "total_tokens": blocks * block,
            "tail_tokens_dropped": stream_tokens - blocks * block}


class Geometry(NamedTuple):
    """What every shard read together must share."""

    seq_len: int
    dtype: str
    tokenizer_sha256: str

    @classmethod
    def of(cls, index: dict) -> "Geometry":
        return cls(index["seq_len"], index["dtype"], index["tokenizer_sha256"])

    @property
    def width(self) -> int:
        """Ids per block: seq_len inputs and the target after the last."""
        return self.seq_len + 1

    @property
    def np_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]


def geometry(indexes: Sequence[dict], where: object, what: str, remedy: str) -> Geometry:
    """The geometry the shard indexes share; BadInput naming `where` when they disagree."""
    found = {tuple(Geometry.of(ix)) for ix in indexes}  # plain tuples: the message shows them as before
    if len(found) != 1:
        raise BadInput(f"{where}: {what} disagree on seq_len/dtype/tokenizer ({found}); {remedy}")
    return Geometry(*found.pop())


def block_starts(index: dict) -> np.ndarray:
    """int64 [shards + 1]: the first block of each shard in the side's blocks, then their total."""
    return np.concatenate([[0], np.cumsum([s["blocks"] for s in index["shards"]], dtype=np.int64)])


# ---- shards

def verify_shard(shard_dir: str | Path, entry: dict, mode: str = "full") -> None:
    """Check one shard against its index.json entry; raise ShardCorrupt naming file and remedy."""
    path = Path(shard_dir) / entry["file"]
    size = path.stat().st_size if path.exists() else -1
    if size != entry["bytes"]:
        raise ShardCorrupt(f"{path}: size {size} != {entry['bytes']} in index.json (truncated or missing); {REMEDY}")
    if mode == "full":
        got = fsio.sha256_file(path)
        if got != entry["sha256"]:
            raise ShardCorrupt(f"{path}: sha256 mismatch (expected {entry['sha256'][:12]}…, got {got[:12]}…); {REMEDY}")


def verify(shard_dir: str | Path, mode: str = "full") -> dict:
    """Check every shard of a folder against its index.json; raise ShardCorrupt on the first bad one."""
    index = read_index(shard_dir, f"; {REMEDY}")
    for entry in index["shards"]:
        verify_shard(shard_dir, entry, mode)
    return index


def blocks(path: str | Path, dtype: np.dtype, width: int) -> np.ndarray:
    """A (verified) shard file as [blocks, width], memory-mapped: pages are read as blocks are."""
    # a plain array on the mapped pages: each operation on a np.memmap pays for its subclass
    return np.memmap(path, dtype=dtype, mode="r").reshape(-1, width).view(np.ndarray)


def blocks_of(data: bytes, dtype: np.dtype, width: int) -> np.ndarray:
    """A shard's (verified) bytes, fetched whole, as [blocks, width]."""
    return np.frombuffer(data, dtype=dtype).reshape(-1, width)
