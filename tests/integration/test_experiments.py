"""DVC experiments on a trained workspace, as a DVC user runs them (real git, real dvc): a changed
mix trains a fresh model per experiment, `dvc exp show` compares their held-out losses, `dvc exp
apply` + `dvc checkout` restores one's checkpoints, the queue runs, `dvc plots diff` overlays them.
Outside an experiment the refusal stays, and a checkpoint the DVC cache does not hold is kept."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import yaml

from shardline.dvcrepo import experiments
from harness import trackers as read_trackers
from tests.conftest import BIN, commit_trained, init_repo, run, small_params, stdlib_sources, write_params

pytestmark = pytest.mark.slow
DVC = str(BIN / "dvc")


def checkpoint_files(root: Path) -> dict[str, str]:
    """name -> sha256 of every file of every checkpoint, from the manifests (which they must match)."""
    out = {}
    for m in sorted((root / "data/checkpoints").glob("step-*/manifest.json")):
        out.update({f"{m.parent.name}/{k}": v["sha256"] for k, v in json.loads(m.read_text())["files"].items()})
    return out


def exps(root: Path) -> dict[str, dict]:
    """experiment name -> {params, eval: its headline metrics} from `dvc exp show --json` (the
    held-out bits per byte, per source and in total; eval.json in full is an output, not a metric)."""
    out = {}
    for baseline in json.loads(run([DVC, "exp", "show", "--json"], root).stdout):
        for e in baseline.get("experiments") or []:
            for rev in e["revs"]:
                d = rev["data"]
                out[rev["name"]] = {"params": d["params"]["params.yaml"]["data"],
                                    "eval": (d["metrics"].get("data/metrics/headline.json") or {}).get("data")}
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The README's path at test size: a committed project after `dvc repro`."""
    root = tmp_path_factory.mktemp("exp") / "proj"
    sources = stdlib_sources(root.parent / "inputs")
    init_repo(root)
    write_params(root, small_params(sources, mix={"code": 0.75, "more": 0.25}, train={"steps": 8, "checkpoint_every": 4},
                                    eval={"every": 4, "blocks": 16}))
    # as a fresh clone: committed, with a dvc.lock of another machine's run (here, of none yet), which
    # the first `dvc repro` rewrites before training starts
    (root / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    commit_trained(root)
    return root


def test_a_fresh_clones_first_repro_records_its_code_as_clean(trained):
    """dvc.lock is DVC's bookkeeping, not code: the lineage names the clone's commit, not dirty."""
    lin = json.loads(run([str(BIN / "shardline"), "lineage", "latest", "--json"], trained).stdout)
    cloned = run(["git", "rev-parse", "HEAD~1"], trained).stdout.strip()
    assert lin["code"] == {"commit": cloned, "dirty": False}


def test_experiments_train_fresh_models_and_compare(trained, tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(trained, root, symlinks=True)
    baseline = checkpoint_files(root)
    p = yaml.safe_load((root / "params.yaml").read_text())
    write_params(root, {**p, "log": {"backends": ["tensorboard"], "dir": str(tmp_path / "logs")}})
    r = run([DVC, "exp", "run", "-n", "mix-a", "-S", "mix.code=0.6", "-S", "mix.more=0.4"], root)
    # the tracker's run is the experiment's name (log is no stage's dependency: watching is not training)
    assert sorted(read_trackers.tensorboard(tmp_path / "logs/tensorboard/mix-a")["train/loss"]) == list(range(1, 9))
    assert "a new run (new experiment)" in r.stdout + r.stderr and "fresh start" in r.stdout + r.stderr
    assert "removed step-000000004, step-000000008: restorable" in r.stdout + r.stderr  # HEAD records them
    a_files = checkpoint_files(root)
    lin = json.loads(run([str(BIN / "shardline"), "lineage", "latest", "--json"], root).stdout)
    assert lin["mix"] == {"code": 0.6, "more": 0.4} and lin["parent"] == "step-000000004"
    assert lin["code"]["dirty"] is False  # -S rewrote params.yaml, which the lineage records by value
    run([DVC, "exp", "run", "-n", "mix-b", "-S", "mix.code=0.2", "-S", "mix.more=0.8"], root)
    shown = exps(root)
    assert shown["mix-a"]["params"]["mix"] == {"code": 0.6, "more": 0.4}
    assert shown["mix-b"]["params"]["mix"] == {"code": 0.2, "more": 0.8}
    a, b = shown["mix-a"]["eval"], shown["mix-b"]["eval"]
    assert a["step"] == b["step"] == 8 and set(a["bpb"]) == {"code", "more"}
    assert a["bpb"]["more"] != b["bpb"]["more"]
    # back to the first experiment: params, lock and checkpoints
    run([DVC, "exp", "apply", "mix-a"], root)
    run([DVC, "checkout"], root)
    assert checkpoint_files(root) == a_files != baseline
    assert yaml.safe_load((root / "params.yaml").read_text())["mix"] == {"code": 0.6, "more": 0.4}
    # their curves side by side: train and val loss of both
    plots = json.loads(run([DVC, "plots", "diff", "mix-a", "mix-b", "--json"], root).stdout)["data"]["loss"][0]
    values = plots["content"]["data"]["values"]
    assert {(v["rev"], v["filename::field"]) for v in values} == {
        (rev, f) for rev in ("mix-a", "mix-b") for f in ("train.csv::loss", "eval.csv::val_loss")}
    # raising only train.steps continues the model of the workspace
    r = run([DVC, "exp", "run", "-S", "train.steps=12"], root)
    assert "resuming from step-000000008" in r.stdout + r.stderr
    # tokenize depends on train.init_from alone: another train key does not re-run it
    assert "Stage 'tokenize' didn't change, skipping" in r.stdout + r.stderr
    assert json.loads((root / "data/metrics/eval.json").read_text())["step"] == 12


QUEUED = ["model.n_layer=2", "clean.min_chars=200", "train.lr=0.01"]  # the model, the data, training alone


def test_the_queue_runs_every_experiment(trained, tmp_path):
    """Queued in the background, and on every kind of key: each trains its own fresh model."""
    root = tmp_path / "ws"
    shutil.copytree(trained, root, symlinks=True)
    for i, setting in enumerate(QUEUED):
        run([DVC, "exp", "run", "--queue", "-n", f"q{i}", "-S", setting], root)
    run([DVC, "queue", "start"], root)
    deadline = time.time() + 240
    # asked in-process: a `dvc queue status` process a second would take a core from the experiments
    while any(v in (experiments.QUEUED, experiments.RUNNING) for v in experiments.states(root).values()):
        assert time.time() < deadline, run([DVC, "queue", "status"], root).stdout
        time.sleep(1)
    s = run([DVC, "queue", "status"], root).stdout
    run([DVC, "queue", "stop"], root, check=False)
    done = {ln.split()[1]: ln.split()[-1] for ln in s.splitlines() if ln[:1].isalnum() and len(ln.split()) >= 4}
    assert [done.get(f"q{i}") for i in range(len(QUEUED))] == ["Success"] * len(QUEUED), s
    shown = exps(root)
    for i, setting in enumerate(QUEUED):
        section, rest = setting.split(".", 1)
        key, value = rest.split("=")
        assert str(shown[f"q{i}"]["params"][section][key]) == value
    losses = {shown[f"q{i}"]["eval"]["bpb_total"] for i in range(len(QUEUED))}
    assert len(losses) == len(QUEUED)  # three settings, three models


def test_outside_an_experiment_a_changed_run_is_refused_and_workspace_checkpoints_kept(trained, tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(trained, root, symlinks=True)
    p = yaml.safe_load((root / "params.yaml").read_text())
    p["mix"] = {"code": 0.5, "more": 0.5}
    write_params(root, p)
    r = run([DVC, "repro"], root, check=False)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "mix: saved {'code': 0.75, 'more': 0.25}" in out and "dvc exp run" in out
    assert "Traceback" not in out
    # trained past dvc repro's record: step 12 is in the workspace only; `dvc exp run` itself then
    # checks out the baseline's data/checkpoints (dropping step 12) before any stage runs
    p["mix"], p["train"]["steps"] = {"code": 0.75, "more": 0.25}, 12
    write_params(root, p)
    run([str(BIN / "shardline"), "stage", "train"], root)
    only_here = (root / "data/checkpoints/step-000000012/manifest.json").read_bytes()
    r = run([DVC, "exp", "run", "-S", "mix.code=0.5", "-S", "mix.more=0.5"], root)
    assert "is the only copy" in r.stdout + r.stderr
    kept = list((root / ".shardline/kept").glob("*/step-000000012"))
    assert len(kept) == 1 and (kept[0] / "manifest.json").read_bytes() == only_here
    from shardline.training import checkpoint

    assert checkpoint.verify(kept[0]) == (True, "ok")
    assert f"{kept[0].relative_to(root)}  valid    kept: the only copy" in run([str(BIN / "shardline"), "checkpoints"],
                                                                              root).stdout
    # what a run under dvc repro saved is recorded by DVC as it ends: nothing else is kept
    assert not list((root / ".shardline/kept").glob("*/step-000000008"))


def test_a_changed_run_in_a_plain_folder_moves_old_checkpoints_to_the_archive(trained, tmp_path):
    """No commit or experiment records anything here: a new experiment-like run (fresh_on_data_change)
    keeps every old checkpoint, moved aside."""
    root = tmp_path / "plain"
    shutil.copytree(trained, root, symlinks=True)
    shutil.rmtree(root / ".git")
    shutil.rmtree(root / ".dvc")
    before = {m.parent.name: m.read_bytes() for m in (root / "data/checkpoints").glob("step-*/manifest.json")}
    p = yaml.safe_load((root / "params.yaml").read_text())
    p["mix"], p["train"]["fresh_on_data_change"] = {"code": 0.5, "more": 0.5}, True
    write_params(root, p)
    r = run([str(BIN / "shardline"), "stage", "train"], root)
    assert "moved to" in r.stderr
    moved = {m.parent.name: m.read_bytes() for m in (root / "data/checkpoints/archive").glob("*/step-*/manifest.json")}
    assert moved == before


def test_an_experiment_after_an_uncommitted_repro_keeps_that_runs_checkpoints(tmp_path):
    """The README's flow without its commit (issue 50): `dvc repro`, then at once `dvc exp run -S`.
    While the experiment runs, DVC's own refs (refs/exps/exec/EXEC_MERGE, the stash) hold the
    workspace's dvc.lock, so the main run's checkpoints looked recorded; they were removed as
    'restorable', and those refs were gone when the experiment ended. Nothing durable records them:
    they are moved to the archive, which the experiment's own commit then records."""
    root = tmp_path / "proj"
    sources = stdlib_sources(tmp_path / "inputs")
    init_repo(root)
    write_params(root, small_params(sources, mix={"code": 0.75, "more": 0.25}, train={"steps": 8, "checkpoint_every": 4},
                                    eval={"every": 4, "blocks": 16}))
    (root / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")  # a clone's lock, of another machine's run
    run(["git", "add", "-A"], root)
    run(["git", "commit", "-qm", "cloned"], root)
    run([DVC, "repro"], root, timeout=600)
    main = {m.parent.name: m.read_bytes() for m in (root / "data/checkpoints").glob("step-*/manifest.json")}
    assert sorted(main) == ["step-000000004", "step-000000008"]
    r = run([DVC, "exp", "run", "-n", "mix-a", "-S", "mix.code=0.6", "-S", "mix.more=0.4"], root)
    out = r.stdout + r.stderr
    assert "restorable" not in out and "step-000000004, step-000000008 moved to" in out, out
    archived = {m.parent.name: m.read_bytes()
                for m in (root / "data/checkpoints/archive").glob("*/step-*/manifest.json")}
    assert archived == main
    assert exps(root)["mix-a"]["eval"]["step"] == 8  # the experiment trained its own model
