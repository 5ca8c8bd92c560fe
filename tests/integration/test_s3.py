"""Object storage, for real: a moto S3 server on 127.0.0.1 as DVC remote and as the loader's shard
store. Streamed batches must equal local ones (also when the cache is too small to hold the data),
a corrupted object must be refused by hash, and no client may probe the EC2 metadata endpoint."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import shutil
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import yaml

from shardline.core import fsio
from shardline import paramsfile
from shardline.core.errors import ShardCorrupt
from shardline.core.layout import Layout
from shardline.stream.loader import Loader
from shardline.core.stores import aws_env
from shardline.stream.remote import FetchError, Remote, read_indexes
from tests.conftest import BIN, env_for, init_repo, run, small_params, stdlib_files, write_params
from harness.projects import lineage_of
from harness.s3 import BUCKET, CountingServer, aws, client, s3_env, upload_dir  # noqa: F401 (fixtures)
from tests.unit.test_loader import ids, make_shards

DVC = str(BIN / "dvc")
STEPS = 40  # loader steps of 4 blocks: several epochs of the tiny project's shards


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A tiny real project built by `dvc repro train` (two sources, several shards each, checkpoints)."""
    root = tmp_path_factory.mktemp("proj") / "p"
    inputs = root.parent / "inputs"
    for name, skip, n in (("code", 0, 20), ("more", 20, 12)):
        (inputs / name).mkdir(parents=True)
        for f in stdlib_files(n, skip=skip):
            shutil.copy(f, inputs / name / f"{f.parent.name}_{f.name}")
    init_repo(root)
    write_params(root, small_params([{"name": n, "uri": str(inputs / n), "format": "txt"} for n in ("code", "more")],
                                    mix={"code": 0.75, "more": 0.25}))
    run([DVC, "repro", "train"], root)
    return root


def tree(root: Path, dirs=("data/shards", "data/checkpoints", "data/tokenizer")) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in dirs for p in sorted((root / d).rglob("*")) if p.is_file()}


def weights(root: Path) -> dict:
    step = sorted((root / "data/checkpoints").glob("step-*"))[-1]
    files = fsio.read_json(step / "manifest.json")["files"]
    return {step.name: {k: files[k]["sha256"] for k in ("model.pt", "optimizer.pt")}}


def stream(ld: Loader, steps: int = STEPS, each=None) -> list[tuple[str, bytes]]:
    """(batch hash, tokens) of `steps` steps; `each(loader)` after every step."""
    out = []
    for x, y in itertools.islice(ld, steps):
        out.append((ld.last_batch, x.numpy().tobytes() + y[:, -1:].numpy().tobytes()))
        if each:
            each(ld)
    return out


def loader_for(root: Path, **loader_keys) -> Loader:
    """Loader.from_params as train.py calls it, with `loader_keys` set in params.loader."""
    raw = yaml.safe_load((root / "params.yaml").read_text())
    raw["loader"] = {**raw["loader"], **loader_keys}
    return Loader.from_params(paramsfile.parse(raw), Layout.at(root))


@pytest.fixture(scope="module")
def shards_uri(project, s3_env) -> str:
    """Published the way a user does it: `shardline push-shards URI` (shards first, index last)."""
    uri = f"s3://{BUCKET}/proj/data/shards"
    r = run([str(BIN / "shardline"), "push-shards", uri], project, env={**env_for(), **s3_env})
    assert "set loader.shards_uri" in r.stderr, r.stderr
    keys = [o["Key"] for o in client(s3_env).list_objects_v2(Bucket=BUCKET, Prefix="proj/data/shards/")["Contents"]]
    assert sorted(k.split("proj/data/shards/")[1] for k in keys) == sorted(
        str(p.relative_to(project / "data/shards")) for p in (project / "data/shards").rglob("*") if p.is_file())
    return uri


