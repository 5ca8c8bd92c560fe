"""The chaos suite, small: the line SIGKILLed at named points in every stage (inside the writes
of clean, tokenize and shard, in a checkpoint write, in dvc before it records, in the pipeline
flow between DVC's cache and dvc.lock), resumed through `dvc repro` and the Prefect pipeline
flow alternately, ends with every output identical to an unkilled run's, and no resume redid
finished work. `python -m bench.chaos` is the full version (40 kills, every kill point, HTTP
bodies cut and killed, the served deployment as a third entry point).

And the kills in fault storms (harness/storms.py): every path to an object store (push-shards,
training on streamed shards, training to a checkpoint bucket, the staged clean) SIGKILLed at a
request drawn from the seed while 30% of its requests fail, run again until it exits 0, ends with
the bytes of its fault-free run. Its seed is the test run's fault seed (pytest's header prints
it; SHARDLINE_FAULT_SEED replays it); bench.chaos runs the same on its --seed."""

from __future__ import annotations

import pytest

from harness.chaos_driver import CI_POINTS, run_chaos, small_params
from harness.faultproxy import SEED_VAR, seed_for, session_seed
from harness.projects import stdlib_dir
from harness.s3 import s3_env  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow


def code_params(tmp_path, files: int) -> dict:
    """The chaos line on one source of `files` real stdlib modules (67: ~0.9 MB). Not the whole
    standard library (builtin://python-stdlib, ~11 MB): every kill point is passed as often in a
    few files, and each of the test's ~20 stage runs then reads, cleans and tokenizes a twelfth."""
    params = small_params("stdlib")
    params["sources"] = [{"name": "code", "uri": str(stdlib_dir(tmp_path / "input", files)), "format": "txt"}]
    params["mix"] = {"code": 1.0}
    return params


def test_line_survives_kills_in_every_stage_identically(tmp_path, prefect_server):
    params = code_params(tmp_path, 67)
    params["clean"]["part_mb"] = 0.15  # ~6 parts, as the whole standard library made at 2 MB
    params["train"]["steps"] = 16
    lines = []
    # cover_all: the plan goes on until every point of CI_POINTS has killed, once each; only kills
    # at named points count
    res = run_chaos(tmp_path, params, seed=3, kills=len(CI_POINTS), prefect_env=prefect_server, log=lines.append,
                    cover_all=True, entries=("dvc repro", "pipeline"), points=CI_POINTS, most=1,
                    timed=False)  # the deployment: bench.chaos
    report = "\n".join(lines)
    assert res["kills"] == len(CI_POINTS) and res["never fired"] == [], report
    killed = {stage for stage, point, outcome in res["table"] if outcome == "killed" and point != "timed"}
    assert killed >= {"download", "clean", "tokenize", "shard", "train"}, report
    assert any(p == "checkpoint.files" and o == "killed" for _, p, o in res["table"]), report
    assert res["data identical"] and res["losses and batches identical"] and res["weights identical"], report
    detail = "\n".join(f"{k}: {v}" for k, v in res["detail"].items()) + "\n" + report
    assert res["every output under data/ identical (but VARYING fields, timing lines, the plot)"], detail
    assert res["no leftovers (temps, .part, .next)"] and res["dvc status clean"], detail
    assert res["same checkpoints retained"] and res["every output git-ignored"], detail
    assert res["no finished work redone (files, parts, shards, checkpoints; steps only since the newest checkpoint)"], \
        detail


@pytest.mark.timeout(300)
def test_every_store_path_killed_in_a_fault_storm_ends_as_its_fault_free_run(tmp_path, s3_env):  # noqa: F811
    from harness.storms import run_storms, table

    seed = seed_for("storms")
    print(f"storms on seed {seed} (replay: {SEED_VAR}={session_seed()}, or python -m bench.chaos --storms-only "
          f"--seed {seed})")
    rows = run_storms(tmp_path, seed, s3_env)
    report = "\n".join([table(rows), *(r.summary() for r in rows),
                        f"replay: {SEED_VAR}={session_seed()}, or python -m bench.chaos --storms-only --seed {seed}"])
    assert all(r.ok for r in rows), report
    assert all(sum(r.faults.values()) for r in rows), report  # every storm met faults


