"""What a mix search costs beyond its proxy runs: `shardline mix-search`'s wall time against the
same proxies trained by hand, each a plain `shardline stage train` with the proxy's settings (a
training run of its size, bench.train's subject; no DVC).

    python -m bench.mixsearch [--repeats 2] [--runs 3] [--steps N] [--small]

The project is the shipped line (params.yaml as it is: the builtin sources, the default model,
the shipped mix_search proxies, `runs` set by --runs), built once to its shards and committed.
Each repeat is a new mix_search.seed (new mixes, so no repeat finds another's proxies) and times
both ways back to back, in alternating order (search first on odd repeats: a machine warming up
or slowing down favours neither). What the search adds is everything around training: DVC's
experiment machinery per proxy (the queue's worker, a temp workspace, checking the data out,
the upstream stages' checks, committing the outputs and the experiment), the search's own
planning, polling, fit and report. That is a fixed cost per proxy; the line printed last says
its seconds, and from which proxy size it fits within the target.

Target (the issue's): search wall <= 1.05 x the proxies' own, judged at the worst repeat
(bench.verdict). --small: the tests' tiny line and proxies (seconds each), to see the fixed cost
alone quickly; its ratio is not the target's subject.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import yaml

from bench.verdict import Targets, in_order
from harness.projects import BIN, REPO, commit_trained, init_repo, run, small_params, stdlib_sources, write_params

TARGET = 1.05


def build(root: Path, small: bool, runs: int) -> None:
    """A committed project whose shards are built (experiments then run its train stage alone)."""
    init_repo(root)
    p = yaml.safe_load((REPO / "params.yaml").read_text())
    if small:
        p = small_params(stdlib_sources(root.parent / "inputs"), mix={"code": 0.75, "more": 0.25})
        p["mix_search"].update(model={}, train={"steps": 30, "checkpoint_every": 30, "warmup_steps": 3})
    p["mix_search"]["runs"] = runs
    write_params(root, p)
    commit_trained(root, "shard")  # proxies train fresh: the baseline needs its shards, not a model


def settings_of(root: Path) -> list[list[str]]:
    """Each proxy's `-S` settings, from the search's own plan at this seed."""
    from shardline import paramsfile
    from shardline.results import mixsearch

    params = paramsfile.load(root / "params.yaml")
    head = run(["git", "rev-parse", "HEAD"], root).stdout.strip()
    return [mixsearch.settings(params, p) for p in mixsearch.plan(params, head)]


def by_hand(root: Path, work: Path, proxies: list[list[str]]) -> float:
    """Seconds to train each proxy by hand: its settings into params.yaml, `shardline stage train`."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(root, work, symlinks=True)
    base, total = yaml.safe_load((work / "params.yaml").read_text()), 0.0
    for sets in proxies:
        p = json.loads(json.dumps(base))
        for s in sets:
            key, value = s.split("=", 1)
            section, field = key.split(".", 1)
            p[section][field] = yaml.safe_load(value)
        write_params(work, p)
        shutil.rmtree(work / "data/checkpoints", ignore_errors=True)  # a fresh start, as each proxy's
        t = time.perf_counter()
        run([str(BIN / "shardline"), "stage", "train"], work, timeout=3600)
        total += time.perf_counter() - t
    return total


def search(root: Path) -> float:
    t = time.perf_counter()
    run([str(BIN / "shardline"), "mix-search"], root, timeout=7200)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=None, help="the proxies' train.steps (default: mix_search's own)")
    ap.add_argument("--small", action="store_true", help="the tests' tiny line and proxies: the fixed cost alone")
    a = ap.parse_args()
    ratios, over = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proj"
        t = time.perf_counter()
        build(root, a.small, a.runs)
        print(f"built the {'small' if a.small else 'shipped'} line in {time.perf_counter() - t:.0f} s", flush=True)
        for i in range(a.repeats):
            p = yaml.safe_load((root / "params.yaml").read_text())
            p["mix_search"]["seed"] = 100 + i
            if a.steps:
                p["mix_search"]["train"] = {**p["mix_search"]["train"], "steps": a.steps, "checkpoint_every": a.steps}
            write_params(root, p)
            run(["git", "commit", "-qam", f"search {i}"], root)
            proxies = settings_of(root)
            timed = {"by hand": lambda: by_hand(root, Path(tmp) / "by-hand", proxies), "search": lambda: search(root)}
            took = {side: timed[side]() for side in in_order(timed, i)}
            wall, own = took["search"], took["by hand"]
            ratios.append(wall / own)
            over.append((wall - own) / a.runs)
            print(f"repeat {i + 1}: search {wall:.1f} s for {a.runs} proxies; trained by hand {own:.1f} s "
                  f"({own / a.runs:.1f} s each): {wall / own:.3f}x, {over[-1]:+.1f} s per proxy", flush=True)
        run([str(BIN / "dvc"), "queue", "stop"], root, check=False)
    fixed, each = max(over), own / a.runs
    print(f"fixed cost per proxy (worst repeat): {fixed:.1f} s; within {TARGET:g}x from proxies of "
          f"{fixed / (TARGET - 1):.0f} s (these: {each:.1f} s)", flush=True)
    targets = Targets()
    targets.check("mix search wall / its proxies trained by hand", max(ratios), "<=", TARGET, "x", repeats=ratios)
    targets.exit()


if __name__ == "__main__":
    main()
