"""Training: bit-exact resume across SIGKILLs, torn checkpoints, lineage refusals, torchrun."""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from shardline.training import checkpoint, sharded
from tests.conftest import BIN, env_for, make_project, run, write_params

pytestmark = pytest.mark.slow
SL = str(BIN / "shardline")
TINY = {
    "model": {"n_layer": 1, "n_head": 2, "d_model": 32, "dropout": 0.1},
    "train": {"steps": 40, "checkpoint_every": 4, "keep_last": 2, "keep_every": 0, "warmup_steps": 4,
              "threads": 1, "lr": 0.01, "min_lr": 0.001},
    "loader": {"global_batch": 4, "seed": 7},
    "shard": {"seq_len": 32, "target_mb": 0.02},
}


@pytest.fixture(scope="module")
def built(built_once):
    """A project whose data line has run (real stdlib text), ready to train: one per worker process,
    shared by every file that imports this fixture (each test trains a copy: `project`)."""
    return built_once("built", _data_line)


def _data_line(root: Path) -> Path:
    from tests.conftest import stdlib_files

    src, more = root / "input", root / "more"
    src.mkdir()
    more.mkdir()
    for f in stdlib_files(12):
        shutil.copy(f, src / f"{f.parent.name}_{f.name}")
    for f in stdlib_files(4, skip=12):
        shutil.copy(f, more / f"{f.parent.name}_{f.name}")
    params, layout = make_project(root / "proj", [{"name": "code", "uri": str(src), "format": "txt"},
                                                  {"name": "more", "uri": str(more), "format": "txt"}],
                                  mix={"code": 0.75, "more": 0.25}, **TINY)
    for stage in ("download", "clean", "tokenize", "shard"):
        run([SL, "stage", stage], layout.root)
    return layout.root


GPT2 = {"arch": "gpt2", "n_layer": 1, "n_head": 2, "d_model": 32, "dropout": 0.1}  # a whole model section


def project(built: Path, dest: Path, whole_model: dict | None = None, **sections) -> Path:
    """A copy of `built` with `sections` merged into its params; `whole_model` replaces the model section
    (an architecture's fields do not mix with another's)."""
    shutil.copytree(built, dest)
    if sections or whole_model:
        p = yaml.safe_load((dest / "params.yaml").read_text())
        for k, v in sections.items():
            p[k] = {**p.get(k, {}), **v} if isinstance(v, dict) else v
        if whole_model:
            p["model"] = whole_model
        write_params(dest, p)
    return dest


def losses(root: Path) -> list[float]:
    return [json.loads(ln)["loss"] for ln in (root / "data/metrics/train.jsonl").read_text().splitlines()]


def final_state(root: Path) -> dict:
    """The newest checkpoint's step, loader, model and optimizer state (by parameter index when
    full, by name when sharded: compare checkpoints of one format)."""
    path = checkpoint.latest_valid(root / "data/checkpoints", lambda _: None)
    tensors, state, manifest = checkpoint.load(path)
    if manifest.format == "sharded":
        tensors = {"model.pt": sharded.full_state(path), "optimizer.pt": {"state": sharded.full_state(path, "optim")}}
    return {"step": state["step"], "model": tensors["model.pt"], "opt": tensors["optimizer.pt"]["state"],
            "loader": state["loader"]}


def assert_same_state(a: dict, b: dict) -> None:
    assert a["step"] == b["step"] and a["loader"] == b["loader"]
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    for i in a["opt"]:
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(a["opt"][i][k], b["opt"][i][k]), (i, k)


