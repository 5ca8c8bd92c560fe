"""bench.loader's timed parts: tokens/s of the loader (0 and 2 workers) and the raw memmap reads,
interleaved; a resume's cost (fresh Loader + state + first batch) at 0 and deep in a later epoch;
where a step goes; the order's cost and Feistel passes by position; the order's memory on 1e6
and 1e9 virtual blocks (bench/loader.py's docstring says how each is judged; `python -m
bench.loader` runs it).
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from pathlib import Path

import psutil

from bench.loader_checks import check_against_order, check_pair, fail
from bench.loader_shards import BATCH, SEED, SEQ_LEN, RawOneMap, RawPerShard
from shardline.stream import permute
from shardline.stream.loader import Loader, Order, Source


def timed_steps(next_batch, steps: int, min_s: float) -> tuple[float, int, int]:
    """Run `steps` steps at a time until at least `min_s` seconds passed: (seconds, tokens, steps)."""
    tokens = done = 0
    t0 = time.perf_counter()
    while True:
        for _ in range(steps):
            x, _y = next_batch()
            tokens += x.numel()
        done += steps
        dt = time.perf_counter() - t0
        if dt >= min_s:
            return dt, tokens, done


class PassCounter:
    """Counts Feistel passes (Permutation._rounds calls, cycle-walking included); diagnostic only."""

    def __init__(self):
        self.n = 0

    def __enter__(self):
        self.orig = permute.Permutation._rounds
        counter = self

        def counting(perm, x):
            counter.n += 1
            return counter.orig(perm, x)
        permute.Permutation._rounds = counting
        return self

    def __exit__(self, *exc):
        permute.Permutation._rounds = self.orig


def order_cost(order: Order, pos: int, count: int = BATCH, reps: int = 30) -> tuple[float, int]:
    """Median seconds of order.blocks(pos, count) and its Feistel passes."""
    with PassCounter() as c:
        order.blocks(pos, count)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        order.blocks(pos, count)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), c.n


def fake_sources(total: int, mix: dict[str, float], shards: int = 16) -> list[Source]:
    out = []
    names = list(mix)
    per = [total * 7 // 10, total - total * 7 // 10]
    for name, n in zip(names, per):
        counts = [n // shards + (i < n % shards) for i in range(shards)]
        index = {"seq_len": SEQ_LEN, "dtype": "uint16", "tokenizer_sha256": "x",
                 "shards": [{"file": f"shard-{i:05d}.bin", "blocks": c, "bytes": 0, "sha256": "x"}
                            for i, c in enumerate(counts)]}
        out.append(Source(name, Path("/nonexistent") / name, index))
    return out


def order_memory(total: int, calls: int = 6, count: int = 4096) -> dict:
    mix = {"a": 0.7, "b": 0.3}
    order = Order(fake_sources(total, mix), mix, SEED)
    starts = ([0, count] + [total - count * (i + 1) for i in range(calls // 3)]
              + [int(3.5 * total) + count * i for i in range(calls - 2 - calls // 3)])
    proc = psutil.Process()
    gc.collect()
    rss0 = proc.memory_info().rss
    tracemalloc.start()
    peaks, times = [], []
    for st in starts:
        gc.collect()
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        t0 = time.perf_counter()
        ids = order.blocks(st, count)
        times.append(time.perf_counter() - t0)
        peaks.append(tracemalloc.get_traced_memory()[1] - base)
        del ids
    tracemalloc.stop()
    rss1 = proc.memory_info().rss
    return {"peak": max(peaks), "peaks": peaks, "rss": rss1 - rss0, "ms": statistics.median(times) * 1e3}


def throughput(shards_dir: Path, kw: dict, order: Order, sources: list[Source], root: Path, repeats: int,
               steps: int, min_s: float) -> dict:
    """(a), (b), (b1) and (c), interleaved, `repeats` runs each of >= `steps` steps and >= `min_s`
    seconds; then the consumed streams checked against Order. Returns the rates and ratios, and
    (a)'s loader, its iterator and (b) for the parts timed after."""
    loader = Loader(shards_dir, **kw, num_workers=0, verify="full")
    it_a = iter(loader)
    n_shards = sum(len(s.counts) for s in sources)
    warm = 0
    while len(loader.reader.maps) < n_shards or warm < 20:  # every shard verified once, then a few more
        next(it_a)
        warm += 1
    loader_w = Loader(shards_dir, **kw, num_workers=2, verify="full")
    it_c = iter(loader_w)
    for _ in range(3 * warm):
        next(it_c)
    raw = RawPerShard(sources)
    raw1 = RawOneMap(sources, root / "all-shards.bin")
    for f in (raw.batch, raw1.batch):
        for _ in range(20):
            check_pair(*f(), "raw")
    methods = {
        "(a) Loader, 0 workers": lambda: next(it_a),
        "(b) raw memmap per shard": raw.batch,
        "(b1) raw one memmap": raw1.batch,
        "(c) Loader, 2 workers": lambda: next(it_c),
    }
    rates: dict[str, list[float]] = {m: [] for m in methods}
    steps_run: dict[str, list[int]] = {m: [] for m in methods}
    ratio_ab: list[float] = []
    ratio_ca: list[float] = []  # workers vs in-process, same repeat
    for _ in range(repeats):
        for name, fn in methods.items():
            gc.collect()
            dt, tokens, done = timed_steps(fn, steps, min_s)
            if tokens != done * BATCH * SEQ_LEN:
                fail(f"{name}: {tokens} tokens in {done} steps, expected {done * BATCH * SEQ_LEN}")
            steps_run[name].append(done)
            rates[name].append(tokens / dt)
        ratio_ab.append(rates["(a) Loader, 0 workers"][-1] / rates["(b) raw memmap per shard"][-1])
        ratio_ca.append(rates["(c) Loader, 2 workers"][-1] / rates["(a) Loader, 0 workers"][-1])
    # the consumed stream is still exact after all the timed steps
    pos_a = loader.blocks_consumed
    check_against_order((next(it_a) for _ in range(4)), order, sources, pos_a, "loader after timing")
    check_against_order((next(it_c) for _ in range(4)), order, sources, loader_w.blocks_consumed,
                        "workers after timing")  # their shared slots were reused many times by now
    it_c.close()
    return {"rates": rates, "steps_run": steps_run, "ratio_ab": ratio_ab, "ratio_ca": ratio_ca,
            "loader": loader, "it_a": it_a, "raw": raw}


