"""Sharded checkpoints (torch.distributed.checkpoint) under torchrun on gloo: each rank writes its
shards, a rank killed mid-save costs only that checkpoint, the same world size resumes bit-exact,
and 1, 2 and 4 ranks read each other's checkpoints resharded; a save failing on one rank fails all at once.
~2 minutes on 2 cores."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from shardline.core.layout import MANIFEST
from shardline.results.trained import load_model
from shardline.training import checkpoint, sharded
from tests.conftest import env_for, run
from tests.integration.test_distributed import SL, batches, close, elastic, rewound
from tests.integration.test_train import assert_same_state, built, final_state, losses  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow


def latest(root: Path) -> Path:
    return checkpoint.latest_valid(root / "data/checkpoints", lambda _: None)


def state(root: Path) -> dict:
    """The newest checkpoint's full state, gathered from its shards."""
    assert json.loads((latest(root) / MANIFEST).read_text())["format"] == "sharded"
    return final_state(root)


def assert_close_state(a: dict, b: dict) -> None:
    assert a["step"] == b["step"] and a["loader"] == b["loader"]
    assert sorted(a["model"]) == sorted(b["model"]) and sorted(a["opt"]) == sorted(b["opt"])
    for k in a["model"]:
        torch.testing.assert_close(a["model"][k], b["model"][k], rtol=1e-3, atol=1e-5)
    for name in a["opt"]:
        assert a["opt"][name]["step"] == b["opt"][name]["step"] == 8
        for k in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(a["opt"][name][k], b["opt"][name][k], rtol=1e-3, atol=1e-6)


@pytest.fixture(scope="module")
def fsdp2(built, tmp_path_factory) -> Path:
    """An uninterrupted 2-process FSDP run to step 8 (checkpoints 4 and 8), sharded by default."""
    root = elastic(built, tmp_path_factory.mktemp("fsdp2") / "p", nproc_per_node=2, strategy="fsdp")
    run([SL, "stage", "train"], root, timeout=240)
    return root


