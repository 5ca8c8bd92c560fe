"""The data stages on a cluster: a real Dask scheduler and workers on 127.0.0.1, started here.

clean + tokenize + shard through the Dask runner (and the process pool) write the same bytes as
the engine's threads; a worker that cannot import the project fails the stage with a message
naming it, within parts.connect_timeout_s, instead of hanging.
"""

from __future__ import annotations

import hashlib
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from tests.conftest import BIN, env_for, run, small_params, stdlib_files, write_params
from harness.dask_cluster import DaskCluster

SL = str(BIN / "shardline")
PARTED = ("clean", "tokenize", "shard")


def _project(root: Path, **parts) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    src = root / "input"
    src.mkdir()
    for f in stdlib_files(24):
        (src / f"{f.parent.name}_{f.name}").write_bytes(f.read_bytes())
    # ~8 parts: enough that both workers get several
    params = small_params([{"name": "code", "uri": str(src), "format": "txt"}], clean={"part_mb": 0.04})
    params["parts"] = {**params["parts"], **parts}
    write_params(root, params)
    return root


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in ("data/clean", "data/tokenizer", "data/tokens", "data/shards")
            for p in sorted((root / d).rglob("*")) if p.is_file()}


def _line(root: Path, env: dict, stages=("download", *PARTED)) -> str:
    return "".join(run([SL, "stage", s], root, env=env, timeout=600).stderr for s in stages)


@pytest.fixture
def cluster(tmp_path):
    c = DaskCluster(tmp_path, env=env_for())
    yield c
    c.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dask_and_process_runners_write_the_same_bytes_as_threads(tmp_path, cluster, prefect_server):
    ref = _project(tmp_path / "threads")
    _line(ref, env_for())
    expected = _tree(ref)
    assert len([k for k in expected if k.startswith("data/clean/code/part-")]) >= 6

    dask = _project(tmp_path / "dask", runner="dask", address=cluster.address)
    _line(dask, {**prefect_server, "PREFECT_LOGGING_LEVEL": "INFO"})
    assert _tree(dask) == expected
    from distributed import Client

    with Client(cluster.address, timeout=30) as c:  # the parts really ran on both workers
        done = c.run(lambda dask_worker: dask_worker.state.transition_counter)
    assert len(done) == 2 and all(n > 0 for n in done.values()), done

    procs = _project(tmp_path / "procs", runner="processes", workers=2)
    _line(procs, prefect_server)
    assert _tree(procs) == expected


@pytest.mark.timeout(300)
def test_dask_parts_come_back_in_order_a_failure_waits_for_the_others_and_a_hung_part_times_out(tmp_path, cluster):
    from shardline import paramsfile
    from shardline.core.errors import ShardlineError
    from shardline.orchestration.tasks.runners import dask_map

    raw = small_params([{"name": "code", "uri": "input", "format": "txt"}])
    params = paramsfile.parse({**raw, "parts": {"runner": "dask", "address": cluster.address},
                           "pipeline": {"retries": 0, "stage_timeout_s": 3}})
    done: dict[int, int] = {}
    assert dask_map(int, ["3", "1", "2"], lambda i, r: done.update({i: r}), params=params) == [3, 1, 2]
    assert done == {0: 3, 1: 1, 2: 2}

    done.clear()
    with pytest.raises(ValueError, match="'x'"):  # not transient: no retry, raised as the worker raised it
        dask_map(int, ["5", "x", "6", "7"], lambda i, r: done.update({i: r}), params=params)
    assert done == {0: 5, 2: 6, 3: 7}  # every other part finished (and was reported) first

    t0 = time.monotonic()
    with pytest.raises(ShardlineError, match=r"1 part\(s\) still running after pipeline.stage_timeout_s=3s.*: 60;"):
        dask_map(time.sleep, [0, 60], params=params)
    assert time.monotonic() - t0 < 30


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_worker_without_the_project_fails_the_stage_clearly(tmp_path, prefect_server):
    # The worker has every library but not this project: site-packages on PYTHONPATH with
    # site disabled, so the editable install's .pth file is never read, and cwd outside the repo.
    site = sysconfig.get_paths()["purelib"]
    env = {k: v for k, v in env_for().items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = site
    cmd = [sys.executable, "-S", "-m", "distributed.cli.dask_worker"]
    cluster = DaskCluster(tmp_path, workers=1, env=env_for(), worker_env=env, worker_cmd=cmd)
    try:
        root = _project(tmp_path / "p", runner="dask", address=cluster.address, connect_timeout_s=30)
        run([SL, "stage", "download"], root)
        t0 = time.monotonic()
        r = run([SL, "stage", "clean"], root, env=prefect_server, check=False, timeout=240)
        took = time.monotonic() - t0
    finally:
        cluster.close()
    assert r.returncode == 2, r.stdout + r.stderr
    assert "1 of 1 Dask worker(s) cannot run this project's tasks" in r.stderr, r.stderr
    assert "No module named" in r.stderr and "pip install -e ." in r.stderr, r.stderr
    assert took < 120, took
    assert not list((root / "data").glob("clean/*/part-*.parquet"))  # nothing half-written


_AWS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_EC2_METADATA_DISABLED")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_workers_sharing_only_a_bucket_write_the_local_bytes_and_a_killed_worker_s_part_is_redone(tmp_path,
                                                                                                 prefect_server):
    """parts.store: two Dask workers, each in its own working directory, the driver's project
    hidden from them (an empty tmpfs over it, in a mount namespace of their own), share only an
    S3 bucket (moto_server) with the driver. The first dies mid-part (SIGKILL inside its second
    clean part's parquet write, no nanny to restart it): the part is redone by the other, and every
    file of the data half (clean parts, tokenizer, tokens, shards) is the local run's, byte for byte."""
    from harness.s3 import BUCKET, client, moto_s3

    ref = _project(tmp_path / "local")
    _line(ref, env_for())
    expected = _tree(ref)
    root = tmp_path / "bucket"
    root.mkdir()  # what the workers' tmpfs covers
    hide = DaskCluster.can_hide()
    with moto_s3() as s3:
        aws = {k: s3[k] for k in _AWS}
        fired = tmp_path / "chaos.log"
        cluster = DaskCluster(tmp_path, env=env_for(**aws), own_dirs=True, hide=(root,) if hide else (),
                              per_worker=[({"SHARDLINE_CHAOS": "clean.write#2", "SHARDLINE_CHAOS_LOG": str(fired)},
                                           ["--no-nanny"])])
        try:
            _project(root, runner="dask", address=cluster.address, store=f"s3://{BUCKET}/line")
            _line(root, {**prefect_server, **aws})
        finally:
            cluster.close()
        keys = {o["Key"] for page in client(s3).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="line/")
                for o in page.get("Contents", [])}
    assert _tree(root) == expected
    assert "clean.write" in fired.read_text()  # the first worker died mid-part
    shards = {k for k in expected if k.startswith("data/shards/")}
    assert shards and {f"line/{k}" for k in shards} <= keys  # the workers wrote them there
    assert not list(tmp_path.glob("dask-worker-1/.shardline-parts/*"))  # the survivor's scratch is cleaned up
    if not hide:
        pytest.skip("ran, but could not hide the project from the workers here (unshare needs root)")
