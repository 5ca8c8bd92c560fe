"""bench.train's setup and its section 1: the trainer (`train.run`) against a bare torch loop doing
the same work, per architecture, and the per-step extras the trainer adds (bench/train.py's
docstring says how it is measured and judged; `python -m bench.train` runs it).

Also the setup every section shares: real shards of the shipped params.yaml (`build`), the
benchmark's params (`make_params`: the code source alone, global batch 16, a checkpoint only at
the last step, no eval) and `fmt`, a row's median (min - max).
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path

import torch
import yaml

from bench.measure import data_stages, med_range
from bench.verdict import abba, in_order
from shardline.context import RunContext
from shardline.core import config, fsio
from shardline import paramsfile
from shardline.core.layout import Layout
from shardline.model import ModelConfig, build as build_model
from shardline.stream.loader import Loader
from shardline.training import rng
from shardline.training import train as T
from shardline.training.schedule import lr_at
from shardline.training.step import step_seed
from shardline.training.monitor import Monitor
from shardline.training.network import Network
from shardline.training.optimizer import configure_optimizer

REPO = Path(__file__).resolve().parents[1]
GLOBAL_BATCH = 16
# the architectures section 1 compares, as model sections: llama as shipped, gpt2 at the same width
ARCHS = {"llama": None, "gpt2": {"arch": "gpt2", "n_layer": 2, "n_head": 4, "d_model": 128, "dropout": 0.1}}


def build(root: Path) -> Layout:
    """Real shards of the shipped params.yaml's sources (code and prose), with its settings:
    sections 1-3 read the code source only, section 4 both, as the default line does."""
    params = paramsfile.parse(yaml.safe_load((REPO / "params.yaml").read_text()))
    layout = Layout.at(root)
    data_stages(params, layout)
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
    return paramsfile.parse(raw)


def model_config(params: config.Params, layout: Layout, seq_len: int) -> ModelConfig:
    return Network.for_run(params, layout, seq_len).config


def fmt(xs: list[float], scale: float = 1.0, unit: str = "", prec: int = 0) -> str:
    """A row's repeats: '    12,345 tok/s  (12,001 - 12,600)'."""
    return med_range(xs, f",.{prec}f", scale, unit, width=10, gap="  ")


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
            group["lr"] = lr_at(step, cfg)
        torch.manual_seed(step_seed(cfg.seed, step, 0))
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
        "[both] lr_at over param groups": per_call_us(lambda: [g.__setitem__("lr", lr_at(5, cfg))
                                                                for g in opt.param_groups], 2000),
        "[both] step_seed + torch.manual_seed": per_call_us(lambda: torch.manual_seed(step_seed(cfg.seed, 5, 0)),
                                                            2000),
    }
    mon.close()
    torch.set_rng_state(rng_state)
    return out


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
