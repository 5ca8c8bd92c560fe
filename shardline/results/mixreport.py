"""A mix search's evidence: data/reports/mix_search.json, .md and .png (layout.mix_search_*), and
the lines `shardline mix-search` prints.

Contract: `result(params, proxies, measured, validation, rounds)` is a pure function of the plan
and the proxies' measurements (the design in shardline.results.mixsearch, the law in mixfit, the
decision in mixrecommend): the same runs give the same JSON, byte for byte, which is how a
resumed search is checked against an unkilled one. Its `headline`, the report's first line and
the terminal's, says what is recommended: the law's best mix only when its predicted gain over the
best measured proxy is beyond the fit's error, else "no better mix found within error" and the
best measured proxy. `markdown` renders the per-source predicted losses with their intervals
beside the best proxy's measurements, both laws' leave-one-out errors and the chosen law's
parameters, the rounds, every proxy run, and the validation run's measurement beside its
prediction and the best proxy's; the plot is predicted (leave-one-out) against measured target.
"""

from __future__ import annotations

import io
import json

import numpy as np

from shardline.core import fsio
from shardline.core.markup import code, text
from shardline.core.layout import Layout
from shardline.results import mixfit, mixrecommend
from shardline.results.mixsearch import Proxy, current_mix, metric, source_names, target_of, target_weights


def _mix(m: dict[str, float]) -> str:
    return ", ".join(f"{n} {w:.4f}" for n, w in m.items())


def _md_mix(m: dict[str, float]) -> str:
    """`_mix` on a page: the source names as text, not markup (shardline.core.markup)."""
    return text(_mix(m))


def _iv(v: list[float]) -> str:
    return f"{v[0]:.4f} [{v[1]:.4f}, {v[2]:.4f}]"


def headline(r: dict) -> str:
    o, b = r["optimum"], r["best_proxy"]
    if r["beyond_error"]:
        return (f"recommended mix {_mix(o['mix'])}: predicted target {_iv(o['predicted_target'])}, {r['gain']:.4f} "
                f"below the best measured proxy's {b['measured_target']:.4f}, beyond the fit's error")
    return (f"no better mix found within error: recommended the best measured proxy {b['name']} ({_mix(b['mix'])}), "
            f"target {b['measured_target']:.4f}; the law's best mix's predicted gain, {r['gain']:+.4f}, is within the "
            f"fit's error, {r['error']:.4f}")


def result(params, proxies: list[Proxy], measured: dict[str, dict[str, float]],
           validation: tuple[Proxy, dict[str, float]] | None = None, rounds: list[dict] | None = None) -> dict:
    """measured: proxy name -> per-source figure (metric(params)), for every proxy."""
    names, weights = source_names(params), target_weights(params)
    f, d = mixrecommend.decide(params, proxies, measured)
    law, laws = d.pop("law"), d.pop("laws")
    e = laws[law]
    out = {"metric": metric(params), "target": params.mix_search.target,
           "target_weights": dict(zip(names, weights.tolist())), "current_mix": current_mix(params),
           "proxies": [{"name": p.name, "round": i // params.mix_search.runs, "mix": p.mix,
                        "measured": measured[p.name], "target": target_of(params, measured[p.name]),
                        "loo_predicted_target": float(t)} for i, (p, t) in enumerate(zip(proxies, f.loo @ weights))],
           "rounds": rounds,
           "fit": {"law": law, "form": f.law.form, "params": f.law.table(f.params, names),
                   "interval": f"{mixfit.INTERVAL}: at least {1 - 2 / (len(proxies) + 1):.0%} cover a new run "
                               f"drawn as these {len(proxies)} were (jackknife+'s bound; a mix the optimiser picked "
                               "is not such a draw, so there it is a guide)",
                   "loo_rmse": dict(zip(names, e["loo_rmse"])), "loo_target_rmse": e["loo_target_rmse"],
                   "loo_target_mape": e["loo_target_mape"], "laws": laws},
           **d, "validation": None}
    out["headline"] = headline(out)
    if validation:
        vp, vm = validation
        at = mixrecommend.prediction(f, np.array([vp.mix[n] for n in names]), weights, names)
        out["validation"] = {"name": vp.name, "mix": vp.mix, "measured": vm, "measured_target": target_of(params, vm),
                             **at}
    return out


def terminal(r: dict) -> list[str]:
    """What `shardline mix-search` prints: the headline, the law, and the validation's three numbers."""
    laws = ", ".join(f"{n} {v['loo_target_rmse']:.4f}" for n, v in r["fit"]["laws"].items() if "skipped" not in v)
    lines = [r["headline"], f"law: {r['fit']['law']} (leave-one-out target RMSE: {laws}); searched {r['region']}"]
    if r["validation"]:
        v, b = r["validation"], r["best_proxy"]
        lines.append(f"validation target: measured {v['measured_target']:.4f} (run {v['name']}) | predicted "
                     f"{_iv(v['predicted_target'])} | best proxy {b['measured_target']:.4f} ({b['name']})")
    return lines


def _per_source(r: dict) -> list[str]:
    names, o, b, c = list(r["current_mix"]), r["optimum"], r["best_proxy"], r["current"]
    lines = [f"| {text(r['metric'])} | law's best mix: predicted | best proxy {code(b['name'], cell=True)}: measured | "
             "best proxy: predicted | current mix: predicted |", "|---|---|---|---|---|",
             f"| target | {_iv(o['predicted_target'])} | {b['measured_target']:.4f} | {_iv(b['predicted_target'])} | "
             f"{_iv(c['predicted_target'])} |"]
    return lines + [f"| {text(n)} | {_iv(o['predicted'][n])} | {b['measured'][n]:.4f} | {_iv(b['predicted'][n])} | "
                    f"{_iv(c['predicted'][n])} |" for n in names]


