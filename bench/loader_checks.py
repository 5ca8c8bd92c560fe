"""bench.loader's sanity checks, untimed: every batch an (x, y) pair shifted by one token, the
loader's tokens equal to the blocks `Order` names read independently from the shard files (at 0,
deep in a later epoch and after the timed steps), the worker path equal to the in-process one,
each source's first epoch a permutation of its blocks, and the mix within 1 block per source.
A failure is printed and kept in FAILURES: bench.loader exits 1 on any.
"""

from __future__ import annotations

import numpy as np
import torch

from bench.loader_shards import BATCH, SEQ_LEN
from shardline.stream.loader import Loader, Order, Source

FAILURES: list[str] = []


def fail(msg: str) -> None:
    FAILURES.append(msg)
    print(f"SANITY FAIL: {msg}")


def expected_batch(order: Order, maps: dict, sources: list[Source], pos: int) -> np.ndarray:
    ids = order.blocks(pos, BATCH)
    out = np.empty((BATCH, SEQ_LEN + 1), dtype=np.int64)
    for i, (s, sh, b) in enumerate(ids):
        key = (int(s), int(sh))
        if key not in maps:
            e = sources[key[0]].index["shards"][key[1]]
            maps[key] = np.memmap(sources[key[0]].dir / e["file"], dtype="<u2", mode="r").reshape(-1, SEQ_LEN + 1)
        out[i] = maps[key][int(b)]
    return out


def check_pair(x: torch.Tensor, y: torch.Tensor, what: str) -> None:
    if tuple(x.shape) != (BATCH, SEQ_LEN) or x.dtype != torch.int64 or not torch.equal(x[:, 1:], y[:, :-1]):
        fail(f"{what}: bad (x, y) pair: shape {tuple(x.shape)} dtype {x.dtype}")


def check_against_order(loader_batches, order, sources, start: int, what: str) -> None:
    maps: dict = {}
    for k, (x, y) in enumerate(loader_batches):
        check_pair(x, y, what)
        exp = torch.from_numpy(expected_batch(order, maps, sources, start + k * BATCH))
        if not (torch.equal(x, exp[:, :-1]) and torch.equal(y, exp[:, 1:])):
            fail(f"{what}: step {k} tokens differ from the blocks Order names at position {start + k * BATCH}")
            return


def check_order(order: Order, sources: list[Source], mix: dict[str, float]) -> None:
    total_w = sum(mix.values())
    # enough positions for every source to complete its first epoch
    m = max(int(s.blocks / (mix[s.name] / total_w)) + BATCH for s in sources)
    ids = order.blocks(0, m)
    for i, s in enumerate(sources):
        mine = ids[ids[:, 0] == i][: s.blocks]
        flat = s.starts[mine[:, 1]] + mine[:, 2]
        if len(mine) != s.blocks or not np.array_equal(np.sort(flat), np.arange(s.blocks)):
            fail(f"order: first epoch of {s.name} is not a permutation of its {s.blocks} blocks")
        c = int((ids[:, 0] == i).sum())
        if abs(c - mix[s.name] / total_w * m) >= 1:
            fail(f"mix: {s.name} has {c} of {m} positions, expected {mix[s.name] / total_w * m:.1f} +/- 1")


def check_positions(shards_dir, kw: dict, order: Order, sources: list[Source], deep: int) -> None:
    """8 batches at 0 and at `deep`, in-process (verify="full") and through 2 workers, against Order."""
    for pos in (0, deep):
        ld = Loader(shards_dir, **kw, verify="full")
        st = ld.state_dict()
        ld.load_state_dict({**st, "blocks_consumed": pos})
        it = iter(ld)
        check_against_order((next(it) for _ in range(8)), order, sources, pos, f"loader at {pos}")
        ld_w = Loader(shards_dir, **kw, num_workers=2)
        ld_w.load_state_dict({**st, "blocks_consumed": pos})
        itw = iter(ld_w)
        check_against_order((next(itw) for _ in range(8)), order, sources, pos, f"workers at {pos}")
        itw.close()