def raised_steps(root: Path, steps: int) -> Path:
    raw = yaml.safe_load((root / "params.yaml").read_text())
    raw["train"] = {**raw["train"], "steps": steps}
    write_params(root, raw)
    return root


def judged(root: Path) -> dict:
    """`shardline eval latest` as a user reads it: the checkpoint, data version and held-out losses."""
    r = json.loads(run([str(BIN / "shardline"), "eval", "latest", "--json"], root).stdout)
    return {k: r[k] for k in ("checkpoint", "step", "trained_on", "judged_on", "same_data", "total", "sources")}


@pytest.mark.slow  # builds the tiny project with dvc repro (once per module)
@pytest.mark.timeout(240)
def test_a_run_moves_to_another_machine_through_a_dvc_remote_on_s3(project, s3_env, tmp_path, monkeypatch):
    """docs/scaling.md's commands: `dvc push` here; `git clone` and `dvc pull` in another directory
    give identical files, on which `shardline lineage latest` and `eval latest` say what they say
    here, and training continues there to the weights it continues to here, bit for bit."""
    from shardline.orchestration.flows.pipeline import dvc_push

    for k, v in s3_env.items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    monkeypatch.setenv("PATH", f"{BIN}:{s3_env['PATH']}")
    run([DVC, "remote", "add", "-d", "storage", f"s3://{BUCKET}/dvcstore"], project)
    run([DVC, "remote", "modify", "storage", "endpointurl", s3_env["AWS_ENDPOINT_URL"]], project)
    run(["git", "add", "-A"], project)
    run(["git", "commit", "-qm", "tiny project with an S3 remote"], project)
    dvc_push(str(project))  # the retrain flow's push: `dvc push`, env through aws_env
    stored = client(s3_env).list_objects_v2(Bucket=BUCKET, Prefix="dvcstore/")
    assert stored["KeyCount"] > 10
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(project), str(clone)], tmp_path)
    assert not (clone / "data/shards").exists()
    run([DVC, "pull", "--with-deps", "train"], clone)
    got, want = tree(clone), tree(project)
    assert got == want and any(k.startswith("data/checkpoints/step-") for k in got) and any(".bin" in k for k in got)

    # the user's question there: what is this model, what was it trained on, how good is it?
    first = tmp_path / "first"  # the first machine, continuing: a copy (other tests read `project` as it is)
    shutil.copytree(project, first, symlinks=True)

    def ask(root: Path) -> tuple:
        lineage = json.loads(run([str(BIN / "shardline"), "lineage", "latest", "--json"], root).stdout)
        return lineage, run([str(BIN / "shardline"), "lineage", "latest"], root).stdout, judged(root)

    def go_on(root: Path) -> str:  # two more steps, from step 4
        r = run([DVC, "repro", "train"], raised_steps(root, 6))
        return r.stdout + r.stderr

    with ThreadPoolExecutor(2) as machines:  # the two machines at once: each is one process at a time
        here, there = machines.map(ask, (first, clone))
        assert there == here
        lineage, shown, ev = there
        md5 = yaml.safe_load((clone / "dvc.lock").read_text())["stages"]["shard"]["outs"][0]["md5"]
        assert lineage["data_version"]["dvc_md5"] == md5 and f"dvc md5 {md5}" in shown and "step 4" in shown
        assert ev["step"] == 4 and ev["same_data"] and ev["trained_on"]["data_version"] == lineage["data_version"][
            "shards_sha256"] and math.isfinite(ev["total"]["loss"])

        # and training goes on there as it would have here
        assert all("resuming from step-000000004" in out for out in machines.map(go_on, (first, clone)))
    assert weights(clone) == weights(first) and "step-000000006" in weights(clone)
    assert [json.loads(x)["loss"] for x in (clone / "data/metrics/train.jsonl").read_text().splitlines()] == \
        [json.loads(x)["loss"] for x in (first / "data/metrics/train.jsonl").read_text().splitlines()]


