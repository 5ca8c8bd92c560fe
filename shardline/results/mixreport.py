"""A mix search's evidence: data/reports/mix_search.json, .md and .png (layout.mix_search_*).

Contract: `result(params, proxies, measured, validation)` is a pure function of the plan and the
proxies' measurements (the design in shardline.results.mixsearch, the law in mixfit): the same
runs give the same JSON, byte for byte, which is how a resumed search is checked against an
unkilled one. `write` renders it: a table of the proxy runs (name, mix, per-source figure,
target), the fit's leave-one-out error, the recommended mix and its predicted gain over the
line's current mix, the validation run's predicted against measured when there is one, and a
plot of predicted (leave-one-out) against measured target per run.
"""

from __future__ import annotations

import io
import json

import numpy as np

from shardline.core import fsio
from shardline.core.layout import Layout
from shardline.results import mixfit
from shardline.results.mixsearch import Proxy, current_mix, metric, recommend, source_names, target_of, target_weights

LAW = "log-linear per source: log L_s = a_s + b_s . mix (least squares)"


def result(params, proxies: list[Proxy], measured: dict[str, dict[str, float]],
           validation: tuple[Proxy, dict[str, float]] | None = None) -> dict:
    """measured: proxy name -> per-source figure (metric(params)), for every proxy."""
    names = source_names(params)
    x = np.array([[p.mix[n] for n in names] for p in proxies])
    y = np.array([[measured[p.name][n] for n in names] for p in proxies])
    f = mixfit.fit(x, y)
    errors = mixfit.loo_errors(f, y, target_weights(params))
    loo_targets = f.loo @ target_weights(params)
    out = {"metric": metric(params), "target": params.mix_search.target,
           "target_weights": dict(zip(names, target_weights(params).tolist())), "current_mix": current_mix(params),
           "proxies": [{"name": p.name, "mix": p.mix, "measured": measured[p.name],
                        "target": target_of(params, measured[p.name]), "loo_predicted_target": float(t)}
                       for p, t in zip(proxies, loo_targets)],
           "fit": {"law": LAW, "intercept": dict(zip(names, f.intercept.tolist())),
                   "coef": {n: dict(zip(names[:-1], c)) for n, c in zip(names, f.coef.tolist())},
                   "loo_rmse": dict(zip(names, errors["rmse"])), "loo_target_rmse": errors["target_rmse"],
                   "loo_target_mape": errors["target_mape"]},
           "recommended": recommend(params, f.predict, proxies), "validation": None}
    if validation:
        vp, vm = validation
        predicted = f.predict(np.array([[vp.mix[n] for n in names]]))[0]
        out["validation"] = {"name": vp.name, "mix": vp.mix, "measured": vm, "measured_target": target_of(params, vm),
                             "predicted": dict(zip(names, predicted.tolist())),
                             "predicted_target": float(predicted @ target_weights(params))}
    return out


def _mix(m: dict[str, float]) -> str:
    return ", ".join(f"{n} {w:.3f}" for n, w in m.items())


def markdown(r: dict, plot_name: str) -> str:
    names, m = list(r["current_mix"]), r["metric"]
    what = {"loss": "held-out loss weighted by the current mix", "bpb": "held-out bits per byte weighted by the "
            "current mix", "sources": "mean held-out loss of " + ", ".join(n for n, w in r["target_weights"].items() if w)}
    lines = ["# Mix search", "", f"Target: {what[r['target']]} (lower is better). {len(r['proxies'])} proxy runs, each "
             "a DVC experiment (`dvc exp show` lists them by name).", "", "## Proxy runs", "",
             "| run | mix | " + " | ".join(f"{n} {m}" for n in names) + " | target | LOO predicted |",
             "|---|---|" + "---|" * len(names) + "---|---|"]
    for p in r["proxies"]:
        lines.append(f"| {p['name']} | {_mix(p['mix'])} | " + " | ".join(f"{p['measured'][n]:.4f}" for n in names)
                     + f" | {p['target']:.4f} | {p['loo_predicted_target']:.4f} |")
    fit, rec = r["fit"], r["recommended"]
    lines += ["", "## Fit", "", f"- law: {fit['law']}",
              f"- leave-one-out RMSE of the target: {fit['loo_target_rmse']:.4f} "
              f"({fit['loo_target_mape']:.2%} mean relative error)",
              "- leave-one-out RMSE per source: " + ", ".join(f"{n} {v:.4f}" for n, v in fit["loo_rmse"].items()),
              "", f"![predicted (leave-one-out) against measured target]({plot_name})", "",
              "## Recommended mix", "", f"- recommended: {_mix(rec['mix'])}",
              f"- current: {_mix(r['current_mix'])}",
              f"- predicted target {rec['predicted_target']:.4f} against {rec['current_predicted_target']:.4f} for the "
              f"current mix: a predicted gain of {rec['predicted_gain']:.4f} "
              f"({rec['predicted_gain'] / rec['current_predicted_target']:.2%})",
              f"- within the fit's own error? {'yes' if rec['predicted_gain'] > fit['loo_target_rmse'] else 'no'}: "
              f"the gain is {'above' if rec['predicted_gain'] > fit['loo_target_rmse'] else 'not above'} the "
              "leave-one-out RMSE", "", "Apply it with `dvc exp run " + " ".join(f"-S mix.{n}={w}" for n, w in
                                                                            rec["mix"].items()) + "`."]
    v = r["validation"]
    lines += ["", "## Validation", ""]
    if v:
        lines.append(f"- `{v['name']}` ran the recommended mix: measured target {v['measured_target']:.4f}, "
                     f"predicted {v['predicted_target']:.4f} (off by {v['measured_target'] - v['predicted_target']:+.4f})")
    else:
        lines.append("- not run (mix_search.validate_best, or `shardline mix-search --validate`)")
    return "\n".join(lines) + "\n"


def _plot(r: dict, out) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meas = [p["target"] for p in r["proxies"]]
    pred = [p["loo_predicted_target"] for p in r["proxies"]]
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.scatter(meas, pred, label="proxy runs (leave-one-out)")
    if r["validation"]:
        v = r["validation"]
        ax.scatter([v["measured_target"]], [v["predicted_target"]], marker="*", s=150, label="recommended mix")
    lo, hi = min(meas + pred), max(meas + pred)
    ax.plot([lo, hi], [lo, hi], color="grey", linewidth=0.8)
    ax.set_xlabel("measured target")
    ax.set_ylabel("predicted target")
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})  # no version stamp: same runs, same bytes
    plt.close(fig)
    fsio.write_bytes(out, buf.getvalue())


def write(r: dict, layout: Layout) -> None:
    layout.reports.mkdir(parents=True, exist_ok=True)
    _plot(r, layout.mix_search_plot)
    fsio.write_bytes(layout.mix_search_result, (json.dumps(r, indent=1) + "\n").encode())
    fsio.write_bytes(layout.mix_search_report, markdown(r, layout.mix_search_plot.name).encode())
