"""The loader's DataLoader workers: runs of steps read into shared memory, handed out in order.

Contract:
- The steps go in runs of `group` consecutive ones; worker w of n reads runs w, w + n, ... and
  DataLoader hands the runs out in order, so the main process yields exactly the steps, in the
  order, that one in-process Reader would (the loader's global sequence is unchanged).
- A worker computes the order of its runs only, writes a run's blocks (the shards' dtype, uint16
  under 65536 ids) into a slot of its ring in shared memory and sends (worker, slot, the steps'
  batch hashes); the main process copies each step out as int64 (x, y), so what it yields is
  its own and a slot is free once its steps are yielded.
- A slot is not written again while the main process reads it: DataLoader (in order, as here)
  keeps at most PREFETCH x n runs asked for and not yet handed out, in worker order, so a
  worker has at most PREFETCH runs ahead of the one being read: PREFETCH + 1 slots.
- Errors in a worker (a ShardCorrupt, a fetch that failed) re-raise in the main process.

Why (bench/loader.py, 2 workers, 2 cores): a DataLoader item costs ~0.1-0.2 ms of IPC however
small, as much as an in-process step of 64 x 257; and an item holding tensors costs ~1 ms more
(a new shared-memory segment per tensor, its descriptor fetched over a socket); and each worker
computed the order of every step, as did the main process for the batch hash (the order is
about 40% of a step). One step per item, as int64 tensors, ran at 0.07x of in-process reads. A
run of GROUP_BYTES makes the item's cost a few percent, a ring of slots made once moves no
segment and pickles no tokens, and the order is computed once: 1.3-1.5x of in-process reads.
"""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import torch

GROUP_BYTES = 2**20  # tokens per run: IPC a few percent of the reads; PREFETCH + 1 MiB per worker
GROUP_STEPS = 64  # and steps per run at most: tiny steps cost their IPC less than the wait for a run
PREFETCH = 2  # DataLoader's prefetch_factor; the ring's slots follow from it


class Runs(torch.utils.data.IterableDataset):
    """Worker w yields (w, slot) for runs w, w + n, ...; `open_reader(workers, serves)` makes its
    Reader (`serves(step_start)`: whether this worker reads that step, for its prefetch)."""

    def __init__(self, open_reader: Callable, first_block: int, global_batch: int, group: int, workers: int,
                 rows: int, width: int, dtype: np.dtype):
        self.open_reader, self.first_block, self.g, self.group = open_reader, first_block, global_batch, group
        self.shape, self.dtype = (workers, PREFETCH + 1, group, rows, width), np.dtype(dtype)
        nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
        self.shared = torch.empty(nbytes, dtype=torch.uint8).share_memory_()  # made once, before the workers

    def ring(self, w: int) -> np.ndarray:
        return self.shared.numpy().view(self.dtype).reshape(self.shape)[w]

    def __iter__(self) -> Iterator[tuple[int, int, list[str]]]:
        info = torch.utils.data.get_worker_info()
        w, n = info.id, info.num_workers
        run = self.g * self.group
        reader = self.open_reader(workers=n, serves=lambda start: (start - self.first_block) // run % n == w)
        ring, k, start = self.ring(w), 0, self.first_block + w * run
        while True:
            slot = k % len(ring)
            reader.plan(start, self.group)
            for i in range(self.group):
                reader.tokens(start + i * self.g, self.dtype, out=ring[slot, i])
            yield w, slot, [reader.hash_at(start + i * self.g) for i in range(self.group)]
            k, start = k + 1, start + n * run


def _as_is(item):
    """DataLoader's collate_fn: (worker, slot, hashes) stays as it is (the default makes tensors)."""
    return item


def steps(runs: Runs, workers: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, str]]:
    """(x, y, batch hash), x and y int64, of each step of each run, in order, copied out of the ring."""
    for w, slot, hashes in torch.utils.data.DataLoader(runs, batch_size=None, num_workers=workers,
                                                       prefetch_factor=PREFETCH, collate_fn=_as_is):
        for blocks, h in zip(runs.ring(w)[slot], hashes):
            arr = torch.from_numpy(blocks.astype(np.int64))  # a copy: the slot is written again later
            yield arr[:, :-1], arr[:, 1:], h


def group_for(rows: int, width: int, dtype: np.dtype) -> int:
    """Steps per run: GROUP_BYTES of a step of `rows` blocks of `width` ids, 1 to GROUP_STEPS."""
    return max(1, min(GROUP_STEPS, GROUP_BYTES // (rows * width * np.dtype(dtype).itemsize)))