def _validation(r: dict) -> list[str]:
    v, b = r["validation"], r["best_proxy"]
    if not v:
        return ["- not run (mix_search.validate_best, or `shardline mix-search --validate`)"]
    lines = [f"{code(v['name'])} ran the law's best mix ({_md_mix(v['mix'])}).", "",
             f"| {text(r['metric'])} | validation run: measured | its prediction | best proxy "
             f"{code(b['name'], cell=True)}: measured |",
             "|---|---|---|---|",
             f"| target | {v['measured_target']:.4f} | {_iv(v['predicted_target'])} | {b['measured_target']:.4f} |"]
    return lines + [f"| {text(n)} | {v['measured'][n]:.4f} | {_iv(v['predicted'][n])} | {b['measured'][n]:.4f} |"
                    for n in r["current_mix"]]


def _fit(r: dict, plot_name: str) -> list[str]:
    fit, names = r["fit"], list(r["current_mix"])
    lines = ["| law | form | leave-one-out RMSE, target | per source |", "|---|---|---|---|"]
    for n, v in fit["laws"].items():
        per = ", ".join(f"{text(s)} {e:.4f}" for s, e in zip(names, v.get("loo_rmse", [])))
        err = (f"not fitted: {text(v['skipped'])} | |" if "skipped" in v else
               f"{v['loo_target_rmse']:.4f} ({v['loo_target_mape']:.2%}) | {per} |")
        lines.append(f"| {n}{' (chosen)' if n == fit['law'] else ''} | {v['form']} | {err}")
    keys = list(next(iter(fit["params"].values())))
    lines += ["", f"Chosen by the lower leave-one-out RMSE of the target: **{fit['law']}**. Its parameters (the last "
              "source's mix column is the reference):", "", "| source | " + " | ".join(keys) + " |",
              "|---|" + "---|" * len(keys)]
    lines += [f"| {text(n)} | " + " | ".join(f"{p[k]:.4f}" for k in keys) + " |" for n, p in fit["params"].items()]
    return lines + ["", f"Intervals: {fit['interval']}.", "",
                    f"![predicted (leave-one-out) against measured target]({plot_name})"]


def markdown(r: dict, plot_name: str) -> str:
    names, b, rec = list(r["current_mix"]), r["best_proxy"], r["recommended"]
    what = {"loss": "held-out loss weighted by the current mix", "bpb": "held-out bits per byte weighted by the "
            "current mix", "sources": "held-out loss weighted " + ", ".join(f"{text(n)} {w:.2f}" for n, w in
                                                                          r["target_weights"].items() if w)}
    lines = [f"# Mix search: {text(r['headline'])}", "", f"Target: {what[r['target']]} (lower is better). "
             f"{len(r['proxies'])} proxy runs in {len(r['rounds'] or [0])} round(s), each a DVC experiment "
             "(`dvc exp show` lists them by name).", "", "## Recommendation", "",
             f"- recommended: {_md_mix(rec['mix'])}, "
             + ("the law's best mix" if rec["source"] == "law" else f"the best measured proxy {code(rec['name'])}"),
             f"- searched: {text(r['region'])}",
             f"- the law's best mix: {_md_mix(r['optimum']['mix'])}, predicted gain over the best measured proxy "
             f"{r['gain']:+.4f}, the fit's error there {r['error']:.4f} (the upper half of its target interval): "
             + ("beyond it" if r["beyond_error"] else "within it"),
             f"- the best measured proxy: {code(b['name'])} ({_md_mix(b['mix'])})",
             f"- current: {_md_mix(r['current_mix'])}",
             "", "Apply it with " + code("dvc exp run " + " ".join(f"-S mix.{n}={w}" for n, w in rec["mix"].items()))
             + ".",
             "", "Per source, predicted with its interval [low, high]:", "", *_per_source(r),
             "", "## Validation", "", *_validation(r), "", "## Fit", "", *_fit(r, plot_name)]
    if r["rounds"]:
        lines += ["", "## Rounds", "", "| round | drawn around | concentration | best measured target |",
                  "|---|---|---|---|"]
        lines += [f"| {x['round']} | {_md_mix(x['centre'])} | {x['concentration']:g} | "
                  f"{x['best_measured_target']:.4f} |"
                  for x in r["rounds"]]
    lines += ["", "## Proxy runs", "", "| run | round | mix | "
              + " | ".join(f"{text(n)} {text(r['metric'])}" for n in names)
              + " | target | LOO predicted |", "|---|---|---|" + "---|" * len(names) + "---|---|"]
    lines += [f"| {text(p['name'])} | {p['round']} | {_md_mix(p['mix'])} | "
              + " | ".join(f"{p['measured'][n]:.4f}" for n in names)
              + f" | {p['target']:.4f} | {p['loo_predicted_target']:.4f} |" for p in r["proxies"]]
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
        ax.scatter([v["measured_target"]], [v["predicted_target"][0]], marker="*", s=150, label="the law's best mix")
        meas, pred = meas + [v["measured_target"]], pred + [v["predicted_target"][0]]
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