@pytest.mark.slow  # builds the tiny project with dvc repro (once per module)
@pytest.mark.timeout(60)
def test_loader_streaming_from_s3_gives_the_local_batches_cold_and_warm(project, shards_uri, aws):
    local = stream(loader_for(project))
    cold = loader_for(project, shards_uri=shards_uri, prefetch=3)
    assert cold.reader.fetcher is None and cold.version == loader_for(project).version
    assert stream(cold) == local
    n_shards = sum(1 for _ in (project / "data/shards").glob("*/shard-*.bin"))  # training shards (not val/)
    st = cold.reader.fetcher.stats
    assert st.fetched == n_shards and st.evicted == 0 and st.hits == 0
    cache = project / ".shardline/cache"  # cache_dir is relative to the project root
    assert len(list(cache.glob("*.bin"))) == n_shards and not list(cache.glob(".*"))
    warm = loader_for(project, shards_uri=shards_uri)
    assert stream(warm) == local
    assert warm.reader.fetcher.stats.fetched == 0 and warm.reader.fetcher.stats.hits == n_shards


@pytest.mark.slow  # builds the tiny project with dvc repro (once per module)
@pytest.mark.timeout(90)
def test_training_on_streamed_shards_gives_the_weights_of_local_training(project, shards_uri, aws, tmp_path):
    """train.py's Loader.from_params call picks loader.shards_uri up; data/shards is not read."""
    root = tmp_path / "p"
    shutil.copytree(project, root, ignore=shutil.ignore_patterns("checkpoints", "metrics", ".shardline", ".git"))
    shutil.rmtree(root / "data/shards")
    raw = yaml.safe_load((root / "params.yaml").read_text())
    raw["loader"] = {**raw["loader"], "shards_uri": shards_uri, "cache_mb": 0.1, "debug_batch_hashes": True}
    write_params(root, raw)
    r = run([str(BIN / "shardline"), "--root", str(root), "stage", "train"], root)
    assert "batch" in r.stdout + r.stderr and list((root / ".shardline/cache").glob("*.bin"))
    assert weights(root) == weights(project)


@pytest.mark.slow  # builds the tiny project with dvc repro (once per module)
@pytest.mark.timeout(60)
def test_a_cache_smaller_than_the_data_evicts_refetches_and_gives_the_same_batches(project, shards_uri, aws, tmp_path):
    sizes = [p.stat().st_size for p in (project / "data/shards").glob("*/shard-*.bin")]  # training shards
    budget_mb = 1.5 * max(sizes) / 2**20  # room for one and a half shards; a step needs several
    cache = tmp_path / "cache"
    peak: list[int] = []

    def watch(ld: Loader) -> None:  # what the cache holds beyond its bound is only what a step pins
        f = ld.reader.fetcher
        held = sum(p.stat().st_size for p in cache.glob("*.bin"))
        assert held <= budget_mb * 2**20 + len(f.pinned) * max(sizes), (held, f.pinned)
        assert all(f._path(sha).exists() for sha in f.pinned & f.ready)  # never evicts what a step pins
        peak.append(held)

    ld = loader_for(project, shards_uri=shards_uri, cache_dir=str(cache), cache_mb=budget_mb, prefetch=1)
    assert stream(ld, each=watch) == stream(loader_for(project))
    st = ld.reader.fetcher.stats
    assert st.evicted > 0 and st.refetched > 0 and st.fetched > len(sizes), st


@pytest.mark.slow  # builds the tiny project with dvc repro (once per module)
@pytest.mark.timeout(60)
@pytest.mark.parametrize("cache_mb", [4096, 0.05])  # 0.05: workers evict files the other one maps or fetches
def test_dataloader_workers_stream_the_local_sequence(project, shards_uri, aws, tmp_path, cache_mb):
    ld = loader_for(project, shards_uri=shards_uri, cache_dir=str(tmp_path / "c"), num_workers=2, cache_mb=cache_mb)
    assert stream(ld, 12) == stream(loader_for(project), 12)
    assert ld.reader.fetcher is None  # the workers fetched; the main process only computed the order
    assert list((tmp_path / "c").glob("*.bin"))
    # a worker shut down mid-prefetch may leave a temp file; the next fetcher on the cache sweeps it
    next(iter(loader_for(project, shards_uri=shards_uri, cache_dir=str(tmp_path / "c"), prefetch=0)))
    assert not list((tmp_path / "c").glob(".*"))


