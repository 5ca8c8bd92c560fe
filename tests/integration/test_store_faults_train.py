"""Object-store faults survived on the training side (issue 44, point 2): train.checkpoint_uri's
checkpoints, `shardline eval` on streamed held-out shards, and a run streaming loader.shards_uri,
each through harness/faultproxy.py's seeded schedule (test_store_faults.py's `store` fixture: a
third of the requests fail, every fault, the seed printed). Each ends with the per-step losses and
the checkpoint bytes of a fault-free run; a fault that persists is one line naming the object and
the last error; a transient fault is never called a torn or corrupt checkpoint or shard; a run
SIGKILLed in a fault storm resumes to the weights of a run never killed.

Small: a 1-layer model of width 32 trained 8 steps in this process (the data half built once per
module, in-process), so each test takes seconds; only the killed run is a process of its own."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
from pathlib import Path

import pytest
import yaml

from harness.projects import lineage_of, stdlib_dir
from harness.s3 import BUCKET, client, s3_env  # noqa: F401 (fixture)
from shardline import paramsfile
from shardline.core.layout import Layout
from tests.conftest import BIN, env_for, make_project, run, write_params
from tests.integration.test_store_faults import FAST, QUIET, faulted, store  # noqa: F401 (fixture)


@pytest.fixture
def faults(store, monkeypatch):  # noqa: F811
    """test_store_faults.py's `store` (the proxy, its seeded schedule), with botocore's own retries
    off: its legacy backoff waits up to a second before each, and a training run meets dozens of
    faults; the store section's loop, whose waits FAST sets, retries every fault alone."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    return store


STEPS = {"steps": 8, "checkpoint_every": 4, "keep_last": 2, "keep_every": 0, "warmup_steps": 2, "threads": 1}
MODEL = ("model.pt", "optimizer.pt")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A project whose data half has run (in this process), ready to train; no faults."""
    from shardline.context import RunContext
    from shardline.data import download
    from shardline.orchestration.tasks.invoke import invoke

    src = stdlib_dir(tmp_path_factory.mktemp("src"), 8)
    params, layout = make_project(tmp_path_factory.mktemp("built") / "p",
                                  [{"name": "code", "uri": str(src), "format": "txt"}],
                                  train=STEPS, eval={"blocks": 4}, store=FAST)
    download.run(params, layout, **QUIET)
    for name in ("clean", "tokenize", "shard"):
        invoke(name, params, layout, RunContext(log=lambda _: None))
    return layout.root


def project(built: Path, dest: Path, **sections) -> Path:
    """A copy of `built` with `sections` merged into its params."""
    shutil.copytree(built, dest)
    p = yaml.safe_load((dest / "params.yaml").read_text())
    for k, v in sections.items():
        p[k] = {**p.get(k, {}), **v}
    write_params(dest, p)
    return dest


def project_store(root: Path, section: dict) -> None:
    """params.yaml's store section set to `section`."""
    p = yaml.safe_load((root / "params.yaml").read_text())
    write_params(root, {**p, "store": section})


def train(root: Path) -> None:
    """The train stage as `shardline stage train` runs it, in this process."""
    from shardline.context import RunContext
    from shardline.training import train as stage

    stage.run(paramsfile.load(root / "params.yaml"), Layout.at(root), RunContext(log=lambda _: None))


def losses(root: Path) -> list[tuple[int, float]]:
    lines = (root / "data/metrics/train.jsonl").read_text().splitlines()
    return [(r["step"], r["loss"]) for r in map(json.loads, lines)]


@pytest.fixture(scope="module")
def reference(built, tmp_path_factory) -> dict:
    """A fault-free run on local shards and data/checkpoints: its losses, and each kept
    checkpoint's model and optimizer bytes."""
    root = project(built, tmp_path_factory.mktemp("ref") / "p")
    train(root)
    ckpts = root / "data/checkpoints"
    return {"root": root, "losses": losses(root),
            "bytes": {(d.name, n): (d / n).read_bytes() for d in sorted(ckpts.glob("step-*")) for n in MODEL}}


