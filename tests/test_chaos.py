"""The chaos suite, small: the line SIGKILLed across its stages, resumed through `dvc repro` and
the Prefect pipeline flow alternately, ends byte- and bit-identical to an unkilled run.
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
    res = run_chaos(tmp_path, params, seed=3, kills=10, prefect_env=prefect_server, log=lines.append,
                    cover_all=False, entries=("dvc repro", "pipeline"))  # the deployment: bench.chaos
    report = "\n".join(lines)
    assert res["kills"] >= 10, report
    assert len({stage for stage, _, outcome in res["table"] if outcome == "killed"}) >= 4, report
    assert res["data identical"] and res["losses and batches identical"] and res["weights identical"], report
    assert res["dvc status clean"], report


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
