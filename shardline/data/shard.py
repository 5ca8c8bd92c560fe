"""shard stage: token parts -> data/shards/<source>/shard-NNNNN.bin + index.json.

The format of shards and of index.json (and how shards are verified) is
shardline.core.shardformat's. A source's token stream (parts in order, EOS after every document)
is cut into consecutive blocks; the tail shorter than one block is dropped (and counted). Blocks
are spread over `round(bytes / target_mb)` shards of equal count, the first `N % S` shards
holding one more.

index.json (written last) lists, per shard, file, blocks, bytes and sha256, plus the format
version, dtype, seq_len, tokenizer hash and totals: it is what the loader verifies shards
against. A token index of another format version stops the stage, naming the rebuild.
The held-out documents (tokens/<source>/val/) become shards of the same format in
shards/<source>/val/ with their own index.json; they may hold no block at all.
Resume: a shard already on disk with the exact bytes it must hold is not rewritten. A shard
whose bytes change is first written whole as `shard-N.bin.next` (fsynced; a killed run's is
reused when its bytes are right); only when every one is durable is the old index.json removed,
the staged shards renamed over the old ones and the new index written. So a full disk or a kill
at any point leaves either the old shards with their index, verified, or no index (the loader
refuses, naming the fix): never an index over a mix of old and new. The output is a pure
function of the token parts and params.

Design: docs/architecture.md (Data contracts: Shards; The stage frame: why shard switches all at once).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Callable

import numpy as np

from shardline.core import chaos, fsio, shardformat
from shardline.core.config import Params, Source
from shardline.core.errors import BadInput, ShardCorrupt
from shardline.core.layout import Layout
from shardline.core.filenames import SIDES, TOKEN_PARTS, shard_name, side_dir, staged_of
from shardline.data import frame, staging
from shardline.core.parallel import Mapper, thread_map
from shardline.core.progress import Progress, Sink

Log = Callable[[str], None]


class TokenStream:
    """The concatenation of token part files, read by global token offset without loading it.
    Plain reads, not a memory map: a map keeps every page it touched in this process's resident
    set, which then grows with the corpus (2 GB of RSS at 4 GB of text); reads keep it at one
    shard."""

    def __init__(self, paths: list[Path], dtype: np.dtype):
        self.paths, self.dtype = list(paths), dtype
        self.starts = np.cumsum([0] + [p.stat().st_size // dtype.itemsize for p in self.paths])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def read(self, start: int, count: int) -> np.ndarray:
        out = np.empty(count, dtype=self.dtype)
        view, size = memoryview(out).cast("B"), self.dtype.itemsize
        i = int(np.searchsorted(self.starts, start, side="right")) - 1
        filled = 0
        while filled < count:
            off = start + filled - int(self.starts[i])
            take = min(count - filled, int(self.starts[i + 1] - self.starts[i]) - off)
            with open(self.paths[i], "rb") as f:
                f.seek(off * size)
                got = f.readinto(view[filled * size:(filled + take) * size])
            if got != take * size:
                raise ShardCorrupt(f"{self.paths[i]}: ended {take * size - got} bytes early while being read; "
                                   "re-run the tokenize stage")
            filled += take
            i += 1
        return out


def shard_counts(blocks: int, block_bytes: int, target_mb: float) -> list[int]:
    n = max(1, round(blocks * block_bytes / (target_mb * 2**20)))
    n = min(n, blocks)
    return [blocks // n + (i < blocks % n) for i in range(n)]


def _holds(path: Path, data: bytes, digest: str) -> bool:
    return path.exists() and path.stat().st_size == len(data) and fsio.sha256_file(path) == digest


def _pack(tok_index: dict, tok_dir: Path, out_dir: Path, params: Params) -> tuple[dict, int, set[Path]]:
    """One token stream into shards under `out_dir`: (index, shard files written, files kept)."""
    dtype = shardformat.DTYPES[tok_index["dtype"]]
    stream = TokenStream([tok_dir / p["file"] for p in tok_index["parts"]], dtype)
    block = params.shard.seq_len + 1
    blocks = len(stream) // block
    out_dir.mkdir(parents=True, exist_ok=True)
    shards, first, written, staged = [], 0, 0, []
    for i, count in enumerate(shard_counts(blocks, block * dtype.itemsize, params.shard.target_mb)):
        data = stream.read(first * block, count * block).tobytes()
        digest = fsio.sha256_bytes(data)
        path = out_dir / shard_name(i)
        if not _holds(path, data, digest):
            nxt = staged_of(path)  # a new shard's bytes, durable, waiting for the switch
            if not _holds(nxt, data, digest):  # a killed run's staged shard with these bytes is kept
                fsio.write_bytes(nxt, data, point="shard.write")
                written += 1
                chaos.done("shard", f"{out_dir.parent.name}/{out_dir.name}/{path.name}")
                chaos.point("shard.file")
            staged.append((nxt, path))
        shards.append({"file": path.name, "blocks": count, "bytes": len(data), "sha256": digest})
        first += count
    if staged:  # every new byte is durable: only renames are left, which need no space
        shardformat.remove_index(out_dir)  # from here no index vouches for old and new mixed
        for nxt, path in staged:
            os.replace(nxt, path)
        fsio.fsync_dir(out_dir)
    index = shardformat.shard_index(tok_index, params.shard.seq_len, shards, len(stream))
    return index, written, {out_dir / s["file"] for s in shards} | {shardformat.write_index(out_dir, index)}


def shard_source(source: Source, params: Params, layout: Layout) -> tuple[dict, int]:
    """One source's shards, training side in data/shards/<source>/, held-out side in its val/
    (a task that may run on a cluster worker: it logs nothing itself); returns the training
    index, with the held-out one under "val", and how many shard files it wrote."""
    tok_dir, out_dir = layout.tokens / source.name, layout.shards / source.name
    tok_index, val_index = _token_index(tok_dir, layout), _token_index(side_dir(tok_dir, "val"), layout)  # both before any write
    block = params.shard.seq_len + 1
    if tok_index["tokens"] < block:
        raise BadInput(f"shard: source {source.name!r} has {tok_index['tokens']} tokens, fewer than one block "
                       f"(shard.seq_len + 1 = {block}); add data, lower shard.seq_len, or drop the source")
    out_dir.mkdir(parents=True, exist_ok=True)
    fsio.remove_temps(out_dir)
    index, written, keep = _pack(tok_index, tok_dir, out_dir, params)
    val, val_written, val_keep = _pack(val_index, side_dir(tok_dir, "val"), side_dir(out_dir, "val"), params)
    frame.sweep(out_dir, keep | val_keep)
    return {**index, "val": val}, written + val_written


def _token_files(tok_dir: Path, layout: Layout) -> list[Path]:
    """A token folder's index and the parts it lists."""
    return [shardformat.index_of(tok_dir), *(tok_dir / p["file"] for p in _token_index(tok_dir, layout)["parts"])]


