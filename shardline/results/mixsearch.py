"""A mix search's design, as pure functions of params.yaml and the baseline commit: which proxy
runs (their names and mixes, round by round), what each sets, and what the target is. What is
fitted and recommended from their measurements: shardline.results.mixfit and mixrecommend. No
orchestrator here: `shardline mix-search` (shardline/cli/mixsearch.py) runs the proxies as DVC
experiments and hands their measurements back.

Contract: `plan(params, baseline)` is deterministic: the same params and baseline give the same
names and mixes, in the same order, on any machine (numpy's PCG64 from mix_search.seed). The
names carry a digest of everything that decides what a proxy trains (mixes, overrides, the
baseline), so a search with other settings never takes an older search's experiment for its own.
A later round's proxies (`plan(params, baseline, round, centre)`) are drawn around a centre
that earlier rounds' measurements decide; their names carry a digest of their own mixes, as the
validation run's does, so a name always means one mix.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from shardline.core.errors import ConfigError
from shardline.core.sections_search import bounds_of

DECIMALS = 4  # weights as `-S mix.<source>=` passes them: what the proxy ran is what the fit sees
VALIDATION = "best"  # the name suffix of the recommended mix's own proxy


@dataclass(frozen=True)
class Proxy:
    name: str
    mix: dict[str, float]


def source_names(params) -> list[str]:
    return [s.name for s in params.sources]


def current_mix(params) -> dict[str, float]:
    """The line's mix, normalised (equal weights where params.yaml sets none)."""
    raw = params.mix or {n: 1.0 for n in source_names(params)}
    total = sum(raw[n] for n in source_names(params))
    return {n: raw[n] / total for n in source_names(params)}


def within(r: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.all((r >= lo - 1e-12) & (r <= hi + 1e-12), axis=1)


def sample(rng: np.random.Generator, alpha: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int, what: str) -> np.ndarray:
    """n mixes within [lo, hi], rounded to DECIMALS: lo + (1 - sum lo) x Dirichlet(alpha), the
    ones above a max rejected. Shifting by the minimums first means a minimum never rejects."""
    out, free = [], 1.0 - lo.sum()
    for _ in range(1000):
        d = rng.dirichlet(alpha, size=max(1024, n))
        r = np.round(lo + free * d, DECIMALS)
        r[:, -1] = np.round(1.0 - r[:, :-1].sum(axis=1), DECIMALS)  # rounded, still summing to 1
        out += list(r[within(r, lo, hi)])
        if len(out) >= n:
            return np.array(out[:n])
    raise ConfigError(f"mix_search.bounds: too few {what} fall within the maximums (1000 tries); raise them")


def digest(params, baseline: str) -> str:
    s = params.mix_search
    what = {"baseline": baseline, "mix": current_mix(params), "model": s.model, "train": s.train, "runs": s.runs,
            "seed": s.seed, "concentration": s.concentration, "bounds": bounds_of(s, source_names(params))}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:6]


def plan(params, baseline: str, rnd: int = 0, centre: dict[str, float] | None = None) -> list[Proxy]:
    """A round's proxies. Round 0: `mix<seed>-<digest>-<i>`, drawn around the line's mix. Round
    r > 0: `mix<seed>-<digest>-r<r><mixes' digest>-<i>`, drawn around `centre` with the
    concentration times mix_search.narrow^r (narrower each round)."""
    s, names = params.mix_search, source_names(params)
    lo, hi = (np.array(x) for x in bounds_of(s, names))
    around = np.array([(centre or current_mix(params))[n] for n in names])
    # streams: [seed, 0] round 0, [seed, 1] the optimiser's candidates, [seed, 2, r] round r
    rng = np.random.default_rng([s.seed, 0] if rnd == 0 else [s.seed, 2, rnd])
    if rnd:  # centred on the centre itself: sample() draws lo + (1 - sum lo) x Dirichlet
        around = np.maximum((around - lo) / (1 - lo.sum()), 0.01)
    mixes = sample(rng, s.concentration * s.narrow ** rnd * around, lo, hi, s.runs, "drawn mixes")
    tag = f"mix{s.seed}-{digest(params, baseline)}"
    if rnd:
        tag += f"-r{rnd}" + hashlib.sha256(json.dumps(mixes.tolist()).encode()).hexdigest()[:4]
    return [Proxy(f"{tag}-{i:02d}", {n: float(w) for n, w in zip(names, m)}) for i, m in enumerate(mixes)]


def validation_proxy(proxies: list[Proxy], mix: dict[str, float]) -> Proxy:
    """The run of the law's best mix: the proxy that ran that very mix (the law's best is often a
    corner of the proxies' hull: a proxy), else `mix<seed>-<digest>-best-<its digest>`."""
    same = next((p for p in proxies if p.mix == mix), None)
    if same:
        return same
    h = hashlib.sha256(json.dumps(mix, sort_keys=True).encode()).hexdigest()[:4]
    return Proxy(proxies[0].name.rsplit("-", 1)[0] + f"-{VALIDATION}-{h}", mix)


def settings(params, proxy: Proxy) -> list[str]:
    """What the proxy's experiment sets (`dvc exp run -S` each): its mix, the proxy model and steps."""
    s = params.mix_search
    sets = [f"mix.{n}={w}" for n, w in proxy.mix.items()]
    sets += [f"{section}.{k}={json.dumps(v)}" for section in ("model", "train") for k, v in getattr(s, section).items()]
    return sets


def metric(params) -> str:
    """Which held-out figure per source the fit models: loss, or bits per byte for target bpb."""
    return "bpb" if params.mix_search.target == "bpb" else "loss"


def target_weights(params) -> np.ndarray:
    """The fixed weights over sources whose weighted sum is the target (not a proxy's own mix:
    else a mix would score well by weighting its easiest source)."""
    s, names = params.mix_search, source_names(params)
    if s.target == "sources":
        total = sum(s.target_sources.values())
        return np.array([s.target_sources.get(n, 0.0) / total for n in names])
    cur = current_mix(params)
    return np.array([cur[n] for n in names])


def target_of(params, per_source: dict[str, float]) -> float:
    return float(np.dot(target_weights(params), [per_source[n] for n in source_names(params)]))
