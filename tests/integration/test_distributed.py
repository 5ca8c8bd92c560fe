"""Training on many processes and nodes: two torchrun "nodes" on loopback (c10d rendezvous),
resume at another world size or strategy, FSDP, and a dead or hung rank failing the job in
seconds. Everything runs on 127.0.0.1 with gloo; ~2 minutes on 2 cores."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import pytest
import torch

from shardline.core.filenames import MANIFEST
from shardline.training import checkpoint
from tests.conftest import BIN, env_for, run
from tests.integration.test_train import assert_same_state, built, final_state, losses, project  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow
SL = str(BIN / "shardline")
# dropout is drawn per rank from (seed, step, rank): only a dropout-free model gives the same
# losses at another world size. Checkpoints at 4 and 8, both kept.
ELASTIC = {"model": {"dropout": 0.0}, "train": {"steps": 8, "checkpoint_every": 4, "keep_last": 3}}


def records(root: Path) -> list[dict]:
    return [json.loads(ln) for ln in (root / "data/metrics/train.jsonl").read_text().splitlines()]


def batches(root: Path) -> list[list[str]]:
    return [r["batches"] for r in records(root)]


def elastic(built: Path, dest: Path, **train) -> Path:
    return project(built, dest, model=ELASTIC["model"], train={**ELASTIC["train"], **train})


def rewound(src: Path, dest: Path, step: int, **train) -> Path:
    """A copy of `src` whose newest checkpoint is `step`, as if it had been killed right after it."""
    root = project(src, dest, train=train) if train else project(src, dest)
    for e in checkpoint.entries(root / "data/checkpoints"):
        if e.step > step:
            shutil.rmtree(e.path)
    return root


def close(a: list[float], b: list[float], rel: float) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=rel) for x, y in zip(a, b))


def model_sha(root: Path) -> str:
    path = checkpoint.latest_valid(root / "data/checkpoints", lambda _: None)
    return json.loads((path / MANIFEST).read_text())["files"]["model.pt"]["sha256"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nodes(root: Path | list[Path], n: int = 2, **env: str) -> list[subprocess.Popen]:
    """`n` torchrun agents, one process each, meeting at a c10d rendezvous on loopback: the
    command a user runs once per node, with the first node's host for 127.0.0.1. `root`: the
    project folder they share, or each node's own (a list: node i runs in roots[i], its log there)."""
    roots = root if isinstance(root, list) else [root] * n
    port = free_port()
    procs = []
    for i, here in enumerate(roots):
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={len(roots)}", "--nproc_per_node=1",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={roots[0].name}-{port}",
               "--max-restarts=0", "--no-python", SL, "--root", str(here), "stage", "train"]
        with open(here / f"node{i}.log", "w") as log:
            procs.append(subprocess.Popen(cmd, cwd=here, env=env_for(**env), stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
    return procs


def children(pid: int) -> list[int]:
    """The processes `pid` started (torchrun's workers run in sessions of their own)."""
    out = []
    for p in Path("/proc").iterdir():
        with suppress(OSError, ValueError, IndexError):
            if p.name.isdigit() and int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(p.name))
    return out


def kill_all(procs: list[subprocess.Popen], workers: list[int]) -> None:
    for pid in workers + [w for p in procs if p.poll() is None for w in children(p.pid)]:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


@pytest.fixture(scope="module")
def ddp2(built, tmp_path_factory) -> Path:
    """An uninterrupted 2-process DDP run to step 8 (checkpoints 4 and 8)."""
    root = elastic(built, tmp_path_factory.mktemp("ddp2") / "p", nproc_per_node=2)
    run([SL, "stage", "train"], root, timeout=240)
    return root


@pytest.mark.timeout(240)
def test_two_nodes_on_loopback_see_one_process_batches(built, tmp_path):
    one = elastic(built, tmp_path / "one", steps=6, grad_accum=2)
    run([SL, "stage", "train"], one)
    # fsdp with gradient accumulation: the other strategy's no-sync path, at no extra run
    two = elastic(built, tmp_path / "two", steps=6, grad_accum=2, strategy="fsdp")
    procs = nodes(two)
    try:
        rcs = [p.wait(timeout=180) for p in procs]
    finally:
        kill_all(procs, [])
    assert rcs == [0, 0], "\n".join((two / f"node{i}.log").read_text()[-3000:] for i in range(2))
    # global rank 0 alone writes: one metrics line per step, one checkpoint per save
    assert batches(two) == batches(one) and len(batches(one)) == 6 and len(batches(one)[0]) == 2
    assert close(losses(two), losses(one), rel=1e-5)
    assert [e.step for e in checkpoint.entries(two / "data/checkpoints")] == [4, 6]
    assert final_state(two)["loader"] == final_state(one)["loader"]


@pytest.mark.timeout(300)
def test_world2_checkpoint_resumes_exact_at_world2_and_close_at_world1(built, ddp2, tmp_path):
    crash = elastic(built, tmp_path / "crash", nproc_per_node=2)
    r = run([SL, "stage", "train"], crash, check=False, env=env_for(SHARDLINE_CHAOS="train.step@7:rank1"))
    # one line per cause (rank 0 only lost its peer: no cause of its own), then where the whole log is
    assert r.returncode == 2 and r.stderr.splitlines()[-2:] == [
        f"train: rank 1 of 2 on {torchrun_host()}: killed by signal 9 (SIGKILL)",
        "error: train: torchrun with 2 processes failed (the cause above); every rank's lines and torchrun's own are "
        "in .shardline/logs/torchrun.log"], r.stderr
    assert "Traceback" not in r.stderr and "ChildFailedError" in (crash / ".shardline/logs/torchrun.log").read_text()
    assert "Connection" in (crash / ".shardline/logs/rank-0.log").read_text()  # gloo's traceback, kept
    assert checkpoint.latest_valid(crash / "data/checkpoints", lambda _: None).name == "step-000000004"
    one = project(crash, tmp_path / "one", train={"nproc_per_node": 1})

    r = run([SL, "stage", "train"], crash, timeout=240)
    assert "resuming from step-000000004" in r.stderr
    assert losses(crash) == losses(ddp2) and batches(crash) == batches(ddp2)
    assert model_sha(crash) == model_sha(ddp2)
    assert_same_state(final_state(crash), final_state(ddp2))

    # world 1: the same batches and state; sums of gradients in another order, so not bit-exact
    r = run([SL, "stage", "train"], one)
    assert "resuming from step-000000004" in r.stderr
    # rows 1-4 are the crashed world-2 run's, kept up to its checkpoint: only 5-8 were computed at world 1,
    # so only they are compared, with the uninterrupted world-2 run
    assert batches(one)[4:] == batches(ddp2)[4:] and len(losses(one)) == 8
    assert close(losses(one)[4:], losses(ddp2)[4:], rel=1e-4)
    a, b = final_state(one), final_state(ddp2)
    assert a["step"] == 8 and a["loader"] == b["loader"]
    for k in a["model"]:
        torch.testing.assert_close(a["model"][k], b["model"][k], rtol=1e-3, atol=1e-5)
    for i in a["opt"]:
        assert a["opt"][i]["step"] == b["opt"][i]["step"] == 8
        torch.testing.assert_close(a["opt"][i]["exp_avg"], b["opt"][i]["exp_avg"], rtol=1e-3, atol=1e-6)


def torchrun_host() -> str:
    """The host name torchrun's report gives a failed rank, and a rank gives itself: socket.getfqdn()."""
    return socket.getfqdn()


@pytest.mark.timeout(120)
def test_a_setting_every_rank_refuses_is_one_line_naming_the_ranks_not_torchruns_traceback(built, tmp_path):
    root = project(built, tmp_path / "p", train={"nproc_per_node": 2}, loader={"global_batch": 3})
    r = run([SL, "stage", "train"], root, check=False)
    assert r.returncode == 2 and r.stderr.splitlines()[1:] == [
        f"train: ranks 0, 1 of 2 on {torchrun_host()}: loader.global_batch (3) must be divisible by the world size (2)",
        "error: train: torchrun with 2 processes failed (the cause above); every rank's lines and torchrun's own are "
        "in .shardline/logs/torchrun.log"], r.stderr
    assert r.stderr.splitlines()[0].startswith("train: launching 2 processes: ")
    full = (root / ".shardline/logs/torchrun.log").read_text()  # the whole log: each rank's line and torchrun's report
    assert full.count("must be divisible by the world size") >= 2 and "ChildFailedError" in full


@pytest.mark.timeout(300)
def test_fsdp_trains_like_ddp_and_checkpoints_cross_strategies(built, ddp2, tmp_path):
    fsdp = elastic(built, tmp_path / "fsdp", nproc_per_node=2, strategy="fsdp", checkpoint_format="full")
    run([SL, "stage", "train"], fsdp, timeout=240)
    assert all(math.isfinite(x) for x in losses(fsdp)) and close(losses(fsdp), losses(ddp2), rel=1e-5)
    assert batches(fsdp) == batches(ddp2)
    # held-out eval across ranks: each scores every world-th batch, sums all-reduced (fsdp all-gathers)
    evals = [[(r["step"], r["eval"]["total"]["loss"]) for r in records(x) if "eval" in r] for x in (fsdp, ddp2)]
    assert [s for s, _ in evals[0]] == [s for s, _ in evals[1]] == [4, 8]
    assert close([v for _, v in evals[0]], [v for _, v in evals[1]], rel=1e-5)
    # full under fsdp: the file a single process writes (model keys, optimizer by index, full tensors)
    a, b = final_state(fsdp), final_state(ddp2)
    assert list(a["model"]) == list(b["model"]) and sorted(a["opt"]) == sorted(b["opt"])
    for k in a["model"]:
        torch.testing.assert_close(a["model"][k], b["model"][k], rtol=1e-3, atol=1e-5)
    _, state, _ = checkpoint.load(checkpoint.latest_valid(fsdp / "data/checkpoints", lambda _: None))
    assert state["strategy"] == "fsdp" and state["world_size"] == 2

    # a DDP checkpoint resumed under FSDP: rank 0 reads it, the shards are broadcast
    shard = rewound(ddp2, tmp_path / "ddp-to-fsdp", 4, strategy="fsdp")
    r = run([SL, "stage", "train"], shard, timeout=240)
    assert "resuming from step-000000004" in r.stderr
    assert close(losses(shard), losses(ddp2), rel=1e-5) and batches(shard) == batches(ddp2)

    # an FSDP checkpoint resumed by one process (fsdp with one process is plain training, said so)
    single = rewound(fsdp, tmp_path / "fsdp-to-one", 4, nproc_per_node=1)
    r = run([SL, "stage", "train"], single)
    assert "resuming from step-000000004" in r.stderr and "training single-process" in r.stderr
    assert close(losses(single), losses(fsdp), rel=1e-4) and batches(single) == batches(fsdp)
    for k, v in final_state(single)["model"].items():
        torch.testing.assert_close(v, a["model"][k], rtol=1e-3, atol=1e-5)


MIXED = """
import json, torch
from shardline.core.config import Train
from shardline.training.dist import Dist
from shardline.model import ModelConfig, build
dist = Dist(Train(strategy="fsdp", precision="bf16", nproc_per_node=2), torch.device("cpu"))
torch.manual_seed(0)
model = build(ModelConfig("llama", vocab_size=64, seq_len=16, n_layer=2, n_head=2, d_model=16, ffn_hidden=32))
seen = []
model.blocks[0].mlp.up_proj.register_forward_pre_hook(lambda m, a: seen.append([str(m.weight.dtype), str(a[0].dtype)]))
net = dist.wrap(model, model.blocks)
x = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(dist.rank))
_, loss = net(x, x)
loss.backward()
p = next(model.parameters())
if dist.rank == 0:
    print(json.dumps({"mp": dist.mixed_precision, "seen": seen, "param": str(p.dtype), "grad": str(p.grad.dtype),
                      "loss": str(loss.dtype)}))
del net, model
dist.close()
"""


@pytest.mark.timeout(240)
def test_fsdp_bf16_is_mixed_precision_bf16_compute_fp32_state(built, tmp_path):
    """precision bf16 under fsdp: the all-gathered weights a block computes with are bf16, the sharded
    parameters, their gradients (reduce-scattered in fp32) and so the optimizer stay fp32, the loss is
    fp32; and the trainer runs that way end to end, its checkpoint fp32."""
    script = tmp_path / "mixed.py"
    script.write_text(MIXED)
    r = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)],
            tmp_path, timeout=120)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"mp": True, "seen": [["torch.bfloat16", "torch.bfloat16"]], "param": "torch.float32",
                   "grad": "torch.float32", "loss": "torch.float32"}
    root = elastic(built, tmp_path / "p", nproc_per_node=2, strategy="fsdp", precision="bf16", steps=4)
    run([SL, "stage", "train"], root, timeout=200)
    assert len(losses(root)) == 4 and all(math.isfinite(x) for x in losses(root))
    assert all(t.dtype == torch.float32 for t in final_state(root)["model"].values())


