"""A mix search's fitted law (shardline.results.mixlaws), its leave-one-out error, the intervals
around what it predicts, and the choice between the two laws.

- **Leave-one-out**: each run is predicted by the law fitted without it (what scikit-learn's
  LeaveOneOut with cross_val_predict gives): the honest error of a law fitted from so few runs.
- **Intervals**: jackknife+ (Barber, Candes, Ramdas and Tibshirani, 2021), from the same
  leave-one-out fits: at a mix x, [min_i (mu_-i(x) - |R_i|), max_i (mu_-i(x) + |R_i|)], where mu_-i
  is the law fitted without run i and R_i that run's leave-one-out residual. So an interval widens
  both with the runs' scatter and where the leave-one-out fits disagree (away from the runs). Taken
  at its extremes, the widest level n runs allow, it covers the measurement with probability at
  least 1 - 2/(n+1) (78% from 8 runs, 92% from 24) whatever the law; the target's interval is
  made the same way from the weighted sums, not from the sources' intervals.
- **The choice**: both laws are fitted (dml only from `min_runs` runs) and the one whose target
  has the lower leave-one-out RMSE is used; a tie goes to regmix, the simpler.

Contract: `fit` and `choose` are deterministic (no seed); the same runs give the same choice,
parameters and intervals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardline.results.mixlaws import LAWS, REGMIX, Law

INTERVAL = "jackknife+ over the leave-one-out fits"


@dataclass(frozen=True)
class Fit:
    law: Law
    params: dict              # the law fitted to every run
    loo_params: list[dict]    # the law fitted without run i, for each i
    measured: np.ndarray      # (n, k) what the runs measured
    loo: np.ndarray           # (n, k) each run's figures predicted by the law fitted without it

    def predict(self, mixes: np.ndarray) -> np.ndarray:
        """(m, k) mixes -> (m, k) predicted per-source figures."""
        return self.law.predict(self.params, np.atleast_2d(np.asarray(mixes, dtype=float)))

    def interval(self, mixes: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """(predicted, low, high) at each mix: (m, k) per source, or (m,) of the weighted sum when
        weights are given (the target)."""
        x = np.atleast_2d(np.asarray(mixes, dtype=float))
        each = np.stack([self.law.predict(p, x) for p in self.loo_params])    # (n, m, k)
        resid, mid = np.abs(self.measured - self.loo), self.predict(x)      # (n, k), (m, k)
        if weights is not None:
            each, resid, mid = each @ weights, np.abs((self.measured - self.loo) @ weights), mid @ weights
        resid = resid[:, None] if weights is not None else resid[:, None, :]
        return mid, np.min(each - resid, axis=0), np.max(each + resid, axis=0)


def fit(mixes: np.ndarray, measured: np.ndarray, law: Law = REGMIX) -> Fit:
    """mixes (n, k) of n proxy runs over k sources, measured (n, k) per-source figures (> 0)."""
    x, y = np.asarray(mixes, dtype=float), np.asarray(measured, dtype=float)
    loo_params, loo = [], np.empty_like(y)
    for i in range(len(x)):  # n is a search's proxies (tens): a fit each is nothing
        p = law.fit(np.delete(x, i, axis=0), np.delete(y, i, axis=0))
        loo_params.append(p)
        loo[i] = law.predict(p, x[i:i + 1])[0]
    return Fit(law, law.fit(x, y), loo_params, y, loo)


def loo_errors(f: Fit, weights: np.ndarray) -> dict:
    """The fit's leave-one-out error: RMSE per source and of the target (the weighted sum), and
    the target's mean absolute relative error."""
    rmse = np.sqrt(np.mean((f.loo - f.measured) ** 2, axis=0))
    t_pred, t_meas = f.loo @ weights, f.measured @ weights
    return {"rmse": [float(v) for v in rmse], "target_rmse": float(np.sqrt(np.mean((t_pred - t_meas) ** 2))),
            "target_mape": float(np.mean(np.abs(t_pred - t_meas) / t_meas))}


def choose(mixes: np.ndarray, measured: np.ndarray, weights: np.ndarray) -> tuple[Fit, dict[str, dict]]:
    """The law with the lower leave-one-out target RMSE, and per law its errors (or why it was
    not fitted)."""
    n, k = np.shape(measured)
    fits, report = {}, {}
    for law in LAWS:
        if n < law.min_runs(k):
            report[law.name] = {"form": law.form, "skipped": f"needs {law.min_runs(k)} runs over {k} sources, "
                                                             f"has {n}"}
            continue
        fits[law.name] = fit(mixes, measured, law)
        e = loo_errors(fits[law.name], weights)
        report[law.name] = {"form": law.form, "loo_target_rmse": e["target_rmse"], "loo_target_mape": e["target_mape"],
                            "loo_rmse": e["rmse"]}
        if not np.isfinite(e["target_rmse"]):  # a diverged fit is no candidate
            del fits[law.name]
    best = min(fits, key=lambda name: report[name]["loo_target_rmse"])  # min: the first of equal errors
    return fits[best], report
