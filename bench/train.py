"""Train stage: trainer vs a bare torch loop for both architectures, checkpoint blocking time,
data-wait share, eval cost, the cost of document attention and what activation checkpointing buys.

    python -m bench.train [--repeats 6] [--steps 20] [--ckpt-repeats 6] [--profile] [--tmp-dir DIR]

Builds real shards once, in a temp dir, through the engine stages (download -> clean ->
tokenize -> shard) of the shipped params.yaml (its sources: the Python standard library and the
pydoc topics, both always present; vocab 8192, seq_len 256). Sections 1-3 train on the code
source alone, with the shipped training params (fp32; deterministic; train.threads left at its
default; train.attention document, as shipped), global_batch 16 blocks (4,096 tokens per step)
and --steps steps, for each architecture: llama as shipped (2 layers, 4 heads, 2 key/value heads,
d_model 128, SwiGLU 384, dropout 0) and gpt2 at the same width (2 layers, 4 heads, d_model 128,
dropout 0.1). Measured interleaved (each repeat runs both methods, the order alternating between
repeats, so machine noise hits both alike):

  1. trainer vs bare loop, tokens/s, per architecture:
     (a) the real trainer, `shardline.training.train.run(params, layout)`, fresh each repeat
         (data/checkpoints and data/metrics deleted first); checkpoint_every is larger than
         --steps, so it saves only the final checkpoint. Its tokens/s is its own
         data/metrics/train.json `median_tokens_per_s`, computed from per-step `step_s`, which
         the trainer measures *before* its checkpoint branch: the final checkpoint is excluded
         by construction, not subtracted. run()'s wall time (setup + steps + final checkpoint +
         summary) is shown alongside, for information.
     (b) a bare torch loop over the same work: the same network (seeded like the trainer:
         rng.seed_all then shardline.model.build), the same AdamW (configure_optimizer), the same
         batches (taken from a Loader.from_params with the same params before timing), the same LR
         schedule (lr_at), the same per-step dropout seed (step_seed), grad clip, deterministic
         mode; no monitor, no scaler, no metrics file. Timed per step; tokens/s = the median of
         4,096 / step_s (what the trainer's monitor reports).
     Sanity: (b)'s loss sequence must equal the trainer's train.jsonl losses bit for bit (same
     model, data, seeds, kernels), so both really did the same work (exit 1 if not).
     The verdict is taken at the low end of the repeats: the same-repeat ratio of tokens/s at
     each run's lower-quartile step time (its least-contended quarter of steps: a busy machine
     only ever slows a step down), paired ABBA (the geometric mean of a repeat run a-then-b and
     the next run b-then-a: whichever side runs second in a repeat is faster, by 10-15% here,
     and a pair of opposite orders cancels it); the lowest pair must reach the target. The
     ratio of the medians is shown beside it. A timing breakdown of the trainer's per-step extras (LR set, dropout reseed,
     loader next(), monitor.step, disabled GradScaler calls) follows, in microseconds against
     the step time.
  2. checkpoint blocking time: what the trainer's checkpoint branch blocks for (state_dict()
     calls + `AsyncSaver.submit`: a CPU snapshot of the state, the write, sha256s, manifest and
     retention then run on a background thread, waited for outside the timing) against the two
     fair ways to block training as little: (i) a snapshot of the same objects (tensors copied)
     handed to a thread that runs `torch.save` into one file + fsyncs, and (ii) DCP's
     `async_save` of the model and optimizer state (its own staging copy, then a background
     write). Each repeat times each way 5 times and keeps its best (one scheduler hiccup is
     several times a millisecond block); per repeat, the trainer against the faster of the two,
     paired ABBA as in 1 (the order reverses each repeat); the worst pair must meet the target. For information: a bare synchronous `torch.save` and a
     synchronous `checkpoint.save` (temp dir, sha256 while writing, manifest last, rename,
     fsyncs) of the same state.
  3. data wait share: train.json `data_wait_pct` of each trainer repeat (sum of data-wait over
     sum of step time), median; the first step's wait (it verifies the sha256 of every shard it
     touches) is shown apart from the rest.
  4. held-out eval at the defaults: the shipped params.yaml as it is (sources code and prose,
     global batch 32, eval.blocks 64 per source), --steps steps with an eval every --steps / 4
     steps; from each run's own train.jsonl, the median eval_s and the median step_s give the
     share eval takes of a default run's training time (its evals: every eval.every steps, at
     each checkpoint and the last step, over train.steps steps). And eval tokens/s against the
     training forward pass (the forward of a training step: train mode, autograd recording, same
     batch), timed interleaved on the same model.
  5. document attention on CPU (information): the bare llama loop with train.attention document
     (an SDPA boolean mask [B, 1, T, T]: CPU has no FlexAttention kernel) against causal
     (SDPA is_causal), same weights and batches, interleaved; tokens/s and the ratio.
  6. activation checkpointing (information): llama at 4 layers x d_model 256 (activations large
     enough to see), training steps per mode none / selective / full, each in a fresh process:
     the peak RSS a step adds over the process's settled RSS (VmHWM reset through
     /proc/self/clear_refs after a warm-up step; glibc made to return freed memory at once, so
     RSS is the live tensors) and, in another process with glibc's defaults, the median step
     time; interleaved repeats.

How to read it: the headline ratios are same-run ratios, each verdict at the worst of its
repeats (targets: (a)/(b) >= 0.95, checkpoint block/fair baseline <= 1.5, data wait < 1%, eval
share <= 5%), its spread printed beside it; on a small shared machine
absolute times move a lot from run to run, so quote the ratios, not the tokens/s. Each row shows
median and min-max over repeats; the per-repeat (a)/(b) ratios are printed too, and a noise
check: the ratio of each run's fastest step (the least-contended one). When a target is missed
(or with --profile) cProfiles of both sides follow: own time per step (or per save) in buckets
(torch compute, fsync, write, sha256, JSON, torch serialization, ...) side by side, then the slow
side's top functions by own time.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
import yaml
from torch.distributed.checkpoint.state_dict import get_state_dict

from bench.verdict import abba, in_order
from shardline.context import RunContext
from shardline.core import config, fsio
from shardline.training import rng
from shardline.training import checkpoint, checkpointer, lineage
from shardline.training import train as T
from shardline.core.layout import Layout
from shardline.stream.loader import Loader
from shardline.model import ModelConfig, build as build_model
from shardline.training.monitor import Monitor
from shardline.training.network import Network
from shardline.training.optimizer import configure_optimizer

REPO = Path(__file__).resolve().parents[1]
GLOBAL_BATCH = 16
TARGET_AB, TARGET_CKPT, TARGET_WAIT, TARGET_EVAL = 0.95, 1.5, 1.0, 5.0
# the architectures section 1 compares, as model sections: llama as shipped, gpt2 at the same width
ARCHS = {"llama": None, "gpt2": {"arch": "gpt2", "n_layer": 2, "n_head": 4, "d_model": 128, "dropout": 0.1}}
AC_MODEL = {"arch": "llama", "n_layer": 4, "n_head": 8, "n_kv_head": 4, "d_model": 256, "dropout": 0.0}


# ---------------------------------------------------------------- setup


def build(root: Path) -> Layout:
    """Real shards of the shipped params.yaml's sources (code and prose), with its settings:
    sections 1-3 read the code source only, section 4 both, as the default line does."""
    from shardline.data import download, tokenize, shard
    from shardline.data.clean import stage as clean

    params = config.parse(yaml.safe_load((REPO / "params.yaml").read_text()))
    layout = Layout.at(root)
    t0 = time.perf_counter()
    for stage in (download, clean, tokenize, shard):
        stage.run(params, layout, log=lambda _: None)
    print(f"built shards in {time.perf_counter() - t0:.1f}s (download, clean, tokenize, shard) at {layout.shards}")
    return layout


def make_params(steps: int, model: dict | None = None, **train) -> config.Params:
    """The shipped params.yaml with the code source alone, global_batch 16, `steps` steps, a
    checkpoint only at the last step, and no held-out eval (the bare loop has none: like for like;
    section 4 measures eval on its own); `model` replaces the model section, `train` merges in."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["sources"] = [{"name": "code", "uri": "builtin://python-stdlib", "format": "txt", "txt_unit": "file"}]
    raw["mix"] = {"code": 1.0}
    raw["loader"] = {**raw.get("loader", {}), "global_batch": GLOBAL_BATCH}
    raw["train"] = {**raw.get("train", {}), "steps": steps, "checkpoint_every": steps + 1000,
                    "nproc_per_node": 1, "device": "cpu", **train}
    raw["eval"] = {**raw.get("eval", {}), "every": 0}
    if model:
        raw["model"] = model
    return config.parse(raw)


