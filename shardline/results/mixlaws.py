"""The two published laws a mix search fits, mix r (weights summing to 1) -> each source's
held-out loss L_s, and how each is fitted with numpy alone (scipy is not a dependency).

- `regmix`, RegMix's regression (Liu et al., 2024) over many small proxies, here linear on the
  log loss: log L_s = a_s + b_s . r, by least squares (numpy's lstsq on the centred columns, as
  scikit-learn's LinearRegression fits it; a test holds the two equal within 1e-12). Closed form.
- `dml`, Data Mixing Laws (Ye et al., 2024): L_s = c_s + k_s exp(t_s . r), fitted per source to
  the squared loss residuals by variable projection: for a given t, (c, k) is a linear least
  squares; t is moved by Levenberg-Marquardt (Marquardt's diagonal scaling, Kaufman's Jacobian)
  on what is left. c and k are held >= 0, as in the law (c the loss no mix removes, k e^(t.r) what
  the mix does): without that, runs with no curvature send t to 0 and c, k to -inf and +inf
  along a ridge of equal fits, a line in disguise whose digits depend on rounding. It starts from
  the regmix fit's t = b (the log-linear law's exponents: the regmix curve is c = 0, k = exp(a)
  there), so it ends no worse than that curve, and takes a step only when it lowers the
  residual, at most LM_ITERS of them.

In both, the last source's column is left out of r: the weights sum to 1, so it is the others'
complement (with an intercept, or k, the fit would not be unique); its t (or b) is 0 by
convention. A law needs `min_runs(k)` runs over k sources to leave its leave-one-out fits a
residual degree of freedom; with fewer, the search does not fit it (and says so).

Contract: `fit` is deterministic (no seed, a fixed iteration budget) and `predict` maps (n, k)
mixes to (n, k) figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

LM_ITERS = 50  # steps at most; it stops sooner once a step lowers the residual by less than TOL of it
TOL = 1e-10
EXP_CAP = 50.0  # exponents past this are clipped: a wild LM trial step must not overflow to inf


@dataclass(frozen=True)
class Law:
    name: str
    form: str
    fit: Callable[[np.ndarray, np.ndarray], dict]       # mixes (n, k), measured (n, k) -> parameters
    predict: Callable[[dict, np.ndarray], np.ndarray]   # parameters, mixes (m, k) -> (m, k)
    min_runs: Callable[[int], int]                      # k sources -> the fewest runs it is fitted from

    def table(self, params: dict, names: list[str]) -> dict[str, dict]:
        """Per source, its parameters by name (the last source's mix column is the reference)."""
        out = {}
        for s, n in enumerate(names):
            row = {key: float(v[s]) for key, v in params.items() if np.ndim(v) == 1}
            row.update({f"{key}.{m}": float(v[s, j]) for key, v in params.items() if np.ndim(v) == 2
                        for j, m in enumerate(names[:-1])})
            out[n] = row
        return out


def _least_squares(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(intercept (k,), coef (k, m)) of y (n, k) on x (n, m): one fit per column of y."""
    x_mean, y_mean = x.mean(axis=0), y.mean(axis=0)
    coef = np.linalg.lstsq(x - x_mean, y - y_mean, rcond=None)[0].T
    return y_mean - coef @ x_mean, coef


def _regmix_fit(mixes: np.ndarray, measured: np.ndarray) -> dict:
    a, b = _least_squares(mixes[:, :-1], np.log(measured))
    return {"a": np.atleast_1d(a), "b": np.atleast_2d(b)}


def _regmix_predict(p: dict, mixes: np.ndarray) -> np.ndarray:
    return np.exp(np.atleast_2d(mixes)[:, :-1] @ p["b"].T + p["a"])


def _linear_part(t: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For given t: the basis [1, e^(x.t)], the best (c, k) >= 0 by least squares, and the residual.
    Two unknowns: the unconstrained solution if it is >= 0, else the better of the two edges."""
    basis = np.column_stack([np.ones(len(x)), np.exp(np.clip(x @ t, -EXP_CAP, EXP_CAP))])
    ck = np.linalg.lstsq(basis, y, rcond=None)[0]
    if np.any(ck < 0):
        e = basis[:, 1]
        edges = [np.array([0.0, max(float(e @ y) / float(e @ e), 0.0)]), np.array([max(float(y.mean()), 0.0), 0.0])]
        ck = min(edges, key=lambda v: float(np.sum((y - basis @ v) ** 2)))
    return basis, ck, y - basis @ ck


def _variable_projection(x: np.ndarray, y: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(c, k, t...) of one source: t by Levenberg-Marquardt on the residual left once (c, k) are
    solved for (Golub and Pereyra's variable projection; the Jacobian in Kaufman's form)."""
    basis, ck, r = _linear_part(t, x, y)
    sse, damping = float(r @ r), 1e-3
    for _ in range(LM_ITERS):
        d = ck[1] * basis[:, 1:2] * x                                    # d(basis @ ck)/dt
        free = basis[:, ck > 0]                                          # the (c, k) not held at 0
        jac = -(d - free @ np.linalg.lstsq(free, d, rcond=None)[0])       # what they cannot absorb of it
        scale = np.sqrt(np.maximum(np.sum(jac ** 2, axis=0), 1e-12))  # Marquardt: damp each t in its own units
        while damping < 1e12:
            a = np.vstack([jac, np.sqrt(damping) * np.diag(scale)])
            step = np.linalg.lstsq(a, np.concatenate([-r, np.zeros(len(t))]), rcond=None)[0]
            new = _linear_part(t + step, x, y)
            sse_new = float(new[2] @ new[2])
            if np.isfinite(sse_new) and sse_new < sse:
                break
            damping *= 4
        else:
            break  # no step lowers the residual: a minimum, as far as LM can tell
        done = sse - sse_new <= TOL * sse
        t, (basis, ck, r), sse, damping = t + step, new, sse_new, max(damping / 3, 1e-12)
        if done:
            break
    return np.concatenate([ck, t])


def _dml_fit(mixes: np.ndarray, measured: np.ndarray) -> dict:
    start, x = _regmix_fit(mixes, measured), mixes[:, :-1]
    thetas = [_variable_projection(x, measured[:, s], start["b"][s]) for s in range(measured.shape[1])]
    return {"c": np.array([t[0] for t in thetas]), "k": np.array([t[1] for t in thetas]),
            "t": np.array([t[2:] for t in thetas])}


def _dml_predict(p: dict, mixes: np.ndarray) -> np.ndarray:
    x = np.atleast_2d(mixes)[:, :-1]
    return p["c"] + p["k"] * np.exp(np.clip(x @ p["t"].T, -EXP_CAP, EXP_CAP))


REGMIX = Law("regmix", "RegMix: log L_s = a_s + b_s . r (least squares on the log loss)",
             _regmix_fit, _regmix_predict, lambda k: 2)
DML = Law("dml", "Data Mixing Laws: L_s = c_s + k_s exp(t_s . r) (variable projection, LM from the RegMix fit)",
          _dml_fit, _dml_predict, lambda k: k + 3)  # k + 1 parameters a source, + 2: a residual in every LOO fit
LAWS = (REGMIX, DML)  # in order of preference: a tie in leave-one-out error goes to the simpler
