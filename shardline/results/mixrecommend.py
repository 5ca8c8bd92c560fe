"""What a mix search recommends from its proxies' measurements, and the rounds that narrow it.

- **The region.** The optimiser scores only mixes where the proxies give evidence: a seeded
  sample of their convex hull (convex combinations of the proxies' mixes, half drawn near its
  middle, half near its faces and corners), plus the proxies themselves. `mix_search.widen` w > 0
  scales that hull by 1 + w about the proxies' mean mix: a trust region past the evidence, named
  so in the report. The bounds hold throughout.
- **The law's best mix** is the candidate with the lowest predicted target under the law chosen
  by leave-one-out error (shardline.results.mixfit), with a jackknife+ interval per source and
  for the target.
- **The decision.** The best measured proxy is the one with the lowest measured target. The law's
  best mix is recommended only when its whole target interval lies below that measurement: its
  predicted gain over the best proxy exceeds the fit's error there (the interval's upper
  half-width). Otherwise there is "no better mix found within error" and the best measured proxy
  is recommended.
- **Rounds** (`mix_search.rounds`): round 0 draws around the line's mix; each later round draws
  around the law's best mix so far (the law's best guess of the best region, whether or not it
  beats the best proxy beyond error yet), more concentrated each time; each fit uses every
  round's runs.

Contract: pure functions of params.yaml, the baseline commit and the measurements: the same runs
give the same candidates (seeded), law, intervals and recommendation.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from shardline.core.sections_search import bounds_of
from shardline.results import mixfit
from shardline.results.mixsearch import (DECIMALS, Proxy, current_mix, plan, source_names,
                                         target_of, target_weights, within)

SPARSE = 0.2  # the Dirichlet over proxies for the half drawn near the hull's faces and corners


def region(params, mixes: np.ndarray) -> np.ndarray:
    """The candidates: mix_search.candidates mixes of the proxies' (widened) hull within the
    bounds, rounded as a proxy's -S passes them, then the proxies' own mixes."""
    s, names = params.mix_search, source_names(params)
    lo, hi = (np.array(x) for x in bounds_of(s, names))
    rng, n = np.random.default_rng([s.seed, 1]), len(mixes)  # stream 1: the optimiser's candidates
    w = np.vstack([rng.dirichlet(np.ones(n), s.candidates // 2),
                   rng.dirichlet(np.full(n, SPARSE), s.candidates - s.candidates // 2)])
    mean = mixes.mean(axis=0)
    c = np.round(mean + (1 + s.widen) * (w @ mixes - mean), DECIMALS)
    c[:, -1] = np.round(1.0 - c[:, :-1].sum(axis=1), DECIMALS)
    return np.vstack([c[within(c, lo, hi)], mixes])


def region_text(params, n: int) -> str:
    w = params.mix_search.widen
    hull = f"the convex hull of the {n} proxies' mixes"
    return hull if not w else (f"{hull}, scaled by {1 + w:g} about their mean mix (mix_search.widen: {w:g}): a "
                               "trust region reaching past the proxies' evidence")


def prediction(f: mixfit.Fit, mix: np.ndarray, weights: np.ndarray, names: list[str]) -> dict:
    """The law's prediction at one mix, per source and for the target: [value, low, high] each."""
    v, lo, hi = (a[0] for a in f.interval(mix[None]))
    t = [float(a[0]) for a in f.interval(mix[None], weights)]
    return {"predicted": {n: [float(v[j]), float(lo[j]), float(hi[j])] for j, n in enumerate(names)},
            "predicted_target": t}


def decide(params, proxies: list[Proxy], measured: dict[str, dict[str, float]]) -> tuple[mixfit.Fit, dict]:
    """The fit and the decision (JSON-ready) from every proxy measured so far."""
    names, weights = source_names(params), target_weights(params)
    x = np.array([[p.mix[n] for n in names] for p in proxies])
    y = np.array([[measured[p.name][n] for n in names] for p in proxies])
    f, laws = mixfit.choose(x, y, weights)
    cands = region(params, x)
    scores = f.predict(cands) @ weights
    best = int(np.argmin(scores))  # argmin: the first of equal scores, so the order decides ties
    targets = y @ weights
    b = int(np.argmin(targets))  # the best measured proxy; the first of equal ones
    optimum = {"mix": {n: float(w) for n, w in zip(names, cands[best])}, **prediction(f, cands[best], weights, names)}
    cur = np.array([current_mix(params)[n] for n in names])
    best_proxy = {"name": proxies[b].name, "mix": proxies[b].mix, "measured": measured[proxies[b].name],
                  "measured_target": float(targets[b]), **prediction(f, x[b], weights, names)}
    value, _, high = optimum["predicted_target"]
    beyond = high < targets[b]
    rec = ({"mix": optimum["mix"], "source": "law", "name": None} if beyond else
           {"mix": proxies[b].mix, "source": "best proxy", "name": proxies[b].name})
    return f, {"law": f.law.name, "laws": laws, "region": region_text(params, len(proxies)), "optimum": optimum,
               "best_proxy": best_proxy, "current": {"mix": current_mix(params), **prediction(f, cur, weights, names)},
               "gain": float(targets[b] - value), "error": float(high - value), "beyond_error": bool(beyond),
               "recommended": rec}


Measure = Callable[[int, dict[str, float], list[Proxy]], dict[str, dict[str, float]]]


def search(params, baseline: str, measure: Measure) -> tuple[list[Proxy], dict[str, dict[str, float]], list[dict]]:
    """Every round: its proxies planned around the centre, `measure(round, centre, proxies)` (the
    per-source figures of each, by name), the next centre the law's best mix from every run so far.
    Returns the proxies in order, their measurements, and what each round drew."""
    s = params.mix_search
    proxies, measured, rounds, centre = [], {}, [], current_mix(params)
    for r in range(s.rounds):
        new = plan(params, baseline, r, centre)
        got = measure(r, centre, new)
        measured.update({p.name: got[p.name] for p in new})
        proxies += new
        rounds.append({"round": r, "centre": centre, "concentration": s.concentration * s.narrow ** r,
                       "best_measured_target": min(target_of(params, measured[p.name]) for p in new)})
        if r + 1 < s.rounds:
            centre = decide(params, proxies, measured)[1]["optimum"]["mix"]
    return proxies, measured, rounds
