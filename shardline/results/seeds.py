"""Seed spread: how far two runs that differ only by a seed land apart, which a difference between
two runs must beat before it is more than noise.

Contract: two runs are replicates (`replicates(x, y)`) when their lineages agree on everything that
shapes the model but `train.seed` and `loader.seed`: the data version, the mix, the model, train,
loader, shard and tokenizer sections otherwise, the model they started from, the step. `spread(runs)`
takes every pair of replicates among the runs given (the two compared and the other runs the repo
records: branches and experiments) whose last evals scored the same held-out blocks, and per source
and figure estimates the seed standard deviation sigma = sqrt(mean(d^2) / 2) from their differences
d (the equal-weight total's too). A difference between two single runs then carries seed noise of
variance 2 sigma^2: `widen` adds 1.96 sqrt(2) sigma in quadrature to each side of the document
interval. Why: on the shipped line two seeds alone moved held-out loss by 0.2 nats, ten times the
document interval of their paired difference (docs/evaluation.md); without it, every seed would
look like a finding. With no replicates the spread is unknown, and the verdict says so.
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Mapping, Sequence

from shardline.training import noise
from shardline.training.records import Manifest

SEEDS = ("train.seed", "loader.seed")
SECTIONS = ("model", "train", "loader", "shard", "tokenizer")
TOTAL = "total (sources weighted equally)"


def flat(d: Mapping, prefix: str = "") -> dict:
    """Nested params as dotted keys (`train.seed`), the way a diff names them."""
    out = {}
    for k, v in d.items():
        if isinstance(v, Mapping) and v:
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _shape(m: Manifest) -> tuple:
    lin = m.lineage
    params = {k: v for k, v in flat({s: lin.params.get(s, {}) for s in SECTIONS}).items() if k not in SEEDS}
    init = lin.init.to_json() if lin.init else None
    return (lin.data_version.shards_sha256, lin.mix, params, init, m.step)


def replicates(x: Manifest, y: Manifest) -> bool:
    """Whether two runs differ by a seed and nothing else that shapes the model (and do differ)."""
    seeds = lambda m: tuple(flat({s: m.lineage.params.get(s, {}) for s in SECTIONS}).get(k) for k in SEEDS)  # noqa: E731
    return _shape(x) == _shape(y) and seeds(x) != seeds(y)


def _figures(ev: Mapping, source: str, other: Mapping) -> tuple[dict, dict] | None:
    da, db = (ev.get("docs") or {}).get(source), (other.get("docs") or {}).get(source)
    if not da or not db:
        return None
    x, y = noise.paired(noise.Docs.of(da), noise.Docs.of(db))
    return {k: float(v[0]) for k, v in x.figures().items()}, {k: float(v[0]) for k, v in y.figures().items()}


def spread(runs: Sequence[tuple[str, Manifest]]) -> dict | None:
    """{"pairs": [[name, name], ...], "sigma": {source or TOTAL: {figure: sigma}}}, or None when no
    two of `runs` are replicates scored on the same held-out blocks."""
    sq: dict[str, dict[str, list[float]]] = {}
    pairs = []
    for (nx, x), (ny, y) in combinations(runs, 2):
        ex, ey = x.eval or {}, y.eval or {}
        if not replicates(x, y) or not ex.get("heldout_blocks") or ex.get("heldout_blocks") != ey.get("heldout_blocks"):
            continue
        per = {s: f for s in ex.get("docs") or {} if (f := _figures(ex, s, ey))}
        if not per:
            continue
        pairs.append([nx, ny])
        for s, (fx, fy) in per.items():
            for k in noise.FIGURES:
                sq.setdefault(s, {}).setdefault(k, []).append((fy[k] - fx[k]) ** 2)
        for k in noise.FIGURES:  # the total's difference is the mean of the sources'
            d = sum(fy[k] - fx[k] for fx, fy in per.values()) / len(per)
            sq.setdefault(TOTAL, {}).setdefault(k, []).append(d ** 2)
    if not pairs:
        return None
    return {"pairs": pairs, "sigma": {s: {k: math.sqrt(sum(v) / len(v) / 2) for k, v in f.items()} for s, f in sq.items()}}


def widen(change: dict, sigma: float | None) -> dict:
    """A change's document interval widened by the seed noise of two single runs (1.96 sqrt(2) sigma,
    in quadrature on each side); "within noise" judged on the result."""
    if sigma is None:
        return {**change, "doc_interval": change["interval"], "seed": None}
    s = 1.96 * math.sqrt(2) * sigma
    c, (lo, hi) = change["change"], change["interval"]
    wide = [c - math.hypot(c - lo, s), c + math.hypot(hi - c, s)]
    return {**change, "doc_interval": [lo, hi], "interval": wide, "seed": sigma,
            "within_noise": not (wide[0] > 0 or wide[1] < 0)}