def test_sigkilled_training_resumes_bit_identical(built, tmp_path):
    ref = project(built, tmp_path / "ref")
    run([SL, "stage", "train"], ref)
    crash = project(built, tmp_path / "crash")
    metrics = crash / "data/metrics/train.jsonl"
    rnd = random.Random(1234)
    kills = 0
    # one kill inside a checkpoint write (files written, manifest not yet): a real SIGKILL at that point
    r = run([SL, "stage", "train"], crash, check=False, env=env_for(SHARDLINE_CHAOS="checkpoint.files@12"))
    assert r.returncode == -signal.SIGKILL
    assert list((crash / "data/checkpoints").glob(".step-000000012.tmp-*"))
    kills += 1
    def last_step() -> int:
        for line in reversed(metrics.read_text().splitlines() if metrics.exists() else []):
            try:
                return json.loads(line)["step"]
            except ValueError:  # a line being appended right now
                continue
        return 0

    while kills < 4:  # three more, at random steps: each a process start (~8 s here), so no more
        # the engine kills itself right after the step's metrics line (chaos point train.step), so the
        # kill lands on that step however slow this machine is; past the previous kill, so it comes
        target = rnd.randint(last_step() + 1, min(last_step() + 7, 39))
        r = run([SL, "stage", "train"], crash, check=False, env=env_for(SHARDLINE_CHAOS=f"train.step@{target}:rank0"))
        assert r.returncode == -signal.SIGKILL, f"training did not reach step {target}:\n{r.stderr}"
        assert last_step() == target
        kills += 1
    r = run([SL, "stage", "train"], crash)
    assert "resuming from step-" in r.stderr
    assert losses(crash) == losses(ref) and len(losses(ref)) == 40
    assert_same_state(final_state(crash), final_state(ref))
    assert not list((crash / "data/checkpoints").glob(".*tmp*"))


def test_torn_checkpoints_are_skipped_and_last_valid_kept(built, tmp_path):
    root = project(built, tmp_path / "p", train={"steps": 12})
    run([SL, "stage", "train"], root)
    ck = root / "data/checkpoints"
    assert [e.step for e in checkpoint.entries(ck)] == [8, 12]
    model = ck / "step-000000012" / "model.pt"
    model.write_bytes(model.read_bytes()[:-10])  # truncated
    (ck / ".step-000000016.tmp-999").mkdir()  # a leftover temp dir
    r = run([SL, "checkpoints"], root)
    assert "step-000000012  INVALID  model.pt is" in r.stdout and "truncated" in r.stdout
    p = yaml.safe_load((root / "params.yaml").read_text())
    write_params(root, {**p, "train": {**p["train"], "steps": 16}})
    r = run([SL, "stage", "train"], root)
    assert "skipping step-000000012: model.pt is" in r.stderr and "resuming from step-000000008" in r.stderr
    assert [e.step for e in checkpoint.entries(ck)] == [12, 16] and all(e.valid for e in checkpoint.entries(ck))
    assert not (ck / ".step-000000016.tmp-999").exists()
    # the manifest is missing: invalid, and retention never takes the newest valid one
    (ck / "step-000000016" / "manifest.json").unlink()
    assert checkpoint.latest_valid(ck, lambda _: None).name == "step-000000012"
    checkpoint.retain(ck, keep_last=1, keep_every=0, log=lambda _: None)
    assert [e.step for e in checkpoint.entries(ck)] == [12]


def test_lineage_refuses_changed_mix_unless_allowed(built, tmp_path):
    root = project(built, tmp_path / "p", train={"steps": 4})
    run([SL, "stage", "train"], root)
    p = yaml.safe_load((root / "params.yaml").read_text())
    p["mix"] = {"code": 0.5, "more": 0.5}  # train.steps (4) now counts from the parent checkpoint
    write_params(root, p)
    r = run([SL, "stage", "train"], root, check=False)
    assert r.returncode == 2 and "mix: saved" in r.stderr and "train.allow_data_change" in r.stderr
    assert "Traceback" not in r.stderr
    p["train"]["allow_data_change"] = True
    write_params(root, p)
    run([SL, "stage", "train"], root)
    assert final_state(root)["step"] == 8
    lin = json.loads(run([SL, "lineage", "latest", "--json"], root).stdout)
    assert lin["parent"] == "step-000000004" and lin["data_change"][0].startswith("mix:")
    assert lin["mix"] == {"code": 0.5, "more": 0.5} and lin["clean_rules"]["normalize"] == "NFC"
    assert lin["data_version"]["tokenizer_sha256"] and lin["sources"][0]["files"]
    text = run([SL, "lineage", "step-000000008"], root).stdout
    assert "ALLOWED DATA CHANGE" in text and "parent: step-000000004" in text