@pytest.mark.parametrize("shell", ["/bin/sh", "/bin/bash", None])
def test_a_kill_point_counts_as_a_kill_under_any_login_shell(tmp_path, monkeypatch, shell):
    """dvc runs a stage under $SHELL: dash reports the child's SIGKILL as 'exited with 137'
    (CI, SHELL=/bin/sh), bash as -9. Both are the kill the suite asked for, not a failed resume."""
    from harness.chaos_driver import attempt, project
    from harness.chaoscheck import fired

    if shell:
        monkeypatch.setenv("SHELL", shell)
    else:
        monkeypatch.delenv("SHELL", raising=False)
    root = project(tmp_path / "p", code_params(tmp_path, 12))
    assert attempt(root, "dvc repro", "download.file#1", prefect_env={}) == "killed"
    assert fired((root / "chaos.log").read_text().splitlines()) == ["download.file#1"]  # the done lines aside


def test_outputs_a_failed_dvc_repro_unignored_are_ignored_again(tmp_path):
    """DVC takes the outputs of a repro's finished stages out of .gitignore when a later stage of
    that repro fails; the next repro skips those stages. `shardline stage` lists them again."""
    import subprocess

    from harness.chaos_driver import BIN, attempt, env, project

    root = project(tmp_path / "p", code_params(tmp_path, 12))
    assert attempt(root, "dvc repro", "clean.part#1", prefect_env={}) == "killed"
    assert not (root / "data/.gitignore").exists()  # DVC removed /raw, the only entry, with the file
    r = subprocess.run([str(BIN / "dvc"), "repro", "clean"], cwd=root, env=env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (root / "data/.gitignore").read_text().splitlines() == ["/raw", "/clean"]


def test_the_redo_check_fails_a_resume_that_redoes_finished_work():
    from harness.chaoscheck import redone

    steps = lambda a, b: [f"done train step {s} rank 0" for s in range(a, b + 1)]  # noqa: E731
    parts = ["done clean code/part-00000", "done clean code/part-00001"]
    ref = parts + steps(1, 4) + ["done checkpoint step-000000004"] + steps(5, 8) + ["done checkpoint step-000000008"]
    killed_at_6 = parts + steps(1, 4) + ["done checkpoint step-000000004"] + steps(5, 6) + ["train.step#6"]
    good = killed_at_6 + steps(5, 8) + ["done checkpoint step-000000008"]  # steps 5, 6 redone from checkpoint 4
    assert redone(ref, good, checkpoint_every=4) == ([], 2)
    twice = parts[:1] + ["clean.write#1"] + ref
    assert redone(ref, twice, 4)[0] == ["clean code/part-00000: made 2 times"]
    from_scratch = killed_at_6 + steps(1, 8) + ["done checkpoint step-000000004", "done checkpoint step-000000008"]
    problems, redo = redone(ref, from_scratch, 4)
    assert redo == 6 and problems == ["checkpoint step-000000004: made 2 times",
                                      "after a kill at step 6 training went on from step 0, not from the newest "
                                      "checkpoint, step 4", "6 steps redone: more than checkpoint_every per kill"]


def test_a_write_kill_point_leaves_the_file_partway_written(tmp_path):
    """`point=` on an atomic write: the k-th write call is cut in half, the first half reaches the
    temp file, then a real SIGKILL; the final name never appears."""
    import os
    import signal
    import subprocess
    import sys

    code = ("import sys; from shardline.core import fsio\n"
            "fsio.write_bytes(sys.argv[1], bytes(range(200)) * 5, point='shard.write')\n")
    final = tmp_path / "shard-00000.bin"
    env = {**os.environ, "SHARDLINE_CHAOS": "shard.write#1", "SHARDLINE_CHAOS_LOG": str(tmp_path / "log")}
    r = subprocess.run([sys.executable, "-c", code, str(final)], env=env)
    assert r.returncode == -signal.SIGKILL
    tmp = next(tmp_path.glob(".shard-00000.bin.tmp-*"))
    assert not final.exists() and tmp.read_bytes() == (bytes(range(200)) * 5)[:500]
    assert (tmp_path / "log").read_text() == "shard.write#1\n"