@pytest.mark.timeout(60)
def test_a_corrupted_object_is_refused_by_hash_and_nothing_from_it_is_read(s3_env, aws, tmp_path):
    sizes = {"a": [6, 6, 6]}
    local = make_shards(tmp_path / "shards", sizes)
    upload_dir(s3_env, local, BUCKET, "bad/shards")
    body = bytearray((local / "a/shard-00001.bin").read_bytes())
    body[5] ^= 1  # same size, other bytes: only the hash can tell
    client(s3_env).put_object(Bucket=BUCKET, Key="bad/shards/a/shard-00001.bin", Body=bytes(body))
    uri, cache = f"s3://{BUCKET}/bad/shards", tmp_path / "cache"
    seen: list[int] = []
    ld = Loader(local, sources=["a"], mix={"a": 1}, seed=0, global_batch=2, shards_uri=uri, cache_dir=cache)
    with pytest.raises(ShardCorrupt) as e:
        for x, _ in itertools.islice(ld, 50):  # bounded: a loader that misses the damage must fail, not hang
            seen += ids(x)[:, 1].tolist()
    msg = str(e.value)
    assert f"{uri}/a/shard-00001.bin" in msg and "sha256 mismatch" in msg and "shards_uri" in msg
    assert not any(6 <= b < 12 for b in seen)
    bad_sha = fsio.read_json(local / "a/index.json")["shards"][1]["sha256"]
    ld.reader.fetcher.close()  # a prefetch of the next shard may be mid-write until then
    assert not (cache / f"{bad_sha}.bin").exists() and not list(cache.glob(".*"))


def test_file_uris_stream_too(tmp_path):
    sizes = {"a": [5, 7, 3, 4], "b": [4, 2]}
    local = make_shards(tmp_path / "shards", sizes)
    kw = {"sources": list(sizes), "mix": {"a": 2, "b": 1}, "seed": 5, "global_batch": 2}
    ld = Loader(tmp_path / "unused", **kw, shards_uri=f"file://{local}", cache_dir=tmp_path / "cache", cache_mb=1e-4,
                prefetch=0)  # a step reads at most 2 of the 6 shards: the others get evicted
    assert stream(ld, 30) == stream(Loader(local, **kw), 30)
    assert ld.reader.fetcher.stats.evicted > 0 and ld.reader.fetcher.stats.refetched > 0


def test_prefetch_is_exact_current_step_first_then_the_next_shards_in_first_need_order(tmp_path):
    from shardline.stream.shardcache import Fetcher

    ix = {"shards": [{"file": f"s{i}", "blocks": 1, "bytes": 1, "sha256": f"{i}" * 64} for i in range(6)]}
    plan = {0: [3, 1], 1: [1, 4], 2: [0, 4], 3: [5, 2]}  # step -> shard keys read there, in read order
    f = Fetcher(Remote("file:///nowhere", str(tmp_path), prefetch=2), [("a", ix)], dtype=np.dtype("<u2"), width=1)
    f.close()  # an inert fetcher: the plan stays in its queue for us to see
    f.advance(0, plan.__getitem__, 1)
    assert f.queue == [f"{i}" * 64 for i in (3, 1, 4, 0)] and f.pinned == set(f.queue)
    f.ready.add("4" * 64)  # a shard already here is pinned but not fetched again
    f.advance(1, plan.__getitem__, 1)
    assert f.queue == [f"{i}" * 64 for i in (1, 0, 5)] and "4" * 64 in f.pinned