def stored(s3_env: dict, prefix: str) -> dict[tuple[str, str], bytes]:  # noqa: F811
    """The model and optimizer bytes of each step under `prefix`, read past the proxy (no faults)."""
    s3 = client(s3_env)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/").get("Contents", [])]
    return {tuple(k[len(prefix) + 1:].split("/")): s3.get_object(Bucket=BUCKET, Key=k)["Body"].read()
            for k in keys if k.rsplit("/", 1)[1] in MODEL}


def objects(s3_env: dict, prefix: str) -> list[str]:  # noqa: F811
    listed = client(s3_env).list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/")
    return sorted(o["Key"][len(prefix) + 1:] for o in listed.get("Contents", []))


# ---- train.checkpoint_uri


@pytest.mark.timeout(60)
def test_checkpoints_to_a_bucket_through_a_fault_schedule_are_the_bytes_of_a_fault_free_run(
        built, reference, faults, s3_env, tmp_path):  # noqa: F811
    prefix = f"faults/{tmp_path.name}/ckpt"
    root = project(built, tmp_path / "p", train={"checkpoint_uri": f"s3://{BUCKET}/{prefix}"})
    # retention reads step 4's manifest back after each save: cut once on the way, it stopped the
    # run as botocore's 'FlexibleChecksumError ...; check that the bucket exists, ... credentials'
    faults.persist("cut", f"GET /{BUCKET}/{prefix}/step-000000004/manifest.json", times=1, at=0.5)
    train(root)
    assert faults.injected()["cut"] >= 1, faulted(faults)
    assert losses(root) == reference["losses"], faulted(faults)
    assert stored(s3_env, prefix) == reference["bytes"], faulted(faults)  # both kept steps, byte for byte
    assert [n for n in objects(s3_env, prefix) if n.endswith("manifest.json")] == [
        "step-000000004/manifest.json", "step-000000008/manifest.json"], faulted(faults)


def saved(root: Path, uri: str, step: int = 4) -> None:
    """A small checkpoint in the bucket (the test has set the schedule's rate to 0 first)."""
    import torch

    from shardline.training import bucket

    bucket.save(uri, step, {"model.pt": {"w": torch.arange(70_000, dtype=torch.float32)}}, {"step": step},
                lineage_of(root))


@pytest.mark.timeout(60)
def test_a_checkpoint_object_read_back_cut_is_read_again_not_called_corrupt(built, faults, tmp_path, capsys):
    """A read of a checkpoint's object cut once, to nothing, with no length promised: `shardline
    checkpoints` stopped on it with 'FlexibleChecksumError ...; check that the bucket exists, the
    network, and the AWS_* credentials' (exit 2: a user's mistake, not a fault to retry)."""
    from shardline.cli.main import main

    prefix = f"faults/{tmp_path.name}/ckpt"
    root = project(built, tmp_path / "p", train={"checkpoint_uri": f"s3://{BUCKET}/{prefix}"})
    faults.rate = 0  # this fault alone
    saved(root, f"s3://{BUCKET}/{prefix}")
    faults.persist("cut", f"GET /{BUCKET}/{prefix}/step-000000004/model.pt", times=1, at=0.0)  # to nothing
    assert main(["--root", str(root), "checkpoints"]) == 0
    assert capsys.readouterr().out.splitlines() == ["step-000000004  valid    ok"], faulted(faults)
    assert faults.injected()["cut"] == 1, faulted(faults)