def resume_cost(shards_dir: Path, kw: dict, deep: int, repeats: int) -> tuple[dict, dict]:
    """Per (verify, position): each repeat's best of 3 resumes, and the shards the first batch touched."""
    resume: dict[tuple[str, int], list[float]] = {(v, p): [] for v in ("size", "full") for p in (0, deep)}
    touched: dict[tuple[str, int], int] = {}
    for _ in range(repeats):
        for key, times in resume.items():
            v, p = key
            best = float("inf")  # best of 3: a few milliseconds are one scheduler hiccup from 1.5x
            for _ in range(3):
                gc.collect()
                t0 = time.perf_counter()
                ld = Loader(shards_dir, **kw, verify=v)
                ld.load_state_dict({**ld.state_dict(), "blocks_consumed": p})
                x, y = next(iter(ld))
                best = min(best, time.perf_counter() - t0)
            times.append(best)
            touched[key] = len(ld.reader.maps)
            check_pair(x, y, f"resume {key}")
    return resume, touched


def step_split(loader: Loader, raw: RawPerShard, repeats: int) -> dict[str, list[float]]:
    """Where a loader step goes, interleaved: seconds per step of each part, per repeat."""
    reader = loader.reader
    split: dict[str, list[float]] = {k: [] for k in (
        "Order.blocks, 1 step per call", "Order.blocks, 64 steps per call", "Reader.read(ids)", "(b) raw batch")}
    k, base = 64, loader.blocks_consumed
    for r in range(repeats):
        p0 = base + r * k * BATCH
        ids = [reader.order.blocks(p0 + i * BATCH, BATCH) for i in range(k)]
        for name, times in split.items():
            t0 = time.perf_counter()
            if name.startswith("Order.blocks, 1"):
                for i in range(k):
                    reader.order.blocks(p0 + i * BATCH, BATCH)
            elif name.startswith("Order.blocks, 64"):
                reader.order.blocks(p0, k * BATCH)
            elif name.startswith("Reader"):
                for i in range(k):
                    reader.read(ids[i])
            else:
                for i in range(k):
                    raw.batch()
            times.append((time.perf_counter() - t0) / k)
    return split
