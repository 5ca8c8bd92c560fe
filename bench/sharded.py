"""Sharded vs full checkpoints under FSDP: peak memory and save time per rank.

    python -m bench.sharded [--repeats 3] [--layers 24] [--d-model 1024] [--nproc 2]

Two torchrun processes on gloo/CPU hold a GPT (24 layers, d_model 1024, vocab 50304: ~355 M
parameters, ~4.3 GB of fp32 model + AdamW state) sharded by FSDP2, its AdamW state filled by one
step. Each repeat saves it through the trainer's own checkpointer (shardline.training.checkpointer)
once as `full` (rank 0 gathers everything and writes model.pt/optimizer.pt) and once as
`sharded` (every rank writes its shards through DCP), in alternating order, each save in a
torchrun job of its own (a process that saved before keeps freed memory mapped, which would hide
the next save's peak). Per rank and save:
the peak resident memory while saving above what the rank held before (Linux's VmHWM, reset
through /proc/self/clear_refs just before), the time training is blocked (the copy), and the
time until the checkpoint is valid (manifest written, every rank done).
Target: during a sharded save no rank's peak grows by as much as the full optimizer state
(exp_avg + exp_avg_sq of every parameter): no rank materialises it.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.measure import med_range, reset_peak, status_kb
from bench.verdict import in_order

WORKER = "BENCH_SHARDED_WORKER"


def worker(args: argparse.Namespace) -> None:
    import torch

    from shardline.core.config import Train
    from shardline.training.dist import Dist
    from shardline.model import ModelConfig, build
    from shardline.training.optimizer import configure_optimizer
    from harness.projects import lineage_of
    from shardline.training import checkpoint
    from shardline.training.checkpointer import Checkpointer
    from shardline.training.state import ModelState, OptimizerState, TrainState

    torch.set_num_threads(1)
    cfg = Train.model_validate({"strategy": "fsdp", "nproc_per_node": args.nproc, "dist_timeout_s": 1800})
    dist = Dist(cfg, torch.device("cpu"), log=lambda _: None)
    torch.manual_seed(0)
    model = build(ModelConfig("gpt2", vocab_size=50304, seq_len=1024, n_layer=args.layers, n_head=16,
                              d_model=args.d_model, dropout=0.0))
    n_params = model.num_params()
    dist.wrap(model, model.blocks)
    opt = configure_optimizer(model, lr=1e-4, weight_decay=0.1, betas=(0.9, 0.95), device_type="cpu")
    for p in model.parameters():
        p.grad = torch.full_like(p, 1e-3)
    opt.step()
    opt.zero_grad(set_to_none=True)
    root, fmt = Path(args.dir), args.format
    saving = Checkpointer(cfg.model_copy(update={"checkpoint_format": fmt}), dist, root, {
        "model": ModelState(model, dist), "optimizer": OptimizerState(model, opt, dist), "train": TrainState(step=1)},
        lineage_of(root))  # a real lineage, made before the measured save
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # memory freed so far (the gradients) leaves the baseline
    dist.barrier()
    base = status_kb("VmRSS") * 1024
    reset_peak()
    t0 = time.perf_counter()
    saving.save(1, None, then=lambda _: None)
    blocked = time.perf_counter() - t0
    saving.wait()
    dist.barrier()  # valid: the manifest is on disk and every rank is done
    took = time.perf_counter() - t0
    peak = status_kb("VmHWM") * 1024
    manifest = checkpoint.read_manifest(root / "step-000000001")
    ranks = manifest.ranks or [list(manifest.files)] + [[] for _ in range(dist.world - 1)]
    rows = [{"format": fmt, "rank": dist.rank, "peak_b": peak - base, "hwm_b": peak, "base_b": base,
             "blocked_s": blocked, "valid_s": took, "written_b": sum(manifest.files[n].bytes
                                                                     for n in ranks[dist.rank])}]
    gathered = [None] * dist.world
    torch.distributed.all_gather_object(gathered, rows)
    if dist.rank == 0:
        Path(args.out).write_text(json.dumps({"params": n_params, "rows": [r for g in gathered for r in g]}))
    del model, opt
    dist.close()


def _med(xs: list[float]) -> str:
    return med_range(xs, ".2f", width=6)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--nproc", type=int, default=2)
    if WORKER in os.environ:
        worker(argparse.Namespace(**json.loads(os.environ[WORKER])))
        return 0
    args = ap.parse_args()
    rows, t0 = [], time.perf_counter()
    for rep in range(args.repeats):  # one job per save: each starts from a fresh process's memory
        for fmt in in_order(("full", "sharded"), rep):
            with tempfile.TemporaryDirectory(prefix="bench-sharded-", dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
                out = Path(tmp, "result.json")
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                       f"--nproc_per_node={args.nproc}", "--max-restarts=0", "-m", "bench.sharded"]
                job = {"dir": str(Path(tmp, "ckpt")), "out": str(out), "format": fmt, "layers": args.layers,
                       "d_model": args.d_model, "nproc": args.nproc}  # in the env: torchrun parses argv
                subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1", WORKER: json.dumps(job)})
                result = json.loads(out.read_text())
                rows += result["rows"]
    n = result["params"]
    opt_state = 2 * 4 * n  # exp_avg + exp_avg_sq, fp32
    print(f"GPT {args.layers} layers x d_model {args.d_model}: {n / 1e6:.0f} M parameters; full model + AdamW state "
          f"{3 * 4 * n / 1e9:.2f} GB; {args.nproc} ranks (FSDP2, gloo, CPU), {args.repeats} interleaved repeats "
          f"({time.perf_counter() - t0:.0f} s in all)\n")
    print("per rank, median (min - max)   peak RSS above before (GB)   peak RSS (GB)          blocked (s)"
          "            valid after (s)        wrote (GB)")
    peaks = {}
    for fmt in ("full", "sharded"):
        for rank in range(args.nproc):
            rs = [r for r in rows if r["format"] == fmt and r["rank"] == rank]
            peaks[fmt, rank] = statistics.median(r["peak_b"] for r in rs)
            print(f"  {fmt:8s} rank {rank}           {_med([r['peak_b'] / 1e9 for r in rs])}      "
                  f"{_med([r['hwm_b'] / 1e9 for r in rs])}   "
                  f"{_med([r['blocked_s'] for r in rs])}   {_med([r['valid_s'] for r in rs])}   "
                  f"{rs[0]['written_b'] / 1e9:.2f}")
    worst = max(r["peak_b"] for r in rows if r["format"] == "sharded")
    valid = {f: statistics.median(r["valid_s"] for r in rows if r["format"] == f and r["rank"] == 0)
             for f in ("full", "sharded")}
    ok = worst < opt_state
    print(f"\n  ratio sharded/full, rank 0 peak: {peaks['sharded', 0] / peaks['full', 0]:.2f}x; "
          f"time to a valid checkpoint: {valid['sharded'] / valid['full']:.2f}x")
    print(f"  sharded: the largest peak on any rank {worst / 1e9:.2f} GB vs the full optimizer state "
          f"{opt_state / 1e9:.2f} GB (target: below it) {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