@pytest.mark.timeout(60)
def test_a_bucket_that_refuses_every_checkpoint_write_fails_training_in_one_line(
        built, faults, tmp_path, s3_env, capsys):  # noqa: F811
    """`shardline stage train` as a user runs it (in this process): a 503 on every PUT of the
    step's model.pt, the store section's budget (2 attempts)."""
    from shardline.cli.main import main

    prefix = f"faults/{tmp_path.name}/ckpt"
    uri = f"s3://{BUCKET}/{prefix}"
    root = project(built, tmp_path / "p", train={"checkpoint_uri": uri, "steps": 4},
                   store={**FAST, "attempts": 2})
    faults.rate = 0
    faults.persist("503", f"PUT /{BUCKET}/{prefix}/step-000000004/model.pt")
    assert main(["--root", str(root), "stage", "train"]) == 75  # transient: a retry later may pass
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"error: {uri}/step-000000004/model.pt: giving up after 2 attempts"), line
    assert "last error OSError: [Errno 16] Please reduce your request rate." in line, line
    assert "store.attempts (2) and store.budget_s (60)" in line, line
    assert objects(s3_env, prefix) == []  # no manifest vouches for a half-written step: nothing is left


@pytest.mark.timeout(60)
def test_a_checkpoint_the_store_keeps_failing_to_send_is_one_line_naming_it(built, faults, tmp_path, capsys):
    """`shardline eval latest` with train.checkpoint_uri: every read of the checkpoint's model.pt is
    reset before its first byte. It was 'ClientPayloadError: ... Connection reset by peer; check
    that the bucket exists, the network, and the AWS_* credentials' (exit 2)."""
    from shardline.cli.main import main

    prefix = f"faults/{tmp_path.name}/ckpt"
    uri = f"s3://{BUCKET}/{prefix}"
    root = project(built, tmp_path / "p", train={"checkpoint_uri": uri}, store={**FAST, "attempts": 2})
    faults.rate = 0
    saved(root, uri)
    faults.persist("reset", f"GET /{BUCKET}/{prefix}/step-000000004/model.pt", at=0.0)  # no byte gets through
    assert main(["--root", str(root), "eval", "latest"]) == 75
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"error: {uri}/step-000000004/model.pt: giving up after 2 attempts"), line
    assert "last error " in line and "store.attempts (2) and store.budget_s (60)" in line, line


@pytest.mark.timeout(60)
def test_a_sharded_checkpoints_objects_through_a_fault_schedule_are_put_and_read_back_whole(
        faults, s3_env, tmp_path):  # noqa: F811
    """DCP's fsspec writer and reader on train.checkpoint_uri (what every rank of a sharded save
    does), through the schedule, with a read of the rank's shard file cut once on the way: the
    objects hold the bytes the rank hashed, and the tensors read back are the ones saved. A 500 or
    503 on a PUT stopped the save ('...: OSError: [Errno 16] Service Unavailable; check that the
    bucket exists ...'), and the cut read was botocore's FlexibleChecksumError."""
    import torch

    from shardline.core import retry
    from shardline.training import bucketio, sharded

    prefix = f"faults/{tmp_path.name}/ckpt/step-000000004"
    url = bucketio.URL(f"s3://{BUCKET}/{prefix}", retry.Policy(**FAST, section="store"))
    state = {"model": {"w": torch.arange(50_000, dtype=torch.float32), "b": torch.ones(7)}}
    files = sharded.write(url, state, rank=0, group=None)
    s3 = client(s3_env)
    assert {n: hashlib.sha256(s3.get_object(Bucket=BUCKET, Key=f"{prefix}/{n}")["Body"].read()).hexdigest()
            for n in files} == {n: m["sha256"] for n, m in files.items()}, faulted(faults)
    faults.persist("cut", f"GET /{BUCKET}/{prefix}/dcp/__0_0.distcp", times=1, at=0.5)
    got = sharded.full_state(url)
    assert faults.injected()["cut"] >= 1, faulted(faults)
    assert set(got) == {"w", "b"} and all(torch.equal(got[k], state["model"][k]) for k in got), faulted(faults)


# ---- `shardline eval` and training on loader.shards_uri


def published(s3_env: dict, root: Path, prefix: str) -> str:  # noqa: F811
    """data/shards put in the store past the proxy (no faults), as push-shards lays them out."""
    from tests.integration.test_store_faults import put_all

    shards = root / "data/shards"
    put_all(s3_env, {f"{prefix}/{p.relative_to(shards).as_posix()}": p.read_bytes()
                     for p in sorted(shards.rglob("*")) if p.is_file()})
    return f"s3://{BUCKET}/{prefix}"


