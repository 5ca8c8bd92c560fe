"""bench.train's sections 5 and 6, for information: what document attention costs on CPU against
causal, and what activation checkpointing (none / selective / full) saves of a step's peak memory
and costs in step time, each mode in a fresh process (bench/train.py's docstring says how it is
measured; `python -m bench.train` runs it, and `--ac-probe MODE` is that fresh process).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import torch

from bench.measure import reset_peak, status_kb
from bench.train_loop import GLOBAL_BATCH, REPO, bare_run, fmt, make_params, model_config
from bench.verdict import in_order
from shardline.core import config
from shardline.core.layout import Layout
from shardline.model import build as build_model
from shardline.stream.loader import Loader
from shardline.training import rng
from shardline.training.optimizer import configure_optimizer

AC_MODEL = {"arch": "llama", "n_layer": 4, "n_head": 8, "n_kv_head": 4, "d_model": 256, "dropout": 0.0}


def attention_cost(params: config.Params, layout: Layout, batches: list, reps: int) -> dict[str, list[float]]:
    """tokens/s of the bare llama loop with document attention and with causal, interleaved."""
    seq_len = batches[0][0].shape[1]
    cfgs = {a: model_config(make_params(len(batches), attention=a), layout, seq_len) for a in ("causal", "document")}
    out: dict[str, list[float]] = {"causal": [], "document": []}
    for r in range(reps):
        for a in in_order(("causal", "document"), r):
            out[a].append(bare_run(params, cfgs[a], batches)["tps"])
    return out


def ac_probe(root: str, mode: str, steps: int) -> None:
    """In a fresh process (`--ac-probe`): what one training step of AC_MODEL adds to peak RSS under
    `mode`, and its step time. Prints one JSON line. The memory figure needs glibc to return freed
    memory at once (MALLOC_MMAP_THRESHOLD_, set by `ac_cost` for its memory probes): with its default,
    a freed tensor's pages stay in the heap and the next step's peak hides inside them."""
    from shardline.training.network import prepare

    torch.use_deterministic_algorithms(True)
    layout = Layout.at(root)
    params = make_params(steps, model=AC_MODEL, activation_checkpointing=mode)
    it = iter(Loader.from_params(params, layout))
    batches = [next(it) for _ in range(steps + 1)]
    rng.seed_all(params.train.seed)
    model = build_model(model_config(params, layout, batches[0][0].shape[1]))
    prepare(model, params.train)
    opt = configure_optimizer(model, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), device_type="cpu")
    times, peaks = [], []
    for i, (x, y) in enumerate(batches):
        settled = status_kb("VmRSS")
        reset_peak()
        t0 = time.perf_counter()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i:  # the first step allocates the optimizer's moments: a warm-up
            times.append(time.perf_counter() - t0)
            peaks.append((status_kb("VmHWM") - settled) * 1024)
    print(json.dumps({"mode": mode, "peak_bytes": statistics.median(peaks), "step_s": statistics.median(times)}))


def ac_cost(layout: Layout, reps: int) -> dict[str, list[dict]]:
    """Per mode and repeat: peak bytes from a probe where every large block is mmapped (freed = returned),
    step time from a probe with glibc's defaults (the allocator training really runs with)."""
    out: dict[str, list[dict]] = {m: [] for m in ("none", "selective", "full")}

    def probe(mode: str, steps: int, env: dict) -> dict:
        cmd = [sys.executable, "-m", "bench.train", "--ac-probe", mode, "--root", str(layout.root), "--steps", str(steps)]
        res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True, env={**os.environ, **env})
        return json.loads(res.stdout.strip().splitlines()[-1])

    for r in range(reps):
        for mode in in_order(out, r):
            mem = probe(mode, 1, {"MALLOC_MMAP_THRESHOLD_": "65536"})
            out[mode].append({"peak_bytes": mem["peak_bytes"], "step_s": probe(mode, 3, {})["step_s"]})
    return out


def report_model(attn: dict[str, list[float]], ac: dict[str, list[dict]], repeats: int) -> list[float]:
    """Print sections 5 and 6; returns the same-repeat ratios of document to causal tokens/s."""
    doc = [d / c for d, c in zip(attn["document"], attn["causal"])]
    print(f"\n5. document attention on CPU (bare llama loop, SDPA boolean mask vs is_causal), {repeats} "
          "interleaved repeats:")
    print(f"  {'causal':44} {fmt(attn['causal'])} tok/s")
    print(f"  {'document':44} {fmt(attn['document'])} tok/s")
    print(f"  same-repeat ratio document/causal: {', '.join(f'{x:.3f}' for x in doc)}  (median "
          f"{statistics.median(doc):.3f})")

    print(f"\n6. activation checkpointing: llama {AC_MODEL['n_layer']} layers x d_model {AC_MODEL['d_model']}, "
          f"batch {GLOBAL_BATCH} x 256, a fresh process per mode, median of {len(ac['none'])} interleaved repeats:")
    base_mem, base_t = (statistics.median(r[k] for r in ac["none"]) for k in ("peak_bytes", "step_s"))
    for mode, rows in ac.items():
        mem, t = (statistics.median(r[k] for r in rows) for k in ("peak_bytes", "step_s"))
        print(f"  {mode:10} step peak +{mem / 2**20:8.1f} MiB ({100 * (1 - mem / base_mem):5.1f}% saved vs none)   "
              f"step {fmt([r['step_s'] for r in rows], 1e3, ' ms', 0)}  ({t / base_t:.2f}x none)")
    return doc


def headline(doc: list[float], ac: dict[str, list[dict]]) -> None:
    """Sections 5 and 6's lines of the headline (information, no target)."""
    base_mem, base_t = (statistics.median(r[k] for r in ac["none"]) for k in ("peak_bytes", "step_s"))
    print(f"  5. document attention / causal tokens/s on CPU: {statistics.median(doc):.3f}x (info)")
    sel, full = ((statistics.median(r['peak_bytes'] for r in ac[m]), statistics.median(r['step_s'] for r in ac[m]))
                 for m in ("selective", "full"))
    print(f"  6. activation checkpointing vs none: selective saves {100 * (1 - sel[0] / base_mem):.0f}% of a step's "
          f"peak for {sel[1] / base_t:.2f}x the time, full {100 * (1 - full[0] / base_mem):.0f}% for "
          f"{full[1] / base_t:.2f}x (info)")