def test_changed_shards_are_refused(built, tmp_path):
    root = project(built, tmp_path / "p", train={"steps": 4})
    run([SL, "stage", "train"], root)
    p = yaml.safe_load((root / "params.yaml").read_text())
    p["shard"]["target_mb"] = 0.01  # same tokens, other shard boundaries: a new data version
    p["train"]["steps"] = 8
    write_params(root, p)
    run([SL, "stage", "shard"], root)
    r = run([SL, "stage", "train"], root, check=False)
    assert r.returncode == 2 and "data_version: saved" in r.stderr


def test_torchrun_two_processes_see_the_same_global_batches(built, tmp_path):
    one = project(built, tmp_path / "one", train={"steps": 6}, loader={"debug_batch_hashes": True})
    two = project(built, tmp_path / "two", train={"steps": 6, "nproc_per_node": 2},
                  loader={"debug_batch_hashes": True})
    a = run([SL, "stage", "train"], one, timeout=300)
    b = run([SL, "stage", "train"], two, timeout=300)
    hashes = [[ln for ln in r.stderr.splitlines() if "loader: step" in ln] for r in (a, b)]
    assert len(hashes[0]) == 6 and hashes[0] == hashes[1]
    assert final_state(two)["step"] == 6 and final_state(two)["loader"] == final_state(one)["loader"]


def test_bf16_autocast_on_cpu_and_fp16_needs_cuda(built, tmp_path):
    fp32 = project(built, tmp_path / "fp32", train={"steps": 3})
    run([SL, "stage", "train"], fp32)
    runs = []
    for name in ("bf16", "bf16-again"):
        root = project(built, tmp_path / name, train={"steps": 3, "precision": "bf16"})
        run([SL, "stage", "train"], root)
        runs.append(losses(root))
    assert runs[0] == runs[1]  # bf16 on CPU replays exactly too
    # autocast took effect (other bits than fp32), and tracks fp32 within bf16's 8-bit mantissa
    assert runs[0] != losses(fp32) and runs[0] == pytest.approx(losses(fp32), rel=2e-2)
    if not torch.cuda.is_available():
        root = project(built, tmp_path / "fp16", train={"steps": 3, "precision": "fp16"})
        r = run([SL, "stage", "train"], root, check=False)
        assert r.returncode == 2 and "train.precision: fp16 needs CUDA" in r.stderr


def test_a_checkpoint_of_another_model_shape_is_refused_by_name(built, tmp_path):
    root = project(built, tmp_path / "p", train={"steps": 2})
    run([SL, "stage", "train"], root)
    p = yaml.safe_load((root / "params.yaml").read_text())
    p["model"]["d_model"] = 64
    write_params(root, p)
    r = run([SL, "stage", "train"], root, check=False, env=env_for())
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert re.search(r"model: saved \{[^}]*'d_model': 32[^}]*\}, now \{[^}]*'d_model': 64", r.stderr)
    assert "allow_data_change" not in r.stderr  # no setting lets these weights continue in another shape


def test_fresh_on_data_change_archives_and_restarts(built, tmp_path):
    root = project(built, tmp_path / "p", train={"steps": 4, "fresh_on_data_change": True, "max_skipped": 1})
    run([SL, "stage", "train"], root, env=env_for(SHARDLINE_FAULTS="train.nan_loss@2"))  # a rollback on record
    assert (root / "data/checkpoints/rollbacks.json").exists()
    p = yaml.safe_load((root / "params.yaml").read_text())
    p["mix"] = {"code": 0.5, "more": 0.5}
    write_params(root, p)
    r = run([SL, "stage", "train"], root)
    assert "moved to" in r.stderr and "fresh start" in r.stderr
    archived = list((root / "data/checkpoints/archive").glob("*/step-*"))
    assert sorted(a.name for a in archived) == ["step-000000004"]
    # the old run's rollback went with its checkpoints: the new run skips no batch of its own
    assert (archived[0].parent / "rollbacks.json").exists() and not (root / "data/checkpoints/rollbacks.json").exists()
    lin = json.loads(run([SL, "lineage", "latest", "--json"], root).stdout)
    assert lin["parent"] is None and lin["rollbacks"] == [] and final_state(root)["step"] == 4