def model_config(params: config.Params, layout: Layout, seq_len: int) -> ModelConfig:
    return Network.for_run(params, layout, seq_len).config


# ---------------------------------------------------------------- 1. trainer vs bare loop


def trainer_run(params: config.Params, layout: Layout) -> dict:
    for d in (layout.data / "checkpoints", layout.data / "metrics"):
        shutil.rmtree(d, ignore_errors=True)
    logs: list[str] = []
    t0 = time.perf_counter()
    T.run(params, layout, RunContext(log=logs.append))
    wall = time.perf_counter() - t0
    summary = fsio.read_json(layout.data / "metrics" / "train.json")
    recs = [json.loads(ln) for ln in (layout.data / "metrics" / "train.jsonl").read_text().splitlines() if ln]
    rest = recs[1:]
    return {"tps": summary["median_tokens_per_s"], "wait_pct": summary["data_wait_pct"], "wall": wall,
            "p25_tps": recs[0]["tokens"] / _p25([r["step_s"] for r in recs]),
            "losses": [r["loss"] for r in recs], "step_s": statistics.median(r["step_s"] for r in recs),
            "wait1_ms": recs[0]["data_wait_s"] * 1e3, "step_min": min(r["step_s"] for r in recs),
            "wait_rest_pct": 100 * sum(r["data_wait_s"] for r in rest) / sum(r["step_s"] for r in rest),
            "slow_steps": len(summary["slow_steps"]), "ckpts": summary["checkpoints_saved"]}