@pytest.mark.timeout(180)
def test_dead_rank_fails_both_nodes_in_seconds(built, tmp_path):
    root = elastic(built, tmp_path / "p", steps=5000, checkpoint_every=1000)  # minutes, unless stopped
    fired = tmp_path / "fired"
    procs = nodes(root, SHARDLINE_CHAOS="train.step@3:rank1", SHARDLINE_CHAOS_LOG=str(fired))
    t0, killed = time.monotonic(), None
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() - t0 < 150:
            if killed is None and fired.exists():
                killed = time.monotonic()
            time.sleep(0.02)
        done = time.monotonic()
    finally:
        kill_all(procs, [])
    assert fired.exists() and fired.read_text() == "train.step#3\n", (root / "node0.log").read_text()[-3000:]
    assert all(p.returncode not in (0, None) for p in procs), [p.returncode for p in procs]
    # the surviving node: one line of its own, not gloo's traceback, and torchrun's report quotes it
    node0 = (root / "node0.log").read_text()
    said = [ln for ln in node0.splitlines() if ln.startswith("error: train: rank 0 of 2 on ")]
    assert len(said) == 1 and "lost the other ranks in a collective (" in said[0], node0[-3000:]
    # no traceback through our code: torchrun's agent prints its own (one or two, and c10d's frames, as its
    # store's connection to the dead node goes), never the rank's
    assert not re.search(r'File "[^"]*/shardline/', node0), node0
    if "ChildFailedError" in node0:  # torchrun's report quotes it (unless its agent lost the store first, on node 1)
        assert f"traceback : {said[0].removeprefix('error: ')}" in node0
    # train.dist_timeout_s is 60: the survivor's collective fails on the closed connection, sooner
    assert done - killed < 30, f"the job took {done - killed:.1f}s to fail after rank 1 died"
    print(f"both nodes failed {done - killed:.1f}s after rank 1 died")


@pytest.mark.timeout(180)
def test_hung_rank_fails_the_job_after_dist_timeout(built, tmp_path):
    root = elastic(built, tmp_path / "p", steps=5000, checkpoint_every=1000, dist_timeout_s=5)
    procs, stopped = nodes(root), []
    try:
        metrics = root / "data/metrics/train.jsonl"
        while not metrics.exists() or len(metrics.read_text().splitlines()) < 3:
            assert all(p.poll() is None for p in procs), "training ended before the hang"
            time.sleep(0.05)
        stopped = children(procs[1].pid)
        assert len(stopped) == 1
        os.kill(stopped[0], signal.SIGSTOP)  # alive, holds its sockets, never answers: a hung rank
        t0 = time.monotonic()
        rc = procs[0].wait(timeout=120)
        waited = time.monotonic() - t0
    finally:
        kill_all(procs, stopped)
    log = (root / "node0.log").read_text()
    assert rc != 0 and "Timed out waiting 5000ms" in log
    assert 4 < waited < 30, f"node 0 failed {waited:.1f}s after the hang (train.dist_timeout_s: 5)"
    print(f"node 0 failed {waited:.1f}s after node 1's rank hung")