def _token_index(tok_dir: Path, layout: Layout) -> dict:
    return shardformat.read_index(tok_dir, ": the tokenize stage did not finish (it was killed or the disk filled "
                                  "while it rewrote the parts); re-run 'dvc repro tokenize'", show=layout.rel)


class StagedShards:
    """shard_source on a worker that shares only a store with the driver (shardline.data.staging):
    the source's token folders fetched into scratch, its shards made there and put in the store,
    each side's index.json after its shards, the training side's last."""

    def __init__(self, staged: staging.Staging, params: Params):
        self.staged, self.params = staged, params

    def __call__(self, source: Source) -> tuple[dict, int]:
        st, fs = self.staged, self.staged.fs()
        here, driver = staging.scratch(f"shard-{source.name}"), Layout.at(self.staged.root)
        mine = Layout.at(here)
        try:
            for side in SIDES:
                tok_dir, local = driver.tokens_of(source.name, side), mine.tokens_of(source.name, side)
                tok_index = shardformat.index_of(tok_dir)
                staging.fetch(fs, st.remote(tok_index), shardformat.index_of(local), policy=st.policy)
                for p in shardformat.read_index(local, f" in the store at {st.remote(tok_dir)}")["parts"]:
                    staging.fetch(fs, st.remote(tok_dir / p["file"]), local / p["file"], policy=st.policy)
            index, written = shard_source(source, self.params, mine)
            for side, ix in (("val", index["val"]), ("train", index)):  # shards, then their index
                out, there = mine.shards_of(source.name, side), driver.shards_of(source.name, side)
                try:  # what the store's index vouches for is in place: a shard it lists alike is not put again
                    before = shardformat.parse_index(staging.cat(fs, st.remote(shardformat.index_of(there)), st.policy),
                                                     there)
                except (FileNotFoundError, ValueError, BadInput):
                    before = {"shards": []}
                held = {(s["file"], s["bytes"], s["sha256"]) for s in before["shards"]}
                changed = [s for s in ix["shards"] if (s["file"], s["bytes"], s["sha256"]) not in held]
                if changed and before["shards"]:  # no index may vouch for a mix of old and new, here either
                    staging.remove(fs, st.remote(shardformat.index_of(there)), st.policy)
                for s in changed:
                    staging.put(fs, out / s["file"], st.remote(there / s["file"]), st.policy)
                if before != fsio.read_json(shardformat.index_of(out)):
                    staging.put(fs, shardformat.index_of(out), st.remote(shardformat.index_of(there)), st.policy)
            return index, written
        finally:
            staging.shutil.rmtree(here, ignore_errors=True)