def test_evidence_card_quotes_the_figures_of_train_json(built, tmp_path):
    """The card's throughput lines come from throughput.summarize, like data/metrics/train.json: it
    used its own nearest-rank p95, which disagreed with train.json's (linear) p95."""
    import re

    root = project(built, tmp_path / "p", train={"steps": 7})
    run([SL, "stage", "train"], root)
    run([SL, "stage", "report"], root)
    summary = json.loads((root / "data/metrics/train.json").read_text())
    card = (root / "data/reports/evidence.md").read_text()
    assert re.search(r"p95 step time ([\d.]+) s", card).group(1) == f"{summary['p95_step_s']:.3f}"
    assert re.search(r"median ([\d,]+) tokens/s", card).group(1) == f"{summary['median_tokens_per_s']:,.0f}"
    assert f"over {summary['steps']} steps" in card


# The loop as it was before train_step and the hooks (shardline.training.step, .hooks): the same
# params must train the same weights, through skips, a rollback and gradient accumulation.
BEFORE_HOOKS = "c825526"
FAULTS = "train.spike@30-37,train.nan_loss@55,train.inf_grad@66"  # batches: 2 a step (grad_accum)
STEPPED = {"train": {**TINY["train"], "steps": 40, "grad_accum": 2, "grad_clip": 0.5, "spike_window": 5,
                     "spike_patience": 3, "max_skipped": 2, "max_rollbacks": 2},
           "eval": {"every": 10}}


def engine_at(rev: str, dest: Path) -> Path | None:
    """The engine at commit `rev` (git archive), or None when this clone lacks it (a shallow clone)."""
    from tests.conftest import REPO

    got = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True)
    if got.returncode != 0:
        return None
    dest.mkdir()
    subprocess.run(["tar", "-x", "-C", str(dest)], input=got.stdout, check=True)
    return dest


def for_engine(old: Path, root: Path) -> Path:
    """`root`'s params.yaml as the engine at `old` reads it: a section's keys that engine's own
    params.yaml does not have (settings added since, at their defaults here) left out."""
    p, ref = (yaml.safe_load((d / "params.yaml").read_text()) for d in (root, old))
    for name, section in p.items():
        if name != "mix" and isinstance(section, dict) and isinstance(ref.get(name), dict):  # mix: by source
            p[name] = {k: v for k, v in section.items() if k in ref[name]}
    write_params(root, p)
    return root


def test_the_step_and_hooks_train_the_weights_the_loop_before_them_did(built, tmp_path):
    old = engine_at(BEFORE_HOOKS, tmp_path / "engine")
    if old is None:
        pytest.skip(f"this clone does not hold commit {BEFORE_HOOKS} (shallow): nothing to compare with")
    a, b = project(built, tmp_path / "a", **STEPPED), project(built, tmp_path / "b", **STEPPED)
    run([SL, "stage", "train"], a, env=env_for(SHARDLINE_FAULTS=FAULTS))
    run([sys.executable, "-m", "shardline.cli.main", "--root", str(for_engine(old, b)), "stage", "train"], old,
        env=env_for(SHARDLINE_FAULTS=FAULTS, PYTHONPATH=str(old)))
    ra, rb = [json.loads(x) for x in (a / "data/metrics/train.jsonl").read_text().splitlines()], \
        [json.loads(x) for x in (b / "data/metrics/train.jsonl").read_text().splitlines()]
    assert any(r.get("guard") == "skip" for r in ra) and any(r.get("rollbacks") for r in ra)
    timing = {"step_s", "data_wait_s", "compute_s", "tokens_per_s", "mfu", "gpu_util", "slow", "eval_s"}

    def timeless(r):
        return {k: timeless(v) if isinstance(v, dict) else v for k, v in r.items() if k not in timing}

    def figures(r, own_mix):  # the eval both engines make (the old one's total was the run's own mix)
        if "eval" not in r:
            return r
        ev = r["eval"]
        return {**r, "eval": {"own_mix": {k: ev[own_mix][k] for k in ("loss", "bpb")},
                              "sources": {s: {k: v[k] for k in ("loss", "bpb", "tokens")}
                                          for s, v in ev["sources"].items()}}}
    assert [timeless(figures(r, "total_own_mix")) for r in ra] == [timeless(figures(r, "total")) for r in rb]
    assert_same_state(final_state(a), final_state(b))