@pytest.mark.timeout(300)
def test_a_rank_killed_mid_save_leaves_the_previous_checkpoint_and_resume_is_exact(built, fsdp2, tmp_path):
    manifest = json.loads((latest(fsdp2) / MANIFEST).read_text())
    # every rank wrote and hashed its own shard file; rank 0 also DCP's .metadata; no model.pt anywhere
    assert [[n for n in r if n.endswith(".distcp")] for r in manifest["ranks"]] == [
        ["dcp/__0_0.distcp"], ["dcp/__1_0.distcp"]]
    assert "dcp/.metadata" in manifest["ranks"][0] and "model.pt" not in manifest["files"]

    crash = elastic(built, tmp_path / "crash", nproc_per_node=2, strategy="fsdp")
    # rank 1 dies at step 8's save with its shards written and fsynced, before rank 0 can gather them
    r = run([SL, "stage", "train"], crash, check=False, env=env_for(SHARDLINE_CHAOS="checkpoint.shard@8:rank1"))
    assert r.returncode == 2 and "torchrun with 2 processes failed" in r.stderr
    ck = crash / "data/checkpoints"
    assert [e.step for e in checkpoint.entries(ck)] == [4] and latest(crash).name == "step-000000004"
    assert list(ck.glob(".step-000000008.tmp-*/dcp/__1_0.distcp"))  # the torn save, never renamed
    r = run([SL, "stage", "train"], crash, timeout=240)
    assert "resuming from step-000000004" in r.stderr
    assert losses(crash) == losses(fsdp2) and batches(crash) == batches(fsdp2)
    assert_same_state(state(crash), state(fsdp2))
    assert not list(ck.glob(".*tmp*"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("point", ["checkpoint.dcp", "checkpoint.hash"])
def test_a_save_failing_on_one_rank_fails_every_rank_at_once_and_keeps_the_previous_checkpoint(built, tmp_path, point):
    # dist_timeout_s 600: a rank 0 left waiting in the gather for rank 1 would outlast the run's timeout
    crash = elastic(built, tmp_path / "crash", nproc_per_node=2, strategy="fsdp", dist_timeout_s=600)
    # at step 8's save, rank 1's disk fills: inside DCP's write (DCP tells every rank), or after it,
    # while rank 1 hashes its shards (rank 1 tells rank 0 in the gather)
    r = run([SL, "stage", "train"], crash, check=False, timeout=150, env=env_for(SHARDLINE_CHAOS=f"{point}@8:rank1"))
    assert r.returncode == 2 and "torchrun with 2 processes failed" in r.stderr
    full = "error: no space left on the device while writing data/; free space and re-run"
    named = ("error: checkpoint step 8: rank 1 could not write its shards (OSError: [Errno 28] No space left on "
             f"device (planted: SHARDLINE_CHAOS={point})); the previous checkpoint stays the newest valid")
    assert r.stderr.count(full) == 1  # rank 1, whose disk is full, in one line
    assert named in r.stderr  # rank 0, which wrote no manifest and does not blame its own disk
    assert "shardline/training" not in r.stderr  # no traceback through our code (torchrun prints its own report)
    assert [e.step for e in checkpoint.entries(crash / "data/checkpoints")] == [4]


def test_a_manifest_missing_a_rank_file_is_invalid(fsdp2, tmp_path):
    src = latest(fsdp2)
    unlisted = tmp_path / "unlisted" / src.name
    shutil.copytree(src, unlisted)
    m = json.loads((unlisted / MANIFEST).read_text())
    del m["files"]["dcp/__1_0.distcp"]
    (unlisted / MANIFEST).write_text(json.dumps(m))
    assert checkpoint.verify(unlisted) == (
        False, "dcp/__1_0.distcp is not in the manifest (a rank's file the save did not gather)")
    missing = tmp_path / "missing" / src.name
    shutil.copytree(src, missing)
    (missing / "dcp/__1_0.distcp").unlink()
    assert checkpoint.verify(missing) == (False, "dcp/__1_0.distcp missing")


@pytest.mark.timeout(400)
def test_sharded_checkpoints_reshard_between_1_2_and_4_ranks(built, fsdp2, tmp_path):
    # 2 -> 1 and 2 -> 4: the same batches; gradients summed in another order, so close, not bit-exact
    for n in (1, 4):
        root = rewound(fsdp2, tmp_path / f"to{n}", 4, nproc_per_node=n)
        r = run([SL, "stage", "train"], root, timeout=300)
        assert "resuming from step-000000004" in r.stderr
        assert batches(root) == batches(fsdp2) and close(losses(root)[4:], losses(fsdp2)[4:], rel=1e-4)
        if n == 4:
            assert_close_state(state(root), state(fsdp2))
        else:  # one process writes full checkpoints unless told otherwise
            assert json.loads((latest(root) / MANIFEST).read_text())["format"] == "full"
            model, _, _ = load_model(latest(root))
            for k, v in sharded.full_state(latest(fsdp2)).items():
                torch.testing.assert_close(model.state_dict()[k], v, rtol=1e-3, atol=1e-5)

    # 1 -> 2: one process told to write sharded, resumed by two
    one = elastic(built, tmp_path / "one", checkpoint_format="sharded")
    run([SL, "stage", "train"], one)
    m = json.loads((latest(one) / MANIFEST).read_text())
    assert m["format"] == "sharded" and len(m["ranks"]) == 1
    two = rewound(one, tmp_path / "one-to-two", 4, nproc_per_node=2, strategy="fsdp")
    r = run([SL, "stage", "train"], two, timeout=240)
    assert "resuming from step-000000004" in r.stderr
    assert batches(two) == batches(one) and close(losses(two)[4:], losses(one)[4:], rel=1e-4)
    assert_close_state(state(two), state(one))


def test_export_eval_and_lineage_read_a_sharded_checkpoint(fsdp2, tmp_path):
    path = latest(fsdp2)
    model, st, manifest = load_model(path)
    assert st["step"] == 8 and manifest["format"] == "sharded"
    lin = json.loads(run([SL, "lineage", "latest", "--json"], fsdp2).stdout)
    assert lin == manifest["lineage"]
    # judged in one process from the gathered shards, the checkpoint scores what the two FSDP ranks
    # recorded for it while training (their sums in another order: close, not equal)
    ev = json.loads(run([SL, "eval", "latest", "--json"], fsdp2).stdout)
    assert ev["step"] == 8 and ev["recorded"] == manifest["eval"]
    assert close([ev["total"]["loss"]] + [v["loss"] for v in ev["sources"].values()],
                 [manifest["eval"]["total"]["loss"]] + [manifest["eval"]["sources"][n]["loss"] for n in ev["sources"]],
                 rel=1e-5)
    out = tmp_path / "hf"
    run([SL, "export", "latest", str(out)], fsdp2)
    from safetensors.torch import load_file

    hf = load_file(out / "model.safetensors")
    assert model.cfg.arch == "llama" and hf.keys() == model.state_dict().keys() - {"lm_head.weight"}  # tied
    assert all(torch.equal(hf[k], v) for k, v in model.state_dict().items() if k != "lm_head.weight")
