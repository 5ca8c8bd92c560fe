"""The loader's order: which block of which source sits at each global position.

Contract: `Order(sources, mix, seed).blocks(start, count)` gives (source, shard, block within
shard) for positions [start, start + count): position n goes to source s = the mixing schedule's
(shardline.stream.mixing) n-th; the k-th block of s is, in epoch k // N_s, block
Permutation(N_s, key(seed, s, epoch))(k % N_s) (shardline.stream.permute), located by the shard
block counts of index.json. A pure function of (seed, mix, data): nothing is built at start-up,
nothing grows with the data. `batch_hash` is a global batch's identity (train.jsonl records it per
step); `data_version` the shards' content hash. No torch here: `shardline explain --step` places a
step in this order without loading a model.

Design: docs/architecture.md (Data contracts: Loader order and state).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from shardline.core import fsio, shardformat
from shardline.stream.mixing import Schedule
from shardline.stream.permute import Permutation, key_for
from shardline.stream.remote import Remote, read_indexes


@dataclass
class Source:
    name: str
    dir: Path
    index: dict
    counts: np.ndarray = field(init=False)
    starts: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.starts = shardformat.block_starts(self.index)
        self.counts = np.diff(self.starts)

    @property
    def blocks(self) -> int:
        return int(self.starts[-1])


def open_sources(shards_dir: str | Path, names: Sequence[str], remote: Remote | None = None) -> list[Source]:
    """The sources, by their indexes (from the store when streaming: shards are fetched when first
    needed); BadInput unless they share one geometry."""
    indexes = read_indexes(shards_dir, names, remote, "; build shards first ('dvc repro shard')")
    shardformat.geometry(indexes, shards_dir, "sources", "re-run 'dvc repro'")
    if remote is not None:
        return [Source(n, Path(remote.cache_dir), ix) for n, ix in zip(names, indexes)]
    return [Source(n, Path(shards_dir) / n, ix) for n, ix in zip(names, indexes)]


def data_version(sources: Sequence[Source]) -> str:
    """Content hash of the shards (every shard's sha256) and the tokenizer they were made with."""
    return fsio.stable_hash({s.name: [s.index["tokenizer_sha256"], [x["sha256"] for x in s.index["shards"]]]
                             for s in sources})


class Order:
    """(seed, mix, data) -> which block sits at each global position. Pure; cheap per call."""

    def __init__(self, sources: Sequence[Source], mix: Mapping[str, float], seed: int):
        self.sources, self.seed = list(sources), seed
        self.schedule = Schedule(mix, [s.name for s in self.sources])

    def blocks(self, start: int, count: int) -> np.ndarray:
        """int64 [count, 3]: (source id, shard, block within shard) for positions [start, start+count)."""
        src, within = self.schedule.assign(start, count)
        out = np.empty((count, 3), dtype=np.int64)
        out[:, 0] = src
        for s in np.unique(src):
            source = self.sources[s]
            n = source.blocks
            mask = src == s
            epoch, idx = np.divmod(within[mask], n)
            block = np.empty_like(idx)
            for e in np.unique(epoch):
                sel = epoch == e
                block[sel] = Permutation(n, key_for(self.seed, source.name, int(e)))(idx[sel])
            shard = np.searchsorted(source.starts, block, side="right") - 1
            out[mask, 1] = shard
            out[mask, 2] = block - source.starts[shard]
        return out


def batch_hash(ids: np.ndarray) -> str:
    """A global batch's identity (its (source, shard, block) ids), stable across processes."""
    return hashlib.blake2b(np.ascontiguousarray(ids, dtype=np.int64).tobytes(), digest_size=8).hexdigest()
