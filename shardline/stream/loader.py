"""The streaming loader: exact, elastic, O(1) resume over per-source shards.

Contract:
- The global sequence of blocks is a pure function of (seed, mix, data): position n goes to
  source s = mixing schedule(n); its k-th block of s is, in epoch k // N_s, block
  Permutation(N_s, key(seed, s, epoch))(k % N_s), located by the shard block counts of
  index.json. Nothing is built at start-up, nothing grows with the data, nothing is replayed.
- A loader step consumes one global batch of `global_batch` consecutive positions. Rank r of
  `world` takes the r-th contiguous slice; with DataLoader workers, worker w of a rank reads
  the runs of steps w, w + num_workers, ... which DataLoader hands out in order
  (shardline.stream.workers). So the global sequence depends only on seed, mix and global
  batch: resuming with another world size or worker count continues it exactly (elastic).
- State is one counter (blocks consumed globally) plus what must not change (seed, mix,
  seq_len, global batch, data version); `load_state_dict` refuses a state whose invariants
  differ, naming the field and the override, unless `allow_change` is set.
- Every shard is verified against index.json before its first block is read (sha256, or size
  only with verify="size"); a bad shard raises ShardCorrupt and nothing from it is yielded.
- With `shards_uri` the index files and shards come from object storage (shardline.stream.remote;
  shardline.stream.shardcache verifies on arrival, caches within cache_mb and prefetches in the exact
  order the coming steps need); the order and batches are those of the same shards on disk.

Design: docs/architecture.md (Data contracts: Loader order and state).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import torch

from shardline.core import retry, shardformat
from shardline.core.layout import Layout
from shardline.core.errors import BadInput, ShardlineError
from shardline.stream.order import Order, Source, batch_hash, data_version, open_sources  # noqa: F401 (the loader's names)
from shardline.stream.remote import Remote
from shardline.stream.workers import Runs, group_for, steps
from shardline.stream.shardcache import Fetcher


CHUNK_POSITIONS = 32768  # global positions whose order is computed in one vectorised call (786 KB)


class StateMismatch(ShardlineError):
    """A saved loader state does not fit this data/config; the message names field and override."""


@dataclass(frozen=True)
class Spec:
    """Everything a loader (or one of its DataLoader workers) needs; picklable."""

    shards_dir: str
    sources: tuple[str, ...]
    mix: tuple[tuple[str, float], ...]
    seed: int
    global_batch: int
    rank: int = 0
    world: int = 1
    verify: str = "full"
    remote: Remote | None = None  # loader.shards_uri and its cache


class Reader:
    """Reads blocks from shards, verifying each shard before its first use in this process."""

    def __init__(self, spec: Spec, workers: int = 1, serves: Callable[[int], bool] | None = None):
        self.spec, self.workers = spec, workers  # one of `workers` DataLoader workers (its cache share)
        self.serves = serves  # which steps (by first position) it reads, if not all: its prefetch skips the others
        self.sources = open_sources(spec.shards_dir, spec.sources, spec.remote)
        self.fetcher: Fetcher | None = None  # made at first use: a reader that never reads fetches nothing
        self.order = Order(self.sources, dict(spec.mix), spec.seed)
        shape = shardformat.Geometry.of(self.sources[0].index)  # every source's: open_sources checked
        self.width, self.dtype = shape.width, shape.np_dtype
        self.maps: dict[tuple[int, int], np.memmap] = {}
        self.chunk: tuple[int, np.ndarray] | None = None  # (first position, ids): order computed ahead
        self.chunk_steps = 1  # doubles up to CHUNK_POSITIONS: a resume's first batch stays cheap

    def fetch(self) -> Fetcher:
        if self.fetcher is None:
            self.fetcher = Fetcher(self.spec.remote, [(s.name, s.index) for s in self.sources], dtype=self.dtype,
                                   width=self.width, verify=self.spec.verify, share=self.workers)
        return self.fetcher

    def _map(self, s: int, shard: int) -> np.memmap:
        if self.spec.remote is not None:  # verified on arrival; not kept here, since the cache may evict it
            return self.fetch().array((s << 32) | shard)
        mm = self.maps.get((s, shard))
        if mm is None:
            source = self.sources[s]
            entry = source.index["shards"][shard]
            shardformat.verify_shard(source.dir, entry, self.spec.verify)
            mm = self.maps[(s, shard)] = shardformat.blocks(source.dir / entry["file"], self.dtype, self.width)
        return mm

    def read(self, ids: np.ndarray, dtype=np.int64, out: np.ndarray | None = None) -> np.ndarray:
        """The blocks `ids` names, [len(ids), seq_len + 1] of `dtype` (the shards' own: no widening),
        into `out` if given."""
        keys = ids[:, 0] * (1 << 32) + ids[:, 1]
        order = np.lexsort((ids[:, 2], keys))  # by shard, then ascending offset: kind to the page cache
        sorted_keys = keys[order]
        cuts = [0, *(np.flatnonzero(np.diff(sorted_keys)) + 1).tolist(), len(ids)]
        buf = np.empty((len(ids), self.width), dtype=self.dtype)
        for a, b in zip(cuts[:-1], cuts[1:]):
            key = int(sorted_keys[a])
            mm = self._map(key >> 32, key & 0xFFFFFFFF)  # verified before any block is read
            buf[a:b] = mm[ids[order[a:b], 2]]
        out = np.empty((len(ids), self.width), dtype=dtype) if out is None else out
        out[order] = buf  # widened here, in the one copy that restores the batch's order
        return out

    def global_ids(self, step_start: int, ahead: bool = False) -> np.ndarray:
        """The whole global batch at `step_start` (every rank's blocks). The order is computed a
        chunk of steps ahead: per-call numpy overhead, not arithmetic, dominates small batches."""
        g = self.spec.global_batch
        if self.chunk is None or not self.chunk[0] <= step_start <= self.chunk[0] + len(self.chunk[1]) - g:
            if ahead:  # a prefetch look-ahead must not move the chunk the reads use
                return self.order.blocks(step_start, g)
            self.chunk = (step_start, self.order.blocks(step_start, g * self.chunk_steps))
            self.chunk_steps = min(2 * self.chunk_steps, max(1, CHUNK_POSITIONS // g))
        off = step_start - self.chunk[0]
        return self.chunk[1][off:off + g]

    def plan(self, step_start: int, steps: int) -> None:
        """The order of `steps` steps from `step_start` in one call: a worker's run, not the other
        workers' steps between its runs (which a chunk ahead would compute too). Not when streaming:
        the prefetch looks through the coming steps, one order call each outside the chunk ahead."""
        if self.spec.remote is None:
            self.chunk = (step_start, self.order.blocks(step_start, self.spec.global_batch * steps))

    def hash_at(self, step_start: int) -> str:
        return batch_hash(self.global_ids(step_start))

    def rank_ids(self, step_start: int, ahead: bool = False) -> np.ndarray:
        per = self.spec.global_batch // self.spec.world
        return self.global_ids(step_start, ahead)[self.spec.rank * per:(self.spec.rank + 1) * per]

    def _keys_at(self, step_start: int) -> list[int]:
        """The shards this reader reads at a step, in the order read() visits them."""
        if self.serves is not None and not self.serves(step_start):
            return []
        ids = self.rank_ids(step_start, ahead=True)
        return np.unique(ids[:, 0] * (1 << 32) + ids[:, 1]).tolist()

    def tokens(self, step_start: int, dtype=np.int64, out: np.ndarray | None = None) -> np.ndarray:
        """This rank's blocks of the step at `step_start`, [global_batch // world, seq_len + 1]."""
        ids = self.rank_ids(step_start)
        if self.spec.remote is not None:
            self.fetch().advance(step_start, self._keys_at, self.spec.global_batch)
        return self.read(ids, dtype, out)

    def batch(self, step_start: int) -> tuple[torch.Tensor, torch.Tensor]:
        arr = torch.from_numpy(self.tokens(step_start))
        return arr[:, :-1], arr[:, 1:]


class Loader:
    """Yields (x, y) int64 [global_batch // world, seq_len] for this rank, forever (epochs roll)."""

    def __init__(self, shards_dir: str | Path, *, sources: Sequence[str], mix: Mapping[str, float], seed: int,
                 global_batch: int, rank: int = 0, world: int = 1, num_workers: int = 0, verify: str = "full",
                 log: Callable[[str], None] | None = None, shards_uri: str | None = None,
                 cache_dir: str | Path | None = None, cache_mb: float = 4096.0, prefetch: int = 2,
                 store: retry.Policy = retry.STORE):
        if global_batch % world:
            raise BadInput(f"loader.global_batch ({global_batch}) must be divisible by the world size ({world})")
        if verify not in ("full", "size"):
            raise BadInput(f"loader.verify: must be 'full' or 'size', got {verify!r}")
        if shards_uri and not cache_dir:
            raise BadInput("loader.cache_dir: required with loader.shards_uri (where streamed shards are cached)")
        remote = Remote(shards_uri, str(cache_dir), cache_mb, prefetch, store) if shards_uri else None
        self.spec = Spec(str(shards_dir), tuple(sources), tuple(mix.items()), seed, global_batch, rank, world, verify,
                         remote)
        self.reader = Reader(self.spec)
        self.num_workers, self.log = num_workers, log
        self.blocks_consumed = 0
        self.last_batch: str | None = None
        self.version = data_version(self.reader.sources)

    @classmethod
    def from_params(cls, params, layout: Layout, rank: int = 0, world: int = 1, log=None) -> "Loader":
        if params.mix is None:
            raise BadInput("mix: required to load data; give every source a weight in params.yaml")
        c = params.loader
        return cls(layout.shards, sources=[s.name for s in params.sources], mix=params.mix, seed=c.seed,
                   global_batch=c.global_batch, rank=rank, world=world, num_workers=c.num_workers,
                   verify=c.verify, log=log if c.debug_batch_hashes else None, shards_uri=c.shards_uri,
                   cache_dir=layout.under_root(c.cache_dir), cache_mb=c.cache_mb, prefetch=c.prefetch,
                   store=retry.of(params.store, "store"))

    @property
    def seq_len(self) -> int:
        return self.reader.width - 1

    def global_ids(self, step: int) -> np.ndarray:
        """Every rank's blocks of loader step `step` (counted from position 0): for debugging."""
        return self.reader.order.blocks(step * self.spec.global_batch, self.spec.global_batch)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = self.spec.global_batch
        if self.num_workers == 0:
            # lazy: each batch is read at the position reached when the consumer asks for it
            batches = ((*self.reader.batch(self.blocks_consumed), self.reader.hash_at(self.blocks_consumed))
                       for _ in itertools.count())
        else:  # the workers send each step's hash too: this process computes no order
            rows, width, dtype = self.spec.global_batch // self.spec.world, self.reader.width, self.reader.dtype
            batches = steps(Runs(functools.partial(Reader, self.spec), self.blocks_consumed, self.spec.global_batch,
                                 group_for(rows, width, dtype), self.num_workers, rows, width, dtype), self.num_workers)
        for x, y, self.last_batch in batches:  # the global batch's identity, logged per step
            if self.log:
                self.log(f"loader: step {self.blocks_consumed // g} batch {self.last_batch}")
            self.blocks_consumed += g
            yield x, y

    @property
    def batches_consumed(self) -> int:
        return self.blocks_consumed // self.spec.global_batch

    def skip(self, batches: int) -> None:
        """Move past `batches` global batches unread (a rollback's bad data); iterate anew after."""
        self.blocks_consumed += batches * self.spec.global_batch

    def state_dict(self) -> dict:
        return {"blocks_consumed": self.blocks_consumed,
                "global_batches_consumed": self.batches_consumed,
                "seed": self.spec.seed, "mix": dict(self.spec.mix), "seq_len": self.seq_len,
                "global_batch": self.spec.global_batch, "data_version": self.version}

    def load_state_dict(self, state: Mapping, allow_change: bool = False) -> list[str]:
        """Continue from `state`. Returns the invariants that changed (empty unless allowed)."""
        mine = self.state_dict()
        changed = [f"{k}: saved {state.get(k)!r}, now {mine[k]!r}" for k in
                   ("seed", "mix", "seq_len", "global_batch", "data_version") if state.get(k) != mine[k]]
        if changed and not allow_change:
            raise StateMismatch("loader state does not fit this run:\n  " + "\n  ".join(changed) +
                                "\nRestore the data/params it was saved with (e.g. 'git checkout' + 'dvc checkout'), "
                                "or set train.allow_data_change: true to continue at the same position "
                                "(the change is recorded in the lineage).")
        self.blocks_consumed = int(state["blocks_consumed"])
        return changed
    # (call load_state_dict before iterating: a running DataLoader's workers keep their start)
