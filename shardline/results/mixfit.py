"""The fitted law of a mix search: mix -> each source's held-out loss (or bits per byte), with its
own leave-one-out error.

The model, per source s: log L_s(r) = a_s + sum_j b_sj r_j, i.e. L_s = exp(a_s + b_s . r), the
Data Mixing Laws form (Ye et al., 2024) without its constant term, fitted by ordinary least
squares (numpy's lstsq on the centred columns, as scikit-learn's LinearRegression fits it: a
test holds the two equal; scikit-learn, with scipy and joblib under it, is no longer installed
for these few lines). Why this and not LightGBM as RegMix (Liu et al., 2024)
uses: RegMix fits hundreds of proxy runs; a search here has about 8, and k sources give k
coefficients per source; a boosted tree on 8 points memorises them and says nothing between
them, and its cross-validated error would show it. The last mix column is left out: the weights
sum to 1, so with an intercept it is the others' complement (the fit would not be unique).

Contract: `fit(mixes, measured)` is deterministic (a closed-form least squares fit, no seed), and
its `loo` predictions are those of the same model fitted without that run (what sklearn's
LeaveOneOut with cross_val_predict gives): the honest error of a law fitted from so few runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Fit:
    intercept: np.ndarray      # (k,) one per source
    coef: np.ndarray           # (k, k-1) per source, over the mix columns but the last
    loo: np.ndarray            # (n, k) each run's figures predicted by the law fitted without it

    def predict(self, mixes: np.ndarray) -> np.ndarray:
        """(n, k) mixes -> (n, k) predicted per-source figures."""
        x = np.atleast_2d(np.asarray(mixes, dtype=float))[:, :-1]
        return np.exp(x @ self.coef.T + self.intercept)


def _least_squares(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(intercept (k,), coef (k, m)) of y (n, k) on x (n, m): one fit per column of y."""
    x_mean, y_mean = x.mean(axis=0), y.mean(axis=0)
    coef = np.linalg.lstsq(x - x_mean, y - y_mean, rcond=None)[0].T
    return y_mean - coef @ x_mean, coef


def fit(mixes: np.ndarray, measured: np.ndarray) -> Fit:
    """mixes (n, k) of n proxy runs over k sources, measured (n, k) per-source figures (> 0)."""
    x = np.asarray(mixes, dtype=float)[:, :-1]
    y = np.log(np.asarray(measured, dtype=float))
    intercept, coef = _least_squares(x, y)
    loo = np.empty_like(y)
    for i in range(len(x)):  # n is a search's proxies (~8): a fit each is nothing
        a, b = _least_squares(np.delete(x, i, axis=0), np.delete(y, i, axis=0))
        loo[i] = b @ x[i] + a
    return Fit(np.atleast_1d(intercept), np.atleast_2d(coef), np.exp(loo))


def loo_errors(f: Fit, measured: np.ndarray, weights: np.ndarray) -> dict:
    """The fit's leave-one-out error: RMSE per source and of the target (the weighted sum), and
    the target's mean absolute relative error."""
    measured = np.asarray(measured, dtype=float)
    rmse = np.sqrt(np.mean((f.loo - measured) ** 2, axis=0))
    t_pred, t_meas = f.loo @ weights, measured @ weights
    return {"rmse": [float(v) for v in rmse], "target_rmse": float(np.sqrt(np.mean((t_pred - t_meas) ** 2))),
            "target_mape": float(np.mean(np.abs(t_pred - t_meas) / t_meas))}