@pytest.mark.timeout(60)
def test_eval_on_streamed_held_out_shards_through_a_fault_schedule_gives_the_local_losses(
        built, reference, faults, s3_env, tmp_path):  # noqa: F811
    """`shardline eval`'s held-out shards from loader.shards_uri: a val shard cut once on the way was
    'ShardCorrupt: ...: 20865 bytes, ...; val/index.json says 41730 bytes ...; re-publish it'; a
    store that keeps failing is one line under the store section's budget (judge's Remote took
    the section's defaults, not params.yaml's)."""
    from shardline.results import judge

    uri = published(s3_env, reference["root"], f"faults/{tmp_path.name}/shards")
    local = paramsfile.load(reference["root"] / "params.yaml")
    streams = project(reference["root"], tmp_path / "p", loader={"shards_uri": uri, "cache_mb": 0.1})
    ckpt = reference["root"] / "data/checkpoints/step-000000008"
    want = judge.judge(ckpt, local, Layout.at(reference["root"]))
    faults.persist("cut", f"GET /{BUCKET}/faults/{tmp_path.name}/shards/code/val/shard-", times=1, at=0.5)
    got = judge.judge(ckpt, paramsfile.load(streams / "params.yaml"), Layout.at(streams))
    assert faults.injected()["cut"] >= 1, faulted(faults)
    assert (got["total"], got["sources"]) == (want["total"], want["sources"]), faulted(faults)

    from shardline.stream.remote import FetchError

    faults.rate = 0
    project_store(streams, {**FAST, "attempts": 3})
    faults.persist("reset", f"GET /{BUCKET}/faults/{tmp_path.name}/shards/code/val/shard-", at=0.0)
    with pytest.raises(FetchError) as e:
        judge.judge(ckpt, paramsfile.load(streams / "params.yaml"), Layout.at(streams))
    msg = str(e.value)
    assert msg.startswith(f"{uri}/code/val/shard-00000.bin: giving up after 3 attempts") and "\n" not in msg, msg
    assert "store.attempts (3)" in msg and e.value.transient, msg


@pytest.mark.timeout(90)
def test_training_on_streamed_shards_killed_in_a_fault_storm_resumes_to_a_fault_free_runs_weights(
        built, reference, faults, s3_env, tmp_path):  # noqa: F811
    """Shards from loader.shards_uri and checkpoints to train.checkpoint_uri, both through the
    schedule: SIGKILLed inside step 8's save (its objects put, its manifest not), started again
    under the same storm, it resumes from step 4 to the losses and bytes of a run never killed."""
    shards = published(s3_env, built, f"faults/{tmp_path.name}/shards")
    prefix = f"faults/{tmp_path.name}/ckpt"
    root = project(built, tmp_path / "p", loader={"shards_uri": shards, "cache_mb": 1},
                   train={"checkpoint_uri": f"s3://{BUCKET}/{prefix}"})
    shutil.rmtree(root / "data/shards")  # streamed: nothing read from here
    faults.rate = 0.15  # the two runs make some 200 requests: a fault on every seventh, not every third
    # a held-out shard read cut once on the way: it stopped the run at its start, 'ShardCorrupt ...'
    faults.persist("cut", f"GET /{BUCKET}/faults/{tmp_path.name}/shards/code/val/shard-", times=1, at=0.5)
    r = run([str(BIN / "shardline"), "--root", str(root), "stage", "train"], root, check=False,
            env=env_for(SHARDLINE_CHAOS="checkpoint.files@8"))
    assert r.returncode == -signal.SIGKILL, (r.stderr[-3000:], faulted(faults))
    assert faults.injected()["cut"] >= 1, faulted(faults)
    assert "step-000000008/model.pt" in objects(s3_env, prefix)
    assert "step-000000008/manifest.json" not in objects(s3_env, prefix)
    train(root)  # the storm goes on
    assert losses(root) == reference["losses"], faulted(faults)
    assert stored(s3_env, prefix) == reference["bytes"], faulted(faults)