def test_aws_env_turns_off_the_metadata_probe_only_without_credentials(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    assert aws_env({"HOME": str(home)})["AWS_EC2_METADATA_DISABLED"] == "true"
    assert "AWS_EC2_METADATA_DISABLED" not in aws_env({"HOME": str(home), "AWS_ACCESS_KEY_ID": "k"})
    assert "AWS_EC2_METADATA_DISABLED" not in aws_env({"HOME": str(home), "AWS_PROFILE": "p"})
    assert aws_env({"HOME": str(home), "AWS_EC2_METADATA_DISABLED": "false"})["AWS_EC2_METADATA_DISABLED"] == "false"
    (home / ".aws").mkdir()
    (home / ".aws/credentials").write_text("[default]\n")
    assert "AWS_EC2_METADATA_DISABLED" not in aws_env({"HOME": str(home)})


@pytest.mark.timeout(60)
def test_without_credentials_the_metadata_endpoint_is_never_probed(s3_env, monkeypatch, tmp_path):
    import s3fs

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN",
              "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_EC2_METADATA_DISABLED"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env["AWS_ENDPOINT_URL"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    remote = Remote(f"s3://{BUCKET}/nowhere", str(tmp_path / "cache"))
    with CountingServer() as imds:
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)
        s3fs.S3FileSystem.clear_instance_cache()  # a cached client would not look for credentials again
        with pytest.raises(FetchError, match="credentials"):
            read_indexes(tmp_path, ["a"], remote)
        assert imds.requests == []
        import os

        assert os.environ["AWS_EC2_METADATA_DISABLED"] == "true"  # set by aws_env, for this process and children
        # the control: with the probe allowed, the same call does reach the stand-in endpoint
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "false")
        s3fs.S3FileSystem.clear_instance_cache()
        with pytest.raises(FetchError):
            read_indexes(tmp_path, ["a"], remote)
        assert imds.requests
    s3fs.S3FileSystem.clear_instance_cache()


SAVE_8 = """
import json, torch
from shardline.training import bucket
from shardline.training.records import Lineage
lin = Lineage.from_json(json.loads({lin!r}), "the test's lineage")
bucket.save({root!r}, 8, {{"model.pt": {{"w": torch.full((3,), 8.0)}}}}, {{"step": 8}}, lin)
"""


@pytest.mark.timeout(60)
def test_a_checkpoint_in_a_bucket_is_valid_iff_its_manifest_verifies(s3_env, aws, tmp_path):
    """train.checkpoint_uri's store: the manifest is put last (a save SIGKILLed before it leaves a prefix
    that is no checkpoint, and the next start sweeps it), verification reads what is stored, retention
    and a corrupt object behave as in data/checkpoints, and a checkpoint comes back whole to a folder."""
    import torch

    from shardline.training import bucket, checkpoint, storage

    root, prefix, lin = f"s3://{BUCKET}/unit/checkpoints", "unit/checkpoints", lineage_of(tmp_path)
    for step in (2, 4, 6):
        bucket.save(root, step, {"model.pt": {"w": torch.full((3,), float(step))}}, {"step": step}, lin)

    def objects(step: int) -> list[str]:
        listed = client(s3_env).list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/step-{step:09d}/")
        return sorted(o["Key"].rsplit("/", 1)[1] for o in listed.get("Contents", []))

    assert objects(6) == ["manifest.json", "model.pt", "train_state.json"]
    r = run([sys.executable, "-c", SAVE_8.format(root=root, lin=json.dumps(lin.to_json()))], tmp_path, check=False,
            env=env_for(SHARDLINE_CHAOS="checkpoint.files@8", **{k: v for k, v in s3_env.items() if "AWS" in k}))
    assert r.returncode == -signal.SIGKILL and objects(8) == ["model.pt", "train_state.json"]  # no manifest yet
    said: list[str] = []
    assert bucket.latest_valid(root, said.append) == f"{root}/step-000000006"
    assert said == ["checkpoint: skipping step-000000008: no manifest.json (torn or interrupted write)"]
    assert bucket.sweep(root, said.append) == ["step-000000008"] and objects(8) == []

    assert bucket.retain(root, keep_last=2, keep_every=0, log=said.append) == [2] and objects(2) == []

    key = f"{prefix}/step-000000006/model.pt"
    body = client(s3_env).get_object(Bucket=BUCKET, Key=key)["Body"].read()
    client(s3_env).put_object(Bucket=BUCKET, Key=key, Body=body[:9] + bytes([body[9] ^ 1]) + body[10:])  # same size
    assert [(e.step, e.valid, e.why) for e in bucket.entries(root)] == [
        (4, True, "ok"), (6, False, "model.pt sha256 differs from the manifest (corrupt)")]
    assert bucket.latest_valid(root, said.append) == f"{root}/step-000000004"

    got = storage.fetch(bucket.step_url(root, 4), tmp_path / "here")
    assert got == tmp_path / "here/step-000000004" and checkpoint.verify(got) == (True, "ok")
    tensors, state, manifest = checkpoint.load(got)
    assert torch.equal(tensors["model.pt"]["w"], torch.full((3,), 4.0)) and state == {"step": 4}
    assert manifest.lineage == lin and manifest.format == "full"


