"""Streaming shards from S3 vs reading them from local disk: loader tokens/s, cache cold and warm.

    python -m bench.stream [--repeats 3] [--steps 600] [--prefetch 4] [--cache-mb 4096]

Builds real shards once through the engine stages (bench.loader_shards.build_shards: the Python stdlib
plus the shared corpora when present; seq_len 256, ~1 MB shards), starts a moto S3 server on
127.0.0.1 (harness.s3.moto_s3: real HTTP, dummy credentials from the environment), uploads
data/shards to it, then runs, interleaved (each repeat runs every method once, in turn, so
machine noise hits all alike), a fresh Loader (global batch 64, num_workers 0, verify full) for
--steps steps from position 0:

  local       the shards on local disk (each shard sha256-verified before its first use);
  s3 cold     loader.shards_uri on the moto bucket, an empty cache dir: every shard is fetched,
              hashed on arrival and renamed into the cache while the loader runs;
  s3 warm     the same, with the cache the cold run left: every shard is a cache hit,
              sha256-verified before first use like a local shard.

Reported: tokens/s (x.numel() per second, loader construction included: that is when a cold
start pays), median and min-max over the repeats, the same-run ratio to local, and the
fetcher's counters (fetched, hits, evicted, blocked waits and their seconds). The batch hashes
of every method must equal local's (exit 1 otherwise). moto runs on this machine, so "s3" here
is the protocol and client cost (HTTP, s3fs, hashing, fsync), not a WAN: read ratios, not times.

`run(...)` returns the figures as a dict for bench.scale.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from bench.loader_shards import BATCH, SEED, build_shards
from shardline.stream.loader import Loader
from harness.s3 import moto_s3, upload_dir

BUCKET = "shardline-bench"
METHODS = ("local", "s3 cold", "s3 warm")
KINDS = ("total", "steady", "first_s")  # tokens/s from construction; tokens/s after batch 1; s to batch 1


@contextlib.contextmanager
def _environ(extra: dict[str, str]):
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _timed(make: Callable[[], Loader], steps: int) -> tuple[dict[str, float], list[str], Loader]:
    """A fresh loader over `steps` steps: seconds to its first batch (construction included),
    tokens/s over all steps (from construction) and over the steps after the first; batch hashes."""
    gc.collect()
    t0 = time.perf_counter()
    ld = make()
    tokens, hashes, t1 = 0, [], 0.0
    for x, _y in itertools.islice(ld, steps):
        tokens += x.numel()
        hashes.append(ld.last_batch)
        t1 = t1 or time.perf_counter()
    t2 = time.perf_counter()
    first = tokens // steps
    return {"first_s": t1 - t0, "total": tokens / (t2 - t0), "steady": (tokens - first) / (t2 - t1)}, hashes, ld


def run(shards_dir: str | Path | None = None, names: list[str] | None = None, mix: dict[str, float] | None = None,
        *, repeats: int = 3, steps: int = 600, prefetch: int = 4, cache_mb: float = 4096.0,
        log: Callable[[str], None] = print) -> dict:
    """Measure local vs S3 (cold, warm) loader throughput. Builds shards when `shards_dir` is None.
    Returns {"tokens_per_s": {method: [per repeat]}, "median": {...}, "ratio": {method: median/local},
    "stats": {method: fetcher counters of the last repeat}, "identical": bool, "shards": n, "bytes": n}."""
    tmp = tempfile.TemporaryDirectory(prefix="bench-stream-")
    work = Path(tmp.name)
    if shards_dir is None:
        shards_dir, names, mix = build_shards(work / "build")
    shards_dir = Path(shards_dir)
    names = names or sorted(p.name for p in shards_dir.iterdir() if (p / "index.json").exists())
    mix = mix or {n: 1.0 for n in names}
    files = sorted(shards_dir.rglob("shard-*.bin"))
    size = sum(p.stat().st_size for p in files)
    kw = {"sources": names, "mix": mix, "seed": SEED, "global_batch": BATCH}
    rates: dict[str, dict[str, list[float]]] = {k: {m: [] for m in METHODS} for k in KINDS}
    stats: dict[str, dict] = {}
    identical = True
    with moto_s3(BUCKET) as env, _environ({k: v for k, v in env.items() if k.startswith("AWS_")}):
        t0 = time.perf_counter()
        upload_dir(env, shards_dir, BUCKET, "data/shards")
        log(f"uploaded {len(files)} shards ({size / 2**20:.1f} MiB) to a moto S3 server in "
            f"{time.perf_counter() - t0:.1f}s; {steps} steps of {BATCH} x {Loader(shards_dir, **kw).seq_len} tokens "
            f"per run, {repeats} interleaved repeats")
        uri, cache = f"s3://{BUCKET}/data/shards", work / "cache"
        makers = {
            "local": lambda: Loader(shards_dir, **kw),
            "s3 cold": lambda: Loader(shards_dir, **kw, shards_uri=uri, cache_dir=cache, cache_mb=cache_mb,
                                      prefetch=prefetch),
            "s3 warm": lambda: Loader(shards_dir, **kw, shards_uri=uri, cache_dir=cache, cache_mb=cache_mb,
                                      prefetch=prefetch),
        }
        reference = None
        for _ in range(repeats):
            shutil.rmtree(cache, ignore_errors=True)  # cold means an empty cache; warm reuses what cold left
            for method, make in makers.items():
                got, hashes, ld = _timed(make, steps)
                for k in KINDS:
                    rates[k][method].append(got[k])
                reference = reference or hashes
                identical &= hashes == reference
                f = ld.reader.fetcher
                if f is not None:
                    stats[method] = {**vars(f.stats)}
                    f.close()
    tmp.cleanup()
    med = {k: {m: statistics.median(v) for m, v in r.items()} for k, r in rates.items()}
    return {"runs": rates, "median": med, "ratio": {k: {m: v[m] / v["local"] for m in METHODS} for k, v in med.items()},
            "stats": stats, "identical": identical, "shards": len(files), "bytes": size, "steps": steps}


def report(res: dict, log: Callable[[str], None] = print) -> None:
    med, r = res["median"], res["ratio"]
    log(f"\n{res['steps']} steps per run; median of {len(res['runs']['total']['local'])} (min - max); "
        f"x = same-run ratio of medians to local")
    log(f"{'method':9} {'tokens/s incl. start':>30} {'tokens/s after batch 1':>30} {'first batch':>24}"
        f"   fetched hits evicted waits")
    for m in METHODS:
        cells = []
        for k in KINDS:
            v, scale, unit = res["runs"][k][m], (1e3 if k == "first_s" else 1e-6), ("ms" if k == "first_s" else "M")
            cells.append(f"{med[k][m] * scale:7.1f}{unit} ({min(v) * scale:.1f}-{max(v) * scale:.1f}) {r[k][m]:5.2f}x")
        st = res["stats"].get(m)
        counters = f"{st['fetched']:7} {st['hits']:4} {st['evicted']:7} {st['waits']:5}" if st else ""
        log(f"{m:9} {cells[0]:>30} {cells[1]:>30} {cells[2]:>24}   {counters}")
    log(f"  ratio tokens/s vs local, incl. start: cold {r['total']['s3 cold']:.2f}x, warm {r['total']['s3 warm']:.2f}x;"
        f" after batch 1: cold {r['steady']['s3 cold']:.2f}x, warm {r['steady']['s3 warm']:.2f}x"
        f"   ({res['shards']} shards, {res['bytes'] / 2**20:.1f} MiB)")
    log(f"  identical: {'yes' if res['identical'] else 'NO'} (batch hashes of every run equal local's)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--prefetch", type=int, default=4)
    ap.add_argument("--cache-mb", type=float, default=4096.0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    res = run(repeats=args.repeats, steps=args.steps, prefetch=args.prefetch, cache_mb=args.cache_mb)
    report(res)
    return 0 if res["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
