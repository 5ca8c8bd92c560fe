"""The mix search's pure parts (shardline.results.mixsearch, mixlaws, mixfit, mixrecommend,
mixreport; the mix_search section): the draw, its rounds and its bounds, the names, both laws and
their leave-one-out error, the intervals, the region the optimiser keeps to, the report, and the
section's refusals. No DVC: `shardline mix-search` itself is tests/integration/test_mixsearch.py;
a search against a planted ground truth is tests/unit/test_mixsearch_planted.py."""

from __future__ import annotations

import numpy as np
import pytest

from shardline import paramsfile
from shardline.core.errors import ConfigError
from shardline.results import mixfit, mixlaws, mixrecommend, mixreport, mixsearch

NAMES = ("code", "prose", "noise")


def params(**search):
    return paramsfile.parse({"sources": [{"name": n, "uri": f"/nowhere/{n}", "format": "txt"} for n in NAMES],
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


def test_a_later_round_is_drawn_around_its_centre_narrower_and_named_by_its_mixes():
    p = params(runs=200, narrow=2.0)
    centre = {"code": 0.3, "prose": 0.6, "noise": 0.1}
    later = mixsearch.plan(p, "abc", 1, centre)
    mixes = np.array([[x.mix[n] for n in NAMES] for x in later])
    round0 = mixsearch.plan(p, "abc")
    assert later[0].name.startswith(round0[0].name[:-3] + "-r1") and later[0].name.endswith("-00")
    assert len(later[0].name) == len(round0[0].name) + 7  # -r1 and 4 hex digits of its mixes' digest
    assert np.abs(mixes.mean(axis=0) - [0.3, 0.6, 0.1]).max() < 0.01  # around the centre, not the line's mix
    first = np.array([[x.mix[n] for n in NAMES] for x in round0])
    assert mixes[:, 0].std() < 0.8 * first[:, 0].std()  # concentration 16, not 8
    assert mixsearch.plan(p, "abc", 1, {**centre, "code": 0.31, "prose": 0.59})[0].name != later[0].name


def test_tight_bounds_hold_for_every_mix_and_every_candidate_even_widened():
    p = params(runs=50, bounds={"code": {"min": 0.5, "max": 0.6}, "noise": {"min": 0.05, "max": 0.1}})
    mixes = np.array([[x.mix[n] for n in NAMES] for x in mixsearch.plan(p, "abc")])
    assert len({tuple(m) for m in mixes}) == 50
    assert np.all(mixes[:, 0] >= 0.5) and np.all(mixes[:, 0] <= 0.6) and np.all(mixes[:, 2] >= 0.05)
    assert np.all(mixes[:, 2] <= 0.1) and np.all(mixes[:, 1] >= 0.01)
    assert np.allclose(mixes.sum(axis=1), 1.0, atol=1e-9)
    for widen in (0.0, 3.0):
        c = mixrecommend.region(params(runs=50, widen=widen, bounds=p.mix_search.model_dump()["bounds"]), mixes)
        assert np.all(mixes[:, 0].min() >= 0.5) and np.all(c[:, 0] >= 0.5) and np.all(c[:, 0] <= 0.6)
        assert np.all(c[:, 2] >= 0.05) and np.all(c[:, 2] <= 0.1) and np.allclose(c.sum(axis=1), 1.0, atol=1e-9)


def law(mixes):
    """A planted law: each source's loss falls with its own weight; noise's barely (it cannot be learned)."""
    a, b = np.array([1.6, 1.8, 2.0]), np.array([[-0.5, 0.0], [0.0, -0.6], [0.0, 0.0]])
    return np.exp(np.asarray(mixes)[:, :-1] @ b.T + a + np.asarray(mixes)[:, -1:] * [[0.0, 0.0, -0.01]])


def test_the_fit_recovers_a_log_linear_law_and_its_leave_one_out_error_is_honest():
    x = np.array([[p.mix[n] for n in NAMES] for p in mixsearch.plan(params(runs=8), "abc")])
    f = mixfit.fit(x, law(x))
    assert np.allclose(f.predict(x), law(x), rtol=1e-9) and np.allclose(f.loo, law(x), rtol=1e-9)
    assert mixfit.loo_errors(f, np.array([0.6, 0.3, 0.1]))["target_rmse"] < 1e-9
    noisy = law(x) * np.exp(np.random.default_rng(0).normal(0, 0.02, x.shape))
    errors = mixfit.loo_errors(mixfit.fit(x, noisy), np.array([0.6, 0.3, 0.1]))
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
        np.testing.assert_allclose(f.params["a"], theirs.intercept_, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(f.params["b"], theirs.coef_, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.log(f.loo), cross_val_predict(LinearRegression(), x, y, cv=LeaveOneOut()),
                                   rtol=1e-12, atol=1e-12)


def dml(mixes):
    """A planted Data Mixing Law: c + k exp(t . r), each source learning from itself, b a little from a."""
    c, k = np.array([1.5, 1.8, 4.0]), np.array([1.0, 1.2, 0.3])
    t = np.array([[-4.0, 0.0, 0.0], [-0.5, -5.0, 0.0], [0.0, 0.0, -1.0]])
    return c + k * np.exp(np.asarray(mixes) @ t.T)


def test_the_data_mixing_law_is_recovered_and_each_law_is_chosen_on_its_own_data():
    x = np.array([[q.mix[n] for n in NAMES] for q in mixsearch.plan(params(runs=12), "abc")])
    p = mixlaws.DML.fit(x, dml(x))
    np.testing.assert_allclose(p["c"], [1.5, 1.8, 4.0], rtol=1e-6)
    # the last mix column is the reference: noise's exp(-r_noise) = exp(-1) exp(r_code + r_prose)
    np.testing.assert_allclose(p["k"], [1.0, 1.2, 0.3 * np.exp(-1.0)], rtol=1e-6)
    np.testing.assert_allclose(p["t"], [[-4.0, 0.0], [-0.5, -5.0], [1.0, 1.0]], atol=1e-6)
    w, rng = np.array([0.6, 0.3, 0.1]), np.random.default_rng(1)
    chosen, laws = mixfit.choose(x, dml(x) * np.exp(rng.normal(0, 0.002, x.shape)), w)
    assert chosen.law is mixlaws.DML and laws["dml"]["loo_target_rmse"] < laws["regmix"]["loo_target_rmse"] / 2
    chosen, laws = mixfit.choose(x, law(x) * np.exp(rng.normal(0, 0.002, x.shape)), w)
    assert chosen.law is mixlaws.REGMIX, laws
    few = mixfit.choose(x[:5], dml(x[:5]), w)[1]["dml"]
    assert few == {"form": mixlaws.DML.form, "skipped": "needs 6 runs over 3 sources, has 5"}


def test_jackknife_intervals_cover_fresh_measurements_as_often_as_they_claim():
    """n = 12 runs: jackknife+ at its extremes claims >= 1 - 2/13 = 85%; 400 fresh noisy
    measurements inside the runs' hull, against the law fitted on 12 noisy runs."""
    rng = np.random.default_rng(2)
    x = np.array([[q.mix[n] for n in NAMES] for q in mixsearch.plan(params(runs=12), "abc")])
    f = mixfit.fit(x, dml(x) * np.exp(rng.normal(0, 0.01, x.shape)), mixlaws.DML)
    at = rng.dirichlet(np.ones(12), 400) @ x
    fresh = dml(at) * np.exp(rng.normal(0, 0.01, at.shape))
    mid, lo, hi = f.interval(at)
    assert np.all(lo <= mid) and np.all(mid <= hi)
    inside = np.mean((lo <= fresh) & (fresh <= hi), axis=0)
    assert inside.tolist() == pytest.approx([1.0, 0.9875, 1.0], abs=1e-9)  # >= 85% each, as claimed
    t_mid, t_lo, t_hi = f.interval(at, np.array([0.6, 0.3, 0.1]))
    assert np.allclose(t_mid, mid @ [0.6, 0.3, 0.1]) and np.all(t_hi - t_lo < (hi - lo) @ [0.6, 0.3, 0.1] + 1e-12)


def two_sources(**search):
    return paramsfile.parse({"sources": [{"name": n, "uri": f"/nowhere/{n}", "format": "txt"} for n in ("code", "prose")],
                         "mix": {"code": 0.8, "prose": 0.2}, "mix_search": {"runs": 4, "seed": 1, **search}})


def test_the_recommendation_stays_in_the_proxies_region_unless_widened_and_says_which():
    """The issue's case: proxies with code in [0.59, 0.91] and a law that keeps gaining toward
    code 0.99: the law's best mix stays at the proxies' edge; widened, it may leave it, and says so."""
    p = two_sources()
    proxies = mixsearch.plan(p, "abc")
    code = [q.mix["code"] for q in proxies]
    measured = {q.name: {"code": 2.0 - q.mix["code"], "prose": 3.0 + 0.1 * q.mix["code"]} for q in proxies}
    r = mixreport.result(p, proxies, measured)
    assert r["optimum"]["mix"]["code"] == max(code) < 0.95 and r["region"] == "the convex hull of the 4 proxies' mixes"
    wide = mixreport.result(two_sources(widen=1.0), proxies, measured)
    assert wide["optimum"]["mix"]["code"] > max(code)
    assert wide["region"] == ("the convex hull of the 4 proxies' mixes, scaled by 2 about their mean mix "
                              "(mix_search.widen: 1): a trust region reaching past the proxies' evidence")
    assert wide["region"] in mixreport.markdown(wide, "p.png") and wide["region"] in mixreport.terminal(wide)[1]


def test_the_first_line_says_when_no_mix_beats_the_best_proxy_and_validation_shows_three_numbers():
    p = params(runs=8, target="sources", target_sources=["code", "prose"])
    proxies = mixsearch.plan(p, "abc")
    x = np.array([[q.mix[n] for n in NAMES] for q in proxies])
    noisy = law(x) * np.exp(np.random.default_rng(3).normal(0, 0.02, x.shape))
    measured = {q.name: dict(zip(NAMES, map(float, y))) for q, y in zip(proxies, noisy)}
    r = mixreport.result(p, proxies, measured)
    b = r["best_proxy"]
    assert not r["beyond_error"] and r["recommended"] == {"mix": b["mix"], "source": "best proxy", "name": b["name"]}
    first = mixreport.markdown(r, "p.png").split("\n")[0]
    assert first.startswith(f"# Mix search: no better mix found within error: recommended the best measured proxy "
                            f"{b['name']} (code {b['mix']['code']:.4f}, ")
    best = mixsearch.validation_proxy(proxies, r["optimum"]["mix"])
    v = mixreport.result(p, proxies, measured, (best, {"code": 4.2, "prose": 5.0, "noise": 6.0}))
    line = mixreport.terminal(v)[2]
    pred = v["validation"]["predicted_target"]
    assert line == (f"validation target: measured 4.6000 (run {best.name}) | predicted {pred[0]:.4f} [{pred[1]:.4f}, "
                    f"{pred[2]:.4f}] | best proxy {b['measured_target']:.4f} ({b['name']})")
    md = mixreport.markdown(v, "p.png")
    assert (f"| target | 4.6000 | {pred[0]:.4f} [{pred[1]:.4f}, {pred[2]:.4f}] | {b['measured_target']:.4f} |"
            in md.split("## Validation")[1])
    o = v["optimum"]["predicted"]["code"]  # per-source predicted losses, with intervals, not only coefficients
    assert f"| code | {o[0]:.4f} [{o[1]:.4f}, {o[2]:.4f}] | {b['measured']['code']:.4f} | " in md


def test_the_result_is_the_same_for_the_same_runs_and_has_every_piece():
    p = params(runs=8, validate_best=True)
    proxies = mixsearch.plan(p, "abc")
    x = np.array([[q.mix[n] for n in NAMES] for q in proxies])
    measured = {q.name: dict(zip(NAMES, map(float, y))) for q, y in zip(proxies, law(x))}
    r = mixreport.result(p, proxies, measured)
    assert r == mixreport.result(p, proxies, dict(reversed(measured.items())))
    assert [q["name"] for q in r["proxies"]] == [q.name for q in proxies]
    assert r["proxies"][0]["target"] == pytest.approx(float(law(x[:1])[0] @ [0.6, 0.3, 0.1]))
    best = mixsearch.validation_proxy(proxies, r["optimum"]["mix"])
    assert best.name.startswith("mix0-" + proxies[0].name.split("-")[1] + "-best-") and len(best.name) == 21
    assert mixsearch.validation_proxy(proxies, proxies[5].mix) == proxies[5]  # a mix a proxy ran: that proxy
    truth = dict(zip(NAMES, map(float, law(np.array([[best.mix[n] for n in NAMES]]))[0])))
    v = mixreport.result(p, proxies, measured, (best, truth))["validation"]
    assert v["predicted_target"][0] == pytest.approx(v["measured_target"], rel=1e-9)
    md = mixreport.markdown(r, "mix_search.png")
    assert "| mix0-" in md and "| regmix (chosen) |" in md and "predicted gain over the best measured proxy" in md


@pytest.mark.parametrize("search, line", [
    ({"bounds": {"code": {"min": 0.6, "max": 0.4}}}, "mix_search.bounds.code: min 0.6 > max 0.4; make min <= max"),
    ({"bounds": {"code": {"min": 0.6}, "prose": {"min": 0.5}}},
     "mix_search.bounds: the minimums sum to 1.11 > 1, so no mix satisfies them; lower them"),
    ({"bounds": {n: {"max": 0.3} for n in NAMES}},
     "mix_search.bounds: the maximums sum to 0.9 < 1, so no mix satisfies them; raise them"),
    ({"bounds": {"cod": {"min": 0.1}}}, "mix_search.bounds.cod: unknown source (did you mean 'code'?); bounds are per source of `sources`"),
    ({"target": "sources"}, "mix_search.target_sources: required with target: sources; list the sources whose "
                            "loss counts"),
    ({"target": "sources", "target_sources": {"code": 0.7, "prose": 0}},
     "mix_search.target_sources.prose: weight 0 must be > 0; leave the source out instead"),
    ({"train": {"stepz": 3}}, "mix_search.train.stepz: unknown key (did you mean 'steps'?)"),
])
def test_bad_settings_are_refused_in_one_line_naming_the_field(search, line):
    with pytest.raises(ConfigError) as e:
        params(**{"bounds": {}, **search})
    assert str(e.value) == f"params.yaml: 1 problem(s):\n  {line}"
