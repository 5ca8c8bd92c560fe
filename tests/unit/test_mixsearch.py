"""The mix search's pure parts (shardline.results.mixsearch, mixfit, mixreport; the mix_search
section): the draw and its bounds, the names, the fit and its leave-one-out error, the optimiser,
and the section's refusals. No DVC: `shardline mix-search` itself is tests/integration/test_mixsearch.py."""

from __future__ import annotations

import numpy as np
import pytest

from shardline.core import config
from shardline.core.errors import ConfigError
from shardline.results import mixfit, mixreport, mixsearch

NAMES = ("code", "prose", "noise")


def params(**search):
    return config.parse({"sources": [{"name": n, "uri": f"/nowhere/{n}", "format": "txt"} for n in NAMES],
                         "mix": {"code": 0.6, "prose": 0.3, "noise": 0.1},
                         "mix_search": {"runs": 4, "bounds": {"noise": {"min": 0.05, "max": 0.2}}, **search}})


def test_the_draw_is_pinned_named_by_seed_and_settings_and_within_bounds():
    proxies = mixsearch.plan(params(), "abc")
    assert [(p.name, p.mix) for p in proxies] == [
        ("mix0-19feac-00", {"code": 0.4816, "prose": 0.3217, "noise": 0.1967}),
        ("mix0-19feac-01", {"code": 0.5592, "prose": 0.3368, "noise": 0.104}),
        ("mix0-19feac-02", {"code": 0.641, "prose": 0.1978, "noise": 0.1612}),
        ("mix0-19feac-03", {"code": 0.5593, "prose": 0.3273, "noise": 0.1134})]
    assert mixsearch.settings(params(), proxies[0]) == [
        "mix.code=0.4816", "mix.prose=0.3217", "mix.noise=0.1967", "model.n_layer=1", "train.steps=40",
        "train.warmup_steps=4", "train.checkpoint_every=40"]
    # another seed, baseline commit or proxy setting: other names, never an older search's experiments
    assert mixsearch.plan(params(seed=1), "abc")[0].name.startswith("mix1-")
    assert mixsearch.plan(params(), "abd")[0].name != proxies[0].name
    assert mixsearch.plan(params(train={"steps": 8}), "abc")[0].name != proxies[0].name


def test_tight_bounds_hold_for_every_mix_and_every_candidate():
    p = params(runs=50, bounds={"code": {"min": 0.5, "max": 0.6}, "noise": {"min": 0.05, "max": 0.1}})
    mixes = np.array([[x.mix[n] for n in NAMES] for x in mixsearch.plan(p, "abc")])
    assert len({tuple(m) for m in mixes}) == 50
    assert np.all(mixes[:, 0] >= 0.5) and np.all(mixes[:, 0] <= 0.6) and np.all(mixes[:, 2] >= 0.05)
    assert np.all(mixes[:, 2] <= 0.1) and np.all(mixes[:, 1] >= 0.01)
    assert np.allclose(mixes.sum(axis=1), 1.0, atol=1e-9)
    rec = mixsearch.recommend(p, lambda m: np.asarray(m) * 0 + [[1.0, 2.0, 3.0]], [])
    assert 0.5 <= rec["mix"]["code"] <= 0.6 and 0.05 <= rec["mix"]["noise"] <= 0.1


def law(mixes):
    """A planted law: each source's loss falls with its own weight; noise's barely (it cannot be learned)."""
    a, b = np.array([1.6, 1.8, 2.0]), np.array([[-0.5, 0.0], [0.0, -0.6], [0.0, 0.0]])
    return np.exp(np.asarray(mixes)[:, :-1] @ b.T + a + np.asarray(mixes)[:, -1:] * [[0.0, 0.0, -0.01]])


def test_the_fit_recovers_a_log_linear_law_and_its_leave_one_out_error_is_honest():
    x = np.array([[p.mix[n] for n in NAMES] for p in mixsearch.plan(params(runs=8), "abc")])
    f = mixfit.fit(x, law(x))
    assert np.allclose(f.predict(x), law(x), rtol=1e-9) and np.allclose(f.loo, law(x), rtol=1e-9)
    assert mixfit.loo_errors(f, law(x), np.array([0.6, 0.3, 0.1]))["target_rmse"] < 1e-9
    noisy = law(x) * np.exp(np.random.default_rng(0).normal(0, 0.02, x.shape))
    errors = mixfit.loo_errors(mixfit.fit(x, noisy), noisy, np.array([0.6, 0.3, 0.1]))
    assert 0.005 < errors["target_rmse"] < 0.2  # noise shows up in the held-out error, not hidden by the fit


