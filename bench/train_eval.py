"""bench.train's section 4: the held-out eval at the defaults, as a share of a default run's
training time, and eval tokens/s against a training step's forward pass (bench/train.py's
docstring says how it is measured and judged; `python -m bench.train` runs it).
"""

from __future__ import annotations

import json
import shutil
import statistics
import time

import torch
import yaml

from bench.train_loop import REPO, fmt, model_config
from bench.verdict import in_order
from shardline.context import RunContext
from shardline.core import config
from shardline import paramsfile
from shardline.core.layout import Layout
from shardline.model import build as build_model
from shardline.stream.loader import Loader
from shardline.training import rng
from shardline.training import train as T


def eval_params(steps: int) -> config.Params:
    """The shipped params.yaml as it is, `steps` steps, an eval every steps // 4, no checkpoint
    before the last step."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["train"] = {**raw["train"], "steps": steps, "checkpoint_every": steps + 1000, "nproc_per_node": 1,
                    "device": "cpu"}
    raw["eval"] = {**raw["eval"], "every": max(1, steps // 4)}
    return paramsfile.parse(raw)


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

    shipped = paramsfile.parse(yaml.safe_load((REPO / "params.yaml").read_text()))
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


def eval_cost(steps: int, layout: Layout) -> dict:
    """Section 4: 3 runs of the shipped params.yaml, `steps` steps each, then the forward rates."""
    ep = eval_params(steps)
    E = [eval_run(ep, layout) for _ in range(3)]
    n_default = default_evals()
    shipped = paramsfile.parse(yaml.safe_load((REPO / "params.yaml").read_text()))
    shares = [100 * n_default * e["eval_s"] / (shipped.train.steps * e["step_s"]) for e in E]
    ev_rates, fw_rates = forward_rates(ep, layout, 3)
    return {"params": ep, "runs": E, "n_default": n_default, "shipped": shipped, "shares": shares,
            "eval_rates": ev_rates, "forward_rates": fw_rates}


def report_eval(res: dict) -> list[float]:
    """Print section 4; returns the same-repeat ratios of eval to training-forward tokens/s."""
    ep, E, n_default, shipped, shares = res["params"], res["runs"], res["n_default"], res["shipped"], res["shares"]
    ev_rates, fw_rates = res["eval_rates"], res["forward_rates"]
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
    return ratios