def _take(staged: staging.Staging, source: str, index: dict, layout: Layout) -> None:
    """A worker's shards into data/shards/<source>, switched as _pack switches them: a shard whose
    bytes differ fetched whole beside it (.next) and checked against its sha256, then the index
    removed, the shards renamed and the index written, for each side."""
    fs, out_dir, keep = staged.fs(), layout.shards / source, set()
    for side, ix in (("val", index["val"]), ("train", {k: v for k, v in index.items() if k != "val"})):
        where = side_dir(out_dir, side)
        where.mkdir(parents=True, exist_ok=True)
        moves = []
        for s in ix["shards"]:
            path = where / s["file"]
            if not (path.is_file() and path.stat().st_size == s["bytes"] and fsio.sha256_file(path) == s["sha256"]):
                staging.fetch(fs, staged.remote(path), staged_of(path), policy=staged.policy)
                if fsio.sha256_file(staged_of(path)) != s["sha256"]:
                    raise ShardCorrupt(f"{staged.remote(path)}: its bytes are not those its index names; the store "
                                       "changed under the stage: re-run 'dvc repro shard'")
                moves.append((staged_of(path), path))
        if moves:
            shardformat.remove_index(where)
            for nxt, path in moves:
                os.replace(nxt, path)
            fsio.fsync_dir(where)
        keep |= {where / s["file"] for s in ix["shards"]} | {shardformat.write_index(where, ix)}
    frame.sweep(out_dir, keep)


def run(params: Params, layout: Layout, log: Log = print, mapper: Mapper = thread_map,
        sink: Sink | None = None) -> dict[str, dict]:
    layout.shards.mkdir(parents=True, exist_ok=True)
    fsio.prune_dirs(layout.shards, {s.name for s in params.sources})
    sizes = [sum(f.stat().st_size for f in (layout.tokens / s.name).rglob(TOKEN_PARTS)) for s in params.sources]
    progress = Progress("shard", len(params.sources), sum(sizes), log, what="sources", sink=sink)
    fn: Callable = functools.partial(shard_source, params=params, layout=layout)
    if (staged := staging.of(params, layout)) is not None:  # the token folders in the store, shards back from it
        record = staging.Record(staged)
        staging.put_inputs(staged, [f for s in params.sources for side in SIDES
                                    for f in _token_files(side_dir(layout.tokens / s.name, side), layout)], record)
        record.save()
        fn = StagedShards(staged, params)

    def on_done(i: int, result: tuple[dict, int]) -> None:
        if staged is not None:
            _take(staged, params.sources[i].name, result[0], layout)
        progress.advance(sizes[i])

    results = mapper(fn, params.sources, on_done=on_done)
    done = {s.name: r for s, r in zip(params.sources, results)}
    for name, (ix, written) in done.items():
        n = len(ix["shards"]) + len(ix["val"]["shards"])
        log(f"shard: {name}: {ix['total_blocks']} blocks of {ix['block_tokens']} tokens in {len(ix['shards'])} "
            f"shard(s), {ix['val']['total_blocks']} held-out block(s) in val/ ({written} written, "
            f"{n - written} already in place)")
    return {name: ix for name, (ix, _) in done.items()}

