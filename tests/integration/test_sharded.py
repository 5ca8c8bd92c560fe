"""Sharded checkpoints (torch.distributed.checkpoint) under torchrun on gloo: each rank writes its
shards, a rank killed mid-save costs only that checkpoint, the same world size resumes bit-exact,
and 1, 2 and 4 ranks read each other's checkpoints resharded; a save failing on one rank fails all at once;
two nodes that share only an S3 bucket (moto on loopback) lose one and resume from the bucket.
~2.5 minutes on 2 cores."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path

import pytest
import torch
import yaml

from harness.s3 import BUCKET, aws, client, s3_env  # noqa: F401 (fixtures)
from shardline.core.filenames import MANIFEST
from shardline.results.trained import load_model
from shardline.training import bucket, checkpoint, sharded, storage
from tests.conftest import env_for, run, write_params
from tests.integration.test_distributed import ELASTIC, SL, batches, children, close, elastic, kill_all, nodes, \
    records, rewound
from tests.integration.test_train import assert_same_state, built, final_state, losses, project  # noqa: F401 (fixture)

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
    # one line per cause (shardline.training.launch): each rank's own, after its rank and node
    full = "no space left on the device while writing data/; free space and re-run"
    named = ("checkpoint step 8: rank 1 could not write its shards (OSError: [Errno 28] No space left on "
             f"device (planted: SHARDLINE_CHAOS={point})); the previous checkpoint stays the newest valid")
    lines = r.stderr.splitlines()
    # rank 1, whose disk is full, in one line when its error file came before torchrun stopped it (rank 0's
    # names it either way); its own line is in the whole log
    assert sum(ln.startswith("train: rank 1 of 2 on ") and ln.endswith(": " + full) for ln in lines) <= 1, r.stderr
    assert any(f"error: {full}" in f.read_text() for f in (crash / ".shardline/logs/torchrun").rglob("*.log"))
    # rank 0, which wrote no manifest and does not blame its own disk
    assert any(ln.startswith("train: rank 0 of 2 on ") and ln.endswith(": " + named) for ln in lines), r.stderr
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
    assert st["step"] == 8 and manifest.format == "sharded"
    lin = json.loads(run([SL, "lineage", "latest", "--json"], fsdp2).stdout)
    assert lin == manifest.lineage.to_json()
    # judged in one process from the gathered shards, the checkpoint scores what the two FSDP ranks
    # recorded for it while training (their sums in another order: close, not equal)
    ev = json.loads(run([SL, "eval", "latest", "--json"], fsdp2).stdout)
    assert ev["step"] == 8 and ev["recorded"] == manifest.eval
    assert close([ev["total"]["loss"]] + [v["loss"] for v in ev["sources"].values()],
                 [manifest.eval["total"]["loss"]] + [manifest.eval["sources"][n]["loss"] for n in ev["sources"]],
                 rel=1e-5)
    out = tmp_path / "hf"
    run([SL, "export", "latest", str(out)], fsdp2)
    from safetensors.torch import load_file

    hf = load_file(out / "model.safetensors")
    assert model.cfg.arch == "llama" and hf.keys() == model.state_dict().keys() - {"lm_head.weight"}  # tied
    assert all(torch.equal(hf[k], v) for k, v in model.state_dict().items() if k != "lm_head.weight")


def bucket_node(built: Path, dest: Path, **sections: dict) -> Path:
    """A node's own working directory: params.yaml and data/tokenizer/ (what a clone of the project
    and `dvc pull data/tokenizer` give it), no data/shards, no data/checkpoints: the params send both
    to the bucket. The run is fsdp2's, but for where it reads and writes."""
    (dest / "data").mkdir(parents=True)
    shutil.copytree(built / "data/tokenizer", dest / "data/tokenizer")
    p = yaml.safe_load((built / "params.yaml").read_text())
    for k in {*ELASTIC, *sections}:
        p[k] = {**p[k], **ELASTIC.get(k, {}), **sections.get(k, {})}
    write_params(dest, p)
    return dest


def stopped(pid: int) -> bool:
    with suppress(OSError):
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    return False


