"""bench.train's section 2: what the trainer's checkpoint branch blocks training for
(`AsyncSaver.submit`) against the two fair ways to block as little (a snapshot handed to a thread
that runs torch.save, and DCP's async_save), with a synchronous torch.save and checkpoint.save
beside them for information, and where a save's time goes (bench/train.py's docstring says how it
is measured and judged; `python -m bench.train` runs it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import threading
import time
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict

from bench.train_loop import fmt
from bench.verdict import abba, in_order
from shardline.core import fsio
from shardline.training import checkpoint, checkpointer, lineage, rng, storage


def bare_save(path: Path, objs: dict) -> None:
    with open(path, "wb") as f:
        torch.save(objs, f)
        f.flush()
        os.fsync(f.fileno())
    fsio.fsync_dir(path.parent)


@contextlib.contextmanager
def timed_calls(targets: list[tuple[object, str, str]]):
    """Wrap owner.attr for each (owner, attr, bucket) to add its wall time to acc[bucket]; restored
    on exit. Plain timers, not cProfile: the profiler's per-call cost inflates pure-Python code
    (json's indent encoder) several times over and would misname the cause."""
    acc: dict[str, float] = {b: 0.0 for _, _, b in targets}
    saved = []
    for owner, attr, bucket in targets:
        orig = getattr(owner, attr)

        def wrapper(*a, _orig=orig, _bucket=bucket, **k):
            t0 = time.perf_counter()
            try:
                return _orig(*a, **k)
            finally:
                acc[_bucket] += time.perf_counter() - t0
        setattr(owner, attr, wrapper)
        saved.append((owner, attr, orig))
    try:
        yield acc
    finally:
        for owner, attr, orig in reversed(saved):
            setattr(owner, attr, orig)


SAVE_PARTS = [(torch, "save", "torch.save (serialize; bare: + write to file)"),
              (fsio, "sha256_bytes", "sha256 of every file's bytes"),
              (json, "dumps", "json.dumps (train_state, manifest + lineage)"),
              (checkpoint, "versions", "versions() (library versions)"),
              (os, "fsync", "os.fsync (files and dirs)")]


def save_breakdown(fns: dict, reps: int, clean_up) -> dict[str, dict[str, float]]:
    """Median seconds per part of each save function, interleaved; the rest is 'other' (file
    write() of the serialized bytes, mkdir, open, rename)."""
    parts: dict[str, dict[str, list[float]]] = {name: {} for name in fns}
    for r in range(reps):
        for name, fn in in_order(fns.items(), r):
            with timed_calls(SAVE_PARTS) as acc:
                t0 = time.perf_counter()
                fn(200 + r)
                total = time.perf_counter() - t0
            for k, v in {**acc, "other: write() of the bytes, mkdir, open, rename": total - sum(acc.values()),
                         "total": total}.items():
                parts[name].setdefault(k, []).append(v)
        clean_up()
    return {name: {k: statistics.median(v) for k, v in d.items()} for name, d in parts.items()}


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def checkpoint_block(res: dict, layout, root: Path, steps: int, repeats: int) -> dict:
    """Section 2 on the newest bare run of section 1's `res` (its model and optimizer, Adam moments
    after `steps` steps): `repeats` interleaved rounds, each way's best of 5 calls. Returns the
    times per way ("ck"), the sizes, the breakdown, and `save`/`clean_up` for a profile later."""
    params, loader, cfg, bare = res["params"], res["loader"], res["params"].train, res["B"][-1]
    tokens_per_step = res["batches"][0][0].numel()
    model, opt = bare["model"], bare["opt"]
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    lin = lineage.collect(params, layout, loader.version)
    state = {"step": steps, "tokens_seen": steps * tokens_per_step, "loader": loader.state_dict(),
             "grad_accum": cfg.grad_accum, "world_size": 1}
    tensors = {"model.pt": model.state_dict(), "optimizer.pt": opt.state_dict(),
               "scaler.pt": scaler.state_dict(), "rng.pt": rng.capture()}
    bare_objs = {**tensors, "train_state": state, "lineage": lin.to_json()}  # the baseline saves plain JSON
    ck_root, bare_dir, block_root = root / "ckpt-save", root / "ckpt-bare", root / "ckpt-block"
    bare_dir.mkdir()

    def do_save(i):
        return checkpoint.save(ck_root, i, tensors, state, lin)

    def do_bare(i):
        bare_save(bare_dir / f"step-{i:09d}.pt", bare_objs)

    threads: list = []

    def do_thread(i):  # fair baseline (i): a snapshot, then torch.save + fsyncs on a thread
        snap = {**checkpointer.snapshot({"model.pt": model.state_dict(), "optimizer.pt": opt.state_dict(),
                                         "scaler.pt": scaler.state_dict(), "rng.pt": rng.capture()}),
                "train_state": json.loads(json.dumps(state)), "lineage": lin.to_json()}
        t = threading.Thread(target=bare_save, args=(bare_dir / f"thread-{i:09d}.pt", snap))
        t.start()
        threads.append(t)

    futures: list = []

    def do_dcp(i):  # fair baseline (ii): DCP's async_save (stages a CPU copy, writes on a thread)
        msd, osd = get_state_dict(model, opt)
        futures.append(dcp.async_save({"model": msd, "optim": osd}, checkpoint_id=str(bare_dir / f"dcp-{i:09d}"),
                                      no_dist=True))

    def settle():  # outside the timing: no background write may overlap the next measurement
        saver.wait()
        while threads:
            threads.pop().join()
        while futures:
            futures.pop().result()

    saver = checkpointer.AsyncSaver()

    def do_block(i):  # what the trainer's checkpoint branch blocks for: a snapshot, then a background write
        st = {**state, "loader": loader.state_dict()}
        saver.submit(storage.Local(block_root), i, {"model.pt": model.state_dict(), "optimizer.pt": opt.state_dict(),
                                     "scaler.pt": scaler.state_dict(), "rng.pt": rng.capture()}, st, lin,
                     then=lambda _: checkpoint.retain(block_root, cfg.keep_last, 0, log=lambda _: None))

    def clean_up():
        shutil.rmtree(ck_root, ignore_errors=True)
        for p in bare_dir.iterdir():
            shutil.rmtree(p) if p.is_dir() else p.unlink()

    do_bare(1)
    sizes = {"save": du(do_save(1)), "bare": du(bare_dir / f"step-{1:09d}.pt")}
    clean_up()
    for i in (1, 2):  # warm-up; leaves keep_last=2 older checkpoints for the block's retain
        do_block(i)
        saver.wait()
    fns = {"trainer block (AsyncSaver.submit)": do_block, "snapshot + torch.save on a thread": do_thread,
           "DCP async_save": do_dcp, "bare torch.save + fsyncs (sync, info)": do_bare,
           "checkpoint.save (sync, info)": do_save}
    ck = {name: [] for name in fns}
    for r in range(repeats):
        for name in in_order(fns, r):
            best = float("inf")  # a repeat is the best of 5 calls: a millisecond block is one scheduler hiccup from 5x
            for k in range(5):
                t0 = time.perf_counter()
                fns[name](10 * (3 + r) + k)
                best = min(best, time.perf_counter() - t0)
                settle()
            ck[name].append(best)
        clean_up()
    breakdown = save_breakdown({"checkpoint.save": do_save, "bare torch.save": do_bare}, 5, clean_up)
    return {"ck": ck, "sizes": sizes, "breakdown": breakdown, "save": do_save, "clean_up": clean_up}


def report_checkpoint(res: dict) -> list[float]:
    """Print section 2; returns its ABBA pairs of trainer block / the faster fair baseline."""
    ck, sizes, breakdown = res["ck"], res["sizes"], res["breakdown"]
    print(f"\n2. checkpoint blocking time (llama), median of {len(ck['DCP async_save'])} interleaved saves "
          f"(min - max); sizes: save dir {sizes['save']:,} B, bare file {sizes['bare']:,} B")
    for name, xs in ck.items():
        print(f"  {name:44} {fmt(xs, 1e3, ' ms', 1)}")
    ck_pairs = [s / min(t, d) for s, t, d in zip(ck["trainer block (AsyncSaver.submit)"],
                                                ck["snapshot + torch.save on a thread"], ck["DCP async_save"])]
    print(f"  same-repeat ratio trainer block / the faster fair baseline: {', '.join(f'{x:.2f}' for x in ck_pairs)}")
    ck_pairs = abba(ck_pairs)
    print(f"  ABBA pairs (geometric mean of each pair of opposite orders): {', '.join(f'{x:.2f}' for x in ck_pairs)}")
    print("  where a save's time goes (timers around the calls, median of 5 interleaved saves each):")
    print(f"    {'':52}" + "".join(f"{k:>18}" for k in breakdown))
    for part in next(iter(breakdown.values())):
        print(f"    {part:52}" + "".join(f"{d[part] * 1e3:15.1f} ms" for d in breakdown.values()))
    return ck_pairs