def test_the_fit_is_scikit_learns_linear_regression_and_its_leave_one_out():
    """mixfit's numpy least squares against what it replaced, scikit-learn itself (the reference
    extra), on noisy runs of a 3-source search and a 4-source one."""
    from sklearn.linear_model import LinearRegression
    from sklearn.model_selection import LeaveOneOut, cross_val_predict

    rng = np.random.default_rng(5)
    for n, k in ((8, 3), (12, 4)):
        mixes = rng.dirichlet(np.ones(k), n)
        measured = np.exp(rng.normal(1.5, 0.3, (n, k)))
        f = mixfit.fit(mixes, measured)
        x, y = mixes[:, :-1], np.log(measured)
        theirs = LinearRegression().fit(x, y)
        np.testing.assert_allclose(f.intercept, theirs.intercept_, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(f.coef, theirs.coef_, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.log(f.loo), cross_val_predict(LinearRegression(), x, y, cv=LeaveOneOut()),
                                   rtol=1e-12, atol=1e-12)


def test_the_optimiser_moves_weight_off_the_source_nobody_learns_from():
    p = params(runs=8, target="sources", target_sources=["code", "prose"])
    proxies = mixsearch.plan(p, "abc")
    x = np.array([[q.mix[n] for n in NAMES] for q in proxies])
    f = mixfit.fit(x, law(x))
    rec = mixsearch.recommend(p, f.predict, proxies)
    assert rec["mix"]["noise"] == pytest.approx(0.05, abs=0.01)  # down to its min bound, from 0.1
    assert rec["predicted_gain"] > 0
    assert rec == mixsearch.recommend(p, f.predict, proxies)  # deterministic: the same candidates, the same pick


def test_the_result_is_the_same_for_the_same_runs_and_has_every_piece():
    p = params(runs=8, validate_best=True)
    proxies = mixsearch.plan(p, "abc")
    x = np.array([[q.mix[n] for n in NAMES] for q in proxies])
    measured = {q.name: dict(zip(NAMES, map(float, y))) for q, y in zip(proxies, law(x))}
    r = mixreport.result(p, proxies, measured)
    assert r == mixreport.result(p, proxies, dict(reversed(measured.items())))
    assert [q["name"] for q in r["proxies"]] == [q.name for q in proxies]
    assert r["proxies"][0]["target"] == pytest.approx(float(law(x[:1])[0] @ [0.6, 0.3, 0.1]))
    best = mixsearch.validation_proxy(proxies, r["recommended"]["mix"])
    assert best.name == "mix0-" + proxies[0].name.split("-")[1] + "-best"
    truth = dict(zip(NAMES, map(float, law(np.array([[best.mix[n] for n in NAMES]]))[0])))
    v = mixreport.result(p, proxies, measured, (best, truth))["validation"]
    assert v["predicted_target"] == pytest.approx(v["measured_target"], rel=1e-9)
    md = mixreport.markdown(r, "mix_search.png")
    assert "| mix0-" in md and "leave-one-out RMSE of the target" in md and "predicted gain" in md


@pytest.mark.parametrize("search, line", [
    ({"bounds": {"code": {"min": 0.6, "max": 0.4}}}, "mix_search.bounds.code: min 0.6 > max 0.4; make min <= max"),
    ({"bounds": {"code": {"min": 0.6}, "prose": {"min": 0.5}}},
     "mix_search.bounds: the minimums sum to 1.11 > 1, so no mix satisfies them; lower them"),
    ({"bounds": {n: {"max": 0.3} for n in NAMES}},
     "mix_search.bounds: the maximums sum to 0.9 < 1, so no mix satisfies them; raise them"),
    ({"bounds": {"cod": {"min": 0.1}}}, "mix_search.bounds.cod: unknown source; bounds are per source of `sources`"),
    ({"target": "sources"}, "mix_search.target_sources: required with target: sources; list the sources whose "
                            "loss counts"),
    ({"train": {"stepz": 3}}, "mix_search.train.stepz: unknown key"),
])
def test_bad_settings_are_refused_in_one_line_naming_the_field(search, line):
    with pytest.raises(ConfigError) as e:
        params(**{"bounds": {}, **search})
    assert str(e.value) == f"params.yaml: 1 problem(s):\n  {line}"
