"""The chaos suite, small: the line SIGKILLed at every named point (at least once in each stage
and in a checkpoint write), resumed through `dvc repro` and the Prefect pipeline flow
alternately, ends with every output identical to an unkilled run's.
`python -m bench.chaos` is the full version (>= 20 kills, every kill point, the served
deployment as a third entry point)."""

from __future__ import annotations

import pytest

from bench.chaos import run_chaos, small_params

pytestmark = pytest.mark.slow


def test_line_survives_kills_in_every_stage_identically(tmp_path, prefect_server):
    params = small_params("stdlib")
    params["sources"] = [{"name": "code", "uri": "builtin://python-stdlib", "format": "txt"}]
    params["mix"] = {"code": 1.0}
    params["clean"]["part_mb"] = 2.0
    params["train"]["steps"] = 16
    lines = []
    # cover_all: the plan goes on until every named point has killed once (train.step and
    # checkpoint.files among them); only kills at named points count
    res = run_chaos(tmp_path, params, seed=3, kills=8, prefect_env=prefect_server, log=lines.append,
                    cover_all=True, entries=("dvc repro", "pipeline"))  # the deployment: bench.chaos
    report = "\n".join(lines)
    assert res["kills"] >= 8 and res["never fired"] == [], report
    killed = {stage for stage, point, outcome in res["table"] if outcome == "killed" and point != "timed"}
    assert killed >= {"download", "clean", "tokenize", "shard", "train"}, report
    assert any(p == "checkpoint.files" and o == "killed" for _, p, o in res["table"]), report
    assert res["data identical"] and res["losses and batches identical"] and res["weights identical"], report
    detail = "\n".join(f"{k}: {v}" for k, v in res["detail"].items()) + "\n" + report
    assert res["every output under data/ identical (but VARYING fields and the reports)"], detail
    assert res["no leftovers (temps, .part, .next)"] and res["dvc status clean"], detail
    # not asserted yet: "every output git-ignored". DVC's scm_context un-ignores, when a `dvc repro`
    # fails (a stage killed), the outputs that earlier stages of that same repro had just added to
    # data/.gitignore; the next repro skips those stages, so nothing adds them back (seen: /shards,
    # /clean). Open: the fix belongs in flows/ (re-ignore every output); bench.chaos fails on it.


@pytest.mark.parametrize("shell", ["/bin/sh", "/bin/bash", None])
def test_a_kill_point_counts_as_a_kill_under_any_login_shell(tmp_path, monkeypatch, shell):
    """dvc runs a stage under $SHELL: dash reports the child's SIGKILL as 'exited with 137'
    (CI, SHELL=/bin/sh), bash as -9. Both are the kill the suite asked for, not a failed resume."""
    from bench.chaos import attempt, project

    if shell:
        monkeypatch.setenv("SHELL", shell)
    else:
        monkeypatch.delenv("SHELL", raising=False)
    params = small_params("stdlib")
    params["sources"] = [{"name": "code", "uri": "builtin://python-stdlib", "format": "txt"}]
    params["mix"] = {"code": 1.0}
    root = project(tmp_path / "p", params)
    assert attempt(root, "dvc repro", "download.file#1", prefect_env={}) == "killed"
    assert (root / "chaos.log").read_text().splitlines() == ["download.file#1"]