@pytest.mark.timeout(240)
def test_two_nodes_sharing_only_a_bucket_lose_one_and_resume_from_it_bit_exact(built, fsdp2, s3_env, aws, tmp_path):
    creds = {k: v for k, v in s3_env.items() if k.startswith("AWS_")}  # the nodes' env (`aws`: this process's)
    shards, ckpts = f"s3://{BUCKET}/nodes/shards", f"s3://{BUCKET}/nodes/checkpoints"
    # the data line's machine publishes them (a copy: push-shards keeps receipts, and `built` is shared)
    run([SL, "push-shards", shards], project(built, tmp_path / "publisher"), env=env_for(**creds))
    roots = [bucket_node(built, tmp_path / f"node{i}", loader={"shards_uri": shards},
                         train={"nproc_per_node": 2, "strategy": "fsdp", "checkpoint_uri": ckpts}) for i in range(2)]

    # rank 1 freezes at step 8's save, its shards in the bucket, before rank 0 can gather their hashes;
    # then its node dies: a SIGKILL of the torchrun agent's process group and of its worker's
    fired = tmp_path / "fired"
    procs = nodes(roots, SHARDLINE_CHAOS="checkpoint.shard@8:rank1", SHARDLINE_CHAOS_SIGNAL="STOP",
                  SHARDLINE_CHAOS_LOG=str(fired), **creds)
    try:
        t0, dead = time.monotonic(), None
        while dead is None and time.monotonic() - t0 < 120:
            assert all(p.poll() is None for p in procs), "\n".join((r / f"node{i}.log").read_text()[-3000:]
                                                                for i, r in enumerate(roots))
            dead = next((p for p in procs if any(stopped(w) for w in children(p.pid))), None)
            time.sleep(0.02)
        assert dead is not None and fired.read_text() == "checkpoint.shard#2\n"
        for pgid in [dead.pid] + children(dead.pid):
            os.killpg(pgid, signal.SIGKILL)
        dead.wait()
        survivor = next(p for p in procs if p is not dead)
        assert survivor.wait(timeout=60) != 0  # its rank's collectives fail on the closed connection
    finally:
        kill_all(procs, [])
    torn = [o["Key"] for o in client(s3_env).list_objects_v2(Bucket=BUCKET, Prefix="nodes/checkpoints/step-000000008/")
            .get("Contents", [])]
    assert "nodes/checkpoints/step-000000008/dcp/__1_0.distcp" in torn and not any(k.endswith(MANIFEST) for k in torn)
    assert [(e.step, e.valid) for e in bucket.entries(ckpts)] == [(4, True), (8, False)]

    procs = nodes(roots, **creds)  # both nodes again, as they were: no shared folder, only the bucket
    try:
        rcs = [p.wait(timeout=150) for p in procs]
    finally:
        kill_all(procs, [])
    logs = [(r / f"node{i}.log").read_text() for i, r in enumerate(roots)]
    assert rcs == [0, 0], "\n".join(log[-3000:] for log in logs)
    lead = next(i for i, log in enumerate(logs) if "resuming from step-000000004" in log)  # global rank 0's node
    assert f"removed step-000000008 from {ckpts}: no manifest" in logs[lead]
    assert [(e.step, e.valid) for e in bucket.entries(ckpts)] == [(4, True), (8, True)]

    # the weights, optimizer and loader of the uninterrupted run at the same world size, bit for bit
    got = storage.fetch(bucket.step_url(ckpts, 8), tmp_path / "got/data/checkpoints")
    assert_same_state(state(tmp_path / "got"), state(fsdp2))
    after = [r for r in records(roots[lead]) if r["step"] > 4]
    assert [r["loss"] for r in after] == losses(fsdp2)[4:] and [r["batches"] for r in after] == batches(fsdp2)[4:]
    mine, theirs = (json.loads((p / MANIFEST).read_text()) for p in (got, latest(fsdp2)))
    held_out = [{k: m["eval"][k] for k in ("total", "sources")} for m in (mine, theirs)]  # not its timing
    assert held_out[0] == held_out[1] and mine["step"] == 8  # the held-out losses, bit for bit
    # the lineage says what was trained on: the bucket's shards (their content hash, as local ones), and where
    lin = mine["lineage"]
    assert lin["data_version"] == theirs["lineage"]["data_version"] and lin["mix"] == theirs["lineage"]["mix"]
    assert lin["params"]["loader"]["shards_uri"] == shards and lin["params"]["train"]["checkpoint_uri"] == ckpts
    assert not (roots[0] / "data/checkpoints").exists() and not (roots[1] / "data/shards").exists()

    # a node asks what it made: the commands read the bucket (a verified copy under .shardline/fetched/)
    asked = [["checkpoints"], ["lineage", "latest", "--json"], ["eval", "latest", "--json"]]
    with ThreadPoolExecutor(3) as pool:  # each node its own copies: nothing shared but the bucket
        listed, told, ev = pool.map(lambda i: run([SL, *asked[i]], roots[i % 2], env=env_for(**creds)).stdout, range(3))
    assert listed.splitlines() == ["step-000000004  valid    ok", "step-000000008  valid    ok"]
    assert json.loads(told) == lin
    ev = json.loads(ev)  # judged on the bucket's held-out shards, in one process (not two ranks: close, not equal)
    assert ev["step"] == 8 and ev["same_data"] and ev["recorded"] == mine["eval"]
    assert close([ev["total"]["loss"]], [mine["eval"]["total"]["loss"]], rel=1e-5)