def bare_run(params: config.Params, gcfg: ModelConfig, batches: list) -> dict:
    cfg = params.train
    rng.seed_all(cfg.seed)
    model = build_model(gcfg)
    opt = configure_optimizer(model, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(cfg.beta1, cfg.beta2),
                              device_type="cpu")
    times, losses = [], []
    for step, (x, y) in enumerate(batches):
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = T.lr_at(step, cfg)
        torch.manual_seed(T.step_seed(cfg.seed, step, 0))
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    tokens = batches[0][0].numel()
    # tokens/s as the monitor computes it: the median of the per-step rates
    return {"tps": statistics.median(tokens / t for t in times), "step_s": statistics.median(times),
            "p25_tps": tokens / _p25(times),
            "step_min": min(times), "losses": losses,
            "model": model, "opt": opt}


def _p25(xs: list[float]) -> float:
    """The lower quartile: the step time of a run's least-contended quarter (noise only ever slows a step)."""
    return statistics.quantiles(xs, n=4)[0]


def per_call_us(fn, n: int) -> float:
    """Median over 5 rounds of the mean cost of fn() over n calls, in microseconds."""
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t0) / n)
    return statistics.median(rounds) * 1e6


def trainer_extras(params: config.Params, layout: Layout, bare: dict, tmp: Path) -> dict[str, float]:
    """Microseconds per step of what the trainer does that the bare loop does not (or does too)."""
    cfg, opt, model = params.train, bare["opt"], bare["model"]
    rng_state = torch.get_rng_state()  # manual_seed below must not leak into what runs next
    loader = Loader.from_params(params, layout)
    it = iter(loader)
    for _ in range(8):
        next(it)  # every shard verified, order chunk warm
    mon = Monitor(tmp / "extras.jsonl", tokens_per_step=GLOBAL_BATCH * 256, flops_per_token=model.flops_per_token(),
                  total_steps=10**9, log=lambda _: None, progress=False, device=torch.device("cpu"))
    k = [0]

    def monitor_step():
        k[0] += 1
        mon.step(k[0], loss=1.0, lr=1e-3, data_wait_s=1e-4, compute_s=0.5, step_s=0.5)

    scaler = torch.amp.GradScaler("cpu", enabled=False)
    loss = torch.tensor(1.0)

    def scaler_calls():
        scaler.scale(loss)
        scaler.unscale_(opt)
        scaler.update()

    def total_and_float():
        total = torch.zeros(())
        total += loss.detach()
        float(total)

    out = {  # trainer only
        "loader next() (data wait, warm)": per_call_us(lambda: next(it), 50),
        "monitor.step (record + JSON line)": per_call_us(monitor_step, 200),
        "GradScaler (disabled) scale/unscale_/update": per_call_us(scaler_calls, 2000),
        "loss accumulator + float()": per_call_us(total_and_float, 2000),
        # both loops do these (the bare loop too, for identical dropout and LR)
        "[both] lr_at over param groups": per_call_us(lambda: [g.__setitem__("lr", T.lr_at(5, cfg))
                                                                for g in opt.param_groups], 2000),
        "[both] step_seed + torch.manual_seed": per_call_us(lambda: torch.manual_seed(T.step_seed(cfg.seed, 5, 0)),
                                                            2000),
    }
    mon.close()
    torch.set_rng_state(rng_state)
    return out