MISSING = "s3://no-such-bucket/run"
# every place a store is named: (what names it, the params it sets, the command that meets it first)
STORES = [("push-shards", {}, ["push-shards", f"{MISSING}/shards"]),
          ("loader.shards_uri", {"loader": {"shards_uri": f"{MISSING}/shards"}}, ["eval", "latest"]),
          ("train.checkpoint_uri", {"train": {"checkpoint_uri": f"{MISSING}/ck", "steps": 6}}, ["stage", "train"]),
          ("train.checkpoint_uri", {"train": {"checkpoint_uri": f"{MISSING}/ck"}}, ["checkpoints"]),
          ("sources[code].uri", {"sources": [{"name": "code", "uri": f"{MISSING}/code/", "format": "txt"}],
                                 "mix": {"code": 1.0}}, ["stage", "download"]),
          ("parts.store", {"parts": {"store": f"{MISSING}/data"}, "clean": {"min_chars": 17}}, ["stage", "clean"])]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("what, sections, cmd", STORES, ids=[f"{w}-{c[0]}" for w, _, c in STORES])
def test_a_missing_bucket_is_one_line_naming_the_field_wherever_a_store_is_named_and_none_is_made(
        project, s3_env, tmp_path, what, sections, cmd):
    root = tmp_path / "p"
    shutil.copytree(project, root, ignore=shutil.ignore_patterns(".dvc", ".git"))
    raw = yaml.safe_load((root / "params.yaml").read_text())
    for k, v in sections.items():
        raw[k] = {**raw[k], **v} if isinstance(v, dict) and k != "mix" else v
    write_params(root, raw)
    before = tree(root, ("data",))
    r = run([str(BIN / "shardline"), *cmd], root, check=False, env={**env_for(), **s3_env})
    uri = next(c for c in cmd if c.startswith("s3://")) if cmd[0] == "push-shards" else \
        next(u for u in (f"{MISSING}/shards", f"{MISSING}/ck", f"{MISSING}/code/", f"{MISSING}/data")
             if u in json.dumps(sections))
    assert r.returncode == 2 and r.stderr.splitlines()[-1] == (
        f"error: {what} {uri}: the bucket 'no-such-bucket' does not exist (the line makes no bucket); create it "
        "(aws s3 mb s3://no-such-bucket), or name a bucket that exists"), r.stderr
    assert "Traceback" not in r.stderr
    assert [b["Name"] for b in client(s3_env).list_buckets()["Buckets"]] == [BUCKET]  # none made
    assert tree(root, ("data",)) == before  # nothing written lost