def test_a_callers_hook_sees_every_step_and_one_close(built, tmp_path):
    from shardline.context import RunContext
    from shardline import paramsfile
    from shardline.core.layout import Layout
    from shardline.training import train

    root = project(built, tmp_path / "p", train={**TINY["train"], "steps": 6}, eval={"every": 3})

    class Seen:
        def __init__(self):
            self.calls = []

        def before_step(self, step):
            self.calls.append(("before", step))

        def after_step(self, result, record):
            self.calls.append(("after", result.step, result.verdict, record.eval is not None))

        def close(self, ok):
            self.calls.append(("close", ok))

    seen = Seen()
    layout = Layout.at(root)
    train.run(paramsfile.load(root / "params.yaml"), layout, RunContext(log=lambda _: None, hooks=(seen,)))
    assert seen.calls == [("before", 1), ("after", 1, "ok", False), ("before", 2), ("after", 2, "ok", False),
                          ("before", 3), ("after", 3, "ok", True), ("before", 4), ("after", 4, "ok", True),
                          ("before", 5), ("after", 5, "ok", False), ("before", 6), ("after", 6, "ok", True),
                          ("close", True)]


def test_a_checkpoint_from_before_the_held_out_fingerprint_is_judged_and_continued_with_a_warning(built, tmp_path):
    """An upgrade: a checkpoint of the engine before held-out sets were keyed by content and
    fingerprinted (its lineage has no `heldout`). `shardline eval` says in one line that its recorded
    eval may be on other documents; a run continued from it on a changed mix says in the card that
    the held-out set changed at that step."""
    old = engine_at(BEFORE_HOOKS, tmp_path / "engine")
    if old is None:
        pytest.skip(f"this clone does not hold commit {BEFORE_HOOKS} (shallow): nothing to upgrade from")
    root = for_engine(old, project(built, tmp_path / "p", train={**TINY["train"], "steps": 4}, eval={"every": 2}))
    run([sys.executable, "-m", "shardline.cli.main", "--root", str(root), "stage", "train"], old,
        env=env_for(PYTHONPATH=str(old)))
    said = run([SL, "eval", "latest"], root).stdout
    assert ("WARNING: step-000000004 (step 4) records no held-out fingerprint (trained before held-out sets were "
            "keyed by content and fingerprinted): its recorded eval may be on other documents than this one") in said
    p = yaml.safe_load((root / "params.yaml").read_text())
    p["mix"], p["train"] = {"code": 0.5, "more": 0.5}, {**p["train"], "steps": 2, "allow_data_change": True}
    write_params(root, p)
    run([SL, "stage", "train"], root)
    run([SL, "stage", "report"], root)
    card = (root / "data/reports/evidence.md").read_text()
    assert "The held-out set changed at step 4: the val losses above that step were measured on other documents" in card
    held = json.loads((root / "data/clean/split.json").read_text())["heldout"]
    assert f"Held-out sets (fingerprints): code {held['code']['sha256'][:12]}, more {held['more']['sha256'][:12]}" in card
    said = run([SL, "eval", "latest"], root).stdout
    assert "held-out fingerprint" not in said, said  # the new checkpoint's set is today's (thin sets still warn)