# ---------------------------------------------------------------- 4. held-out eval


def eval_params(steps: int) -> config.Params:
    """The shipped params.yaml as it is, `steps` steps, an eval every steps // 4, no checkpoint
    before the last step."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["train"] = {**raw["train"], "steps": steps, "checkpoint_every": steps + 1000, "nproc_per_node": 1,
                    "device": "cpu"}
    raw["eval"] = {**raw["eval"], "every": max(1, steps // 4)}
    return config.parse(raw)


def eval_run(params: config.Params, layout: Layout) -> dict:
    for d in (layout.data / "checkpoints", layout.data / "metrics"):
        shutil.rmtree(d, ignore_errors=True)
    T.run(params, layout, RunContext(log=lambda _: None))
    recs = [json.loads(ln) for ln in (layout.data / "metrics" / "train.jsonl").read_text().splitlines() if ln]
    evals = [r["eval"] for r in recs if r.get("eval")]
    return {"eval_s": statistics.median(e["eval_s"] for e in evals), "n": len(evals),
            "step_s": statistics.median(r["step_s"] for r in recs), "tokens": sum(evals[0]["sources"][n]["tokens"]
                                                                             for n in evals[0]["sources"])}


def default_evals() -> int:
    """How many evals a run of the shipped params.yaml does."""
    from shardline.training.evaluate import due

    shipped = config.parse(yaml.safe_load((REPO / "params.yaml").read_text()))
    return sum(due(s, shipped.train.steps, shipped) for s in range(1, shipped.train.steps + 1))


def forward_rates(params: config.Params, layout: Layout, reps: int) -> tuple[list[float], list[float]]:
    """tokens/s of evaluate() on the held-out blocks vs the training forward (train mode, grad on)
    over the same number of blocks in training batches; interleaved."""
    from shardline.training.evaluate import HeldOut, evaluate

    loader = Loader.from_params(params, layout)
    held = HeldOut.open(layout.shards, [s.name for s in params.sources], params.eval.blocks,
                        layout.tokenizer / "tokenizer.json")
    rng.seed_all(params.train.seed)
    model = build_model(model_config(params, layout, loader.seq_len))
    g = params.loader.global_batch
    it = iter(loader)
    nblocks = sum(len(b.ids) for b in held.blocks)
    train_batches = [next(it) for _ in range(-(-nblocks // g))]
    ev_rates, fw_rates = [], []
    for r in range(reps + 1):  # the first pair warms up, untimed
        for m in in_order(("e", "f"), r):
            if m == "e":
                res = evaluate(model, held, params.mix, batch=g, device=torch.device("cpu"))
                rate = res["tokens_per_s"]
                (ev_rates if r else []).append(rate)
            else:
                model.train()
                t0 = time.perf_counter()
                n = 0
                for x, y in train_batches:
                    _, loss = model(x, y)  # what a training step's forward does (the graph is kept)
                    n += x.numel()
                    del loss
                rate = n / (time.perf_counter() - t0)
                (fw_rates if r else []).append(rate)
    return ev_rates, fw_rates


# ---------------------------------------------------------------- 2. checkpoint blocking time


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


# ---------------------------------------------------------------- report helpers


def fmt(xs: list[float], scale: float = 1.0, unit: str = "", prec: int = 0) -> str:
    m, lo, hi = (f"{v * scale:,.{prec}f}" for v in (statistics.median(xs), min(xs), max(xs)))
    return f"{m:>10}{unit}  ({lo} - {hi})"


BUCKETS = [  # (bucket, substrings of "file:function" matched in order) for cProfile own times
    ("fsync (file + dir)", ("posix.fsync",)),
    ("file write()", ("'write' of '_io",)),
    ("sha256", ("sha256",)),
    ("JSON encode (state, manifest+lineage)", ("json/", "_json")),
    ("torch serialize (pickle + records)", ("serialization.py", "write_record", "Pickler", "torch/_tensor.py",
                                            "torch/storage.py", "torch/__init__.py")),
    ("torch compute (kernels, autograd, optim)", ("torch", "run_backward")),
    ("numpy", ("numpy",)),
    ("subprocess (git in lineage)", ("subprocess", "posix.read", "waitpid", "_posixsubprocess")),
    ("shardline python", ("shardline/",)),
]


def profile(fn) -> pstats.Stats:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    return pstats.Stats(prof)


def buckets(st: pstats.Stats) -> dict[str, float]:
    out = {name: 0.0 for name, _ in BUCKETS} | {"other": 0.0}
    for (file, line, func), (_cc, _nc, tt, _ct, _callers) in st.stats.items():
        key = f"{file}:{func}"
        out[next((name for name, pats in BUCKETS if any(p in key for p in pats)), "other")] += tt
    return out


def top(st: pstats.Stats, n: int = 10) -> str:
    s = io.StringIO()
    st.stream = s
    st.sort_stats("tottime").print_stats(n)
    return "\n".join("    " + ln for ln in s.getvalue().splitlines()[4:] if ln.strip())


def side_by_side(cols: dict[str, pstats.Stats], per: int, label: str = "step") -> None:
    """Own time per bucket, divided by `per` (steps or calls), one column per profiled run."""
    bs = {k: buckets(v) for k, v in cols.items()}
    print(f"    {'own time per ' + label:42}" + "".join(f"{k:>26}" for k in cols))
    for name in next(iter(bs.values())):
        if any(b[name] > 0 for b in bs.values()):
            print(f"    {name:42}" + "".join(f"{b[name] / per * 1e3:22.1f} ms " for b in bs.values()))
    print(f"    {'total':42}" + "".join(f"{sum(b.values()) / per * 1e3:22.1f} ms " for b in bs.values()))


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def spread(xs: list[float], fmt_: str = "{:.2f}") -> str:
    return f"[repeats {', '.join(fmt_.format(x) for x in xs)}]"


# ---------------------------------------------------------------- 5. document attention, 6. recompute


def attention_cost(params: config.Params, layout: Layout, batches: list, reps: int) -> dict[str, list[float]]:
    """tokens/s of the bare llama loop with document attention and with causal, interleaved."""
    seq_len = batches[0][0].shape[1]
    cfgs = {a: model_config(make_params(len(batches), attention=a), layout, seq_len) for a in ("causal", "document")}
    out: dict[str, list[float]] = {"causal": [], "document": []}
    for r in range(reps):
        for a in in_order(("causal", "document"), r):
            out[a].append(bare_run(params, cfgs[a], batches)["tps"])
    return out


def _hwm_kb() -> tuple[int, int]:
    status = dict(ln.split(":", 1) for ln in Path("/proc/self/status").read_text().splitlines() if ":" in ln)
    return int(status["VmHWM"].split()[0]), int(status["VmRSS"].split()[0])


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
        settled = _hwm_kb()[1]
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        t0 = time.perf_counter()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i:  # the first step allocates the optimizer's moments: a warm-up
            times.append(time.perf_counter() - t0)
            peaks.append((_hwm_kb()[0] - settled) * 1024)
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


# ---------------------------------------------------------------- main


def arch_section(name: str, params: config.Params, layout: Layout, args) -> dict:
    """Section 1 for one architecture: interleaved trainer/bare pairs, then the per-step extras."""
    loader = Loader.from_params(params, layout)
    it = iter(loader)
    batches = [next(it) for _ in range(args.steps)]  # the trainer's batches: same params, same positions
    gcfg = model_config(params, layout, loader.seq_len)
    print(f"\n[{name}] {gcfg.n_layer} layers x {gcfg.n_head} heads ({gcfg.n_kv_head} key/value) x d{gcfg.d_model}, "
          f"MLP {gcfg.mlp_hidden}, vocab {gcfg.vocab_size}, {build_model(gcfg).num_params(False):,} params, "
          f"{gcfg.attention} attention; {args.steps} steps per run", flush=True)
    bare_run(params, gcfg, batches[:3])  # warm-up, untimed: first-call kernel and allocator costs
    A: list[dict] = []
    B: list[dict] = []
    for r in range(args.repeats):
        order = in_order(("a", "b"), r)
        for m in order:
            if m == "a":
                A.append(trainer_run(params, layout))
            else:
                for prev in B:  # keep only the newest model/optimizer alive (for the checkpoint part)
                    prev.pop("model", None), prev.pop("opt", None)
                B.append(bare_run(params, gcfg, batches))
        print(f"  repeat {r + 1}/{args.repeats} ({' then '.join(order)}): trainer {A[-1]['tps']:,.0f} tok/s, "
              f"bare {B[-1]['tps']:,.0f} tok/s, ratio {A[-1]['tps'] / B[-1]['tps']:.3f}", flush=True)
    return {"A": A, "B": B, "loader": loader, "batches": batches, "gcfg": gcfg, "params": params,
            "same_losses": all(a["losses"] == b["losses"] for a, b in zip(A, B)),
            "extras": trainer_extras(params, layout, B[-1], layout.root.parent)}


def report_arch(name: str, res: dict, args) -> float:
    """Print section 1 for one architecture; returns the low end of its same-repeat ratios."""
    A, B, n = res["A"], res["B"], args.repeats
    tokens_per_step = res["batches"][0][0].numel()
    print(f"\n1. [{name}] trainer vs bare loop: tokens/s, median of {n} interleaved repeats (min - max); "
          f"each run's own median over its {args.steps} steps")
    print(f"  {'(a) trainer: train.run, train.json median':44} {fmt([a['tps'] for a in A])} tok/s")
    print(f"  {'(b) bare torch loop, per-step median':44} {fmt([b['tps'] for b in B])} tok/s")
    print(f"  {'(a) median step_s':44} {fmt([a['step_s'] for a in A], 1e3, ' ms', 1)}")
    print(f"  {'(b) median step_s':44} {fmt([b['step_s'] for b in B], 1e3, ' ms', 1)}")
    e2e = [args.steps * tokens_per_step / a["wall"] for a in A]
    print(f"  {'(a) run() wall s (setup+steps+final ckpt)':44} {fmt([a['wall'] for a in A], 1, ' s', 2)}"
          f"   -> {statistics.median(e2e):,.0f} tok/s end to end (info)")
    med_runs = [a["tps"] / b["tps"] for a, b in zip(A, B)]
    ab_runs = [a["p25_tps"] / b["p25_tps"] for a, b in zip(A, B)]
    print(f"  same-repeat ratio (a)/(b), tokens/s at each run's lower-quartile step: "
          f"{', '.join(f'{x:.3f}' for x in ab_runs)}  (spread {min(ab_runs):.3f} - {max(ab_runs):.3f})")
    print(f"  same-repeat ratio (a)/(b) of the median steps (info): {', '.join(f'{x:.3f}' for x in med_runs)}")
    pairs = abba(ab_runs)
    print(f"  ABBA pairs (a then b, b then a: the geometric mean of each pair of opposite orders): "
          f"{', '.join(f'{x:.3f}' for x in pairs)}")
    mins = [b["step_min"] / a["step_min"] for a, b in zip(A, B)]
    print(f"  noise check, fastest step (b)/(a) per repeat: {', '.join(f'{x:.3f}' for x in mins)}  "
          f"(least-contended steps; near 1 with a far lower median ratio means the machine, not the trainer)")
    print(f"  trainer's slow-step warnings per run: {[a['slow_steps'] for a in A]}; checkpoints saved: "
          f"{A[-1]['ckpts']}")
    print(f"  sanity: bare loss sequence == trainer train.jsonl losses (bit-exact): {res['same_losses']}")
    step_us = statistics.median(b["step_s"] for b in B) * 1e6
    print(f"  trainer per-step extras, us per call (median of 5 rounds) vs the bare median step {step_us:,.0f} us:")
    for what, us in res["extras"].items():
        print(f"    {what:44} {us:9.1f} us  {100 * us / step_us:6.3f}%")
    tot = sum(us for what, us in res["extras"].items() if not what.startswith("[both]"))
    print(f"    {'sum of trainer-only extras':44} {tot:9.1f} us  {100 * tot / step_us:6.3f}%  (predicted (a)/(b) "
          f"{step_us / (step_us + tot):.4f})")
    return min(pairs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=6, help="interleaved trainer/bare pairs per architecture (even, >= 6)")
    ap.add_argument("--steps", type=int, default=20, help="optimizer steps per run (global batch 16 x 256 tokens)")
    ap.add_argument("--ckpt-repeats", type=int, default=6, help="interleaved checkpoint save rounds (even, >= 6)")
    ap.add_argument("--profile", action="store_true", help="always print the cProfiles")
    ap.add_argument("--tmp-dir", default=None, help="where the temp project lives (its filesystem is what fsync hits)")
    ap.add_argument("--ac-probe", help=argparse.SUPPRESS)  # section 6's fresh process: a mode
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.ac_probe:
        ac_probe(args.root, args.ac_probe, args.steps)
        return 0
    args.repeats = max(6, args.repeats + args.repeats % 2)  # whole ABBA pairs
    args.ckpt_repeats = max(6, args.ckpt_repeats + args.ckpt_repeats % 2)
    torch.use_deterministic_algorithms(True)  # what run() sets for train.deterministic; stays on for (b)
    tmpdir = tempfile.TemporaryDirectory(prefix="bench-train-", dir=args.tmp_dir)
    root = Path(tmpdir.name)
    layout = build(root / "project")
    print(f"global batch {GLOBAL_BATCH} x 256 = {GLOBAL_BATCH * 256:,} tokens/step; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, deterministic, fp32")

    # ---- 1 + 3: trainer vs bare, interleaved, per architecture
    R = {name: arch_section(name, make_params(args.steps, model=m), layout, args) for name, m in ARCHS.items()}
    main_res = R["llama"]  # the shipped architecture: sections 2-3 use its runs
    A, params, loader, cfg = main_res["A"], main_res["params"], main_res["loader"], main_res["params"].train
    bare = main_res["B"][-1]  # the newest bare run: its model and optimizer (Adam moments after --steps steps)
    tokens_per_step = main_res["batches"][0][0].numel()

    # ---- 2: checkpoint blocking time, interleaved
    model, opt = bare["model"], bare["opt"]
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    lin = lineage.collect(params, layout, loader.version)
    state = {"step": args.steps, "tokens_seen": args.steps * tokens_per_step, "loader": loader.state_dict(),
             "grad_accum": cfg.grad_accum, "world_size": 1}
    tensors = {"model.pt": model.state_dict(), "optimizer.pt": opt.state_dict(),
               "scaler.pt": scaler.state_dict(), "rng.pt": rng.capture()}
    bare_objs = {**tensors, "train_state": state, "lineage": lin}
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
                "train_state": json.loads(json.dumps(state)), "lineage": lin}
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
        saver.submit(block_root, i, {"model.pt": model.state_dict(), "optimizer.pt": opt.state_dict(),
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
    for r in range(args.ckpt_repeats):
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

    # ---- 4: held-out eval at the defaults
    ep = eval_params(args.steps)
    E = [eval_run(ep, layout) for _ in range(3)]
    n_default = default_evals()
    shipped = config.parse(yaml.safe_load((REPO / "params.yaml").read_text()))
    shares = [100 * n_default * e["eval_s"] / (shipped.train.steps * e["step_s"]) for e in E]
    ev_rates, fw_rates = forward_rates(ep, layout, 3)

    # ---- 5: document attention, 6: activation checkpointing
    attn = attention_cost(params, layout, main_res["batches"], args.repeats)
    ac = ac_cost(layout, 3)

    # ---- report
    lows = {name: report_arch(name, res, args) for name, res in R.items()}

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

    waits = ", ".join(f"{a['wait_pct']:.3f}%" for a in A)
    print(f"\n3. data wait share of step time (train.json data_wait_pct, llama), per repeat: {waits}")
    print(f"  first step's wait (shard sha256 verification on first use): "
          f"{fmt([a['wait1_ms'] for a in A], 1, ' ms', 1)};  steps 2..{args.steps}: "
          f"{statistics.median(a['wait_rest_pct'] for a in A):.3f}% of step time")

    print(f"\n4. held-out eval at the defaults ({E[0]['tokens']:,} held-out tokens per eval: "
          f"{', '.join(f'{k} {v}' for k, v in ep.section('eval').items() if k in ('every', 'blocks'))} here; a default run "
          f"does {n_default} evals over {shipped.train.steps} steps), median of {len(E)} runs (min - max):")
    print(f"  {'eval (all sources) per eval':44} {fmt([e['eval_s'] for e in E], 1e3, ' ms', 1)}")
    print(f"  {'training step':44} {fmt([e['step_s'] for e in E], 1e3, ' ms', 1)}")
    print(f"  {'share of a default run: evals x eval_s / (steps x step_s)':58} "
          f"{', '.join(f'{x:.2f}%' for x in shares)}")
    print(f"  {'eval tokens/s (evaluate, no grad, eval mode)':44} {fmt(ev_rates)} tok/s")
    print(f"  {'training forward tokens/s (train mode, grad)':44} {fmt(fw_rates)} tok/s")
    ratios = [e / f for e, f in zip(ev_rates, fw_rates)]
    print(f"  same-repeat ratio eval/forward: {', '.join(f'{x:.2f}' for x in ratios)}")

    doc = [d / c for d, c in zip(attn["document"], attn["causal"])]
    print(f"\n5. document attention on CPU (bare llama loop, SDPA boolean mask vs is_causal), {args.repeats} "
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

    cr = max(ck_pairs)  # the worst repeat
    blk = statistics.median(ck["checkpoint.save (sync, info)"]) / statistics.median(
        ck["bare torch.save + fsyncs (sync, info)"])
    wait = max(a["wait_pct"] for a in A)
    share = max(shares)
    print("\nheadline (same-run ratios, each verdict at the worst of its repeats):")
    for name, low in lows.items():
        print(f"  1. [{name}] trainer/bare tokens/s, lowest of {args.repeats // 2} ABBA pairs: {low:6.3f}x   (target >= {TARGET_AB})   "
              f"{verdict(low >= TARGET_AB)}")
    print(f"  2. trainer checkpoint block / thread torch.save or DCP async_save, worst of {len(ck_pairs)} ABBA pairs: "
          f"{cr:6.2f}x"
          f"   (target <= {TARGET_CKPT})    {verdict(cr <= TARGET_CKPT)}   {spread(ck_pairs)}   [synchronous "
          f"checkpoint.save incl. sha256 + manifest / synchronous torch.save: {blk:.2f}x, info]")
    print(f"  3. data wait share of step time, worst of {len(A)}:   {wait:6.3f}%   (target < {TARGET_WAIT}%)     "
          f"{verdict(wait < TARGET_WAIT)}   {spread([a['wait_pct'] for a in A], '{:.3f}%')}")
    print(f"  4. eval share of a default run's training time, worst of {len(shares)}: {share:5.2f}%   (target <= "
          f"{TARGET_EVAL}%)     {verdict(share <= TARGET_EVAL)}   {spread(shares, '{:.2f}%')}   [eval tokens/s vs "
          f"training forward: {statistics.median(ratios):.2f}x, info]")
    print(f"  5. document attention / causal tokens/s on CPU: {statistics.median(doc):.3f}x (info)")
    sel, full = ((statistics.median(r['peak_bytes'] for r in ac[m]), statistics.median(r['step_s'] for r in ac[m]))
                 for m in ("selective", "full"))
    print(f"  6. activation checkpointing vs none: selective saves {100 * (1 - sel[0] / base_mem):.0f}% of a step's "
          f"peak for {sel[1] / base_t:.2f}x the time, full {100 * (1 - full[0] / base_mem):.0f}% for "
          f"{full[1] / base_t:.2f}x (info)")

    slow = [name for name, low in lows.items() if low < TARGET_AB]
    if slow or args.profile:
        k = min(args.steps, 8)
        for name in slow or list(R):
            short = make_params(k, model=ARCHS[name])
            for d in (layout.data / "checkpoints", layout.data / "metrics"):
                shutil.rmtree(d, ignore_errors=True)
            pa = profile(lambda: T.run(short, layout, RunContext(log=lambda _: None)))
            pb = profile(lambda: bare_run(short, R[name]["gcfg"], R[name]["batches"][:k]))
            print(f"\n[{name}] why (a)/(b) < {TARGET_AB}: cProfile of train.run ({k} steps, setup and final checkpoint "
                  f"included) and of the bare loop ({k} steps), own time by bucket per step:")
            side_by_side({"(a) trainer": pa, "(b) bare loop": pb}, k)
            print("  (a) top functions by own time:")
            print(top(pa))
    if cr > TARGET_CKPT or args.profile:
        ps = profile(lambda: [do_save(100 + i) for i in range(3)])
        clean_up()
        print(f"\nwhy save/bare > {TARGET_CKPT}: see 'where a save's time goes' above; cProfile of 3 x "
              f"checkpoint.save, top functions by own time (the profiler inflates the pure-Python JSON "
              f"encoder; the timers above do not):")
        print(top(ps))
    if wait >= TARGET_WAIT or args.profile:
        print(f"\n(data wait: first step {statistics.median(a['wait1_ms'] for a in A):.1f} ms of shard verification, "
              f"steady steps {statistics.median(a['wait_rest_pct'] for a in A):.3f}% of step time)")

    tmpdir.cleanup()
    if slow or cr > TARGET_CKPT or wait >= TARGET_WAIT or share > TARGET_EVAL:
        print("\nTARGET MISSED: see the headline above")
        return 1
    if not all(res["same_losses"] for res in R.values()):
        print("\nSANITY FAIL: the bare loop's losses differ from the trainer's: the comparison is not like for like")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
