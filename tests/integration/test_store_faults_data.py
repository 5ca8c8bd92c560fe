"""Object-store faults survived (issue 44, point 2), the data side's remaining cells of
docs/testing.md's table: `shardline push-shards`, the staged data half (`parts.store`) and
`dvc push`/`pull`, each with one fault placed and killed in a fault storm; DVC against a fault
that persists. The proxy, the store fixture and the seeds are tests/integration/test_store_faults.py's
(each test prints its seed; SHARDLINE_FAULT_SEED replays a run).

Two hooks on the proxy's schedule: `place` gives the first request that matches each of a few
patterns its fault (the rest follow the seed's schedule), and `killed` (harness/faultproxy.py's)
SIGKILLs a command's process group when the proxy receives the request the test names (its 5th
PUT, the driver's first read of a finished part): exact on the store's side (that request never reaches the
store; the proxy answers it 500 to no one), and replayed by the seed like the rest of the schedule.
A publication is checked as it happened, from the proxy's log (`manifest_last`): an index.json (a
DVC .dir) never reached the store before every file it names had."""

from __future__ import annotations

import os
import random
import signal
import threading
from pathlib import Path

import pytest

from harness.faultproxy import FAULTS, FaultProxy, intercept, killed, nth
from harness.s3 import BUCKET, client, s3_env  # noqa: F401 (fixture)
from shardline.data import download
from tests.conftest import BIN, env_for, make_project, run, small_params, write_params
from tests.integration.test_store_faults import FAST, QUIET, faulted, store, texts  # noqa: F401 (fixtures)
from tests.unit.test_loader import make_shards

LANDS = ("500", "503")  # faults answered by the proxy itself: the request never reached the store


def place(proxy: FaultProxy, faults: dict[str, str]):
    """The first request whose "METHOD path" holds each key of `faults` gets its fault (bodies cut halfway)."""
    left, lock = dict(faults), threading.Lock()

    def decide(method, path, _):
        with lock:
            for match, fault in list(left.items()):
                if match in f"{method} {path}":
                    del left[match]
                    return fault
        return None

    return intercept(proxy, decide)


def landed(proxy: FaultProxy, since: int = 0, until: int | None = None) -> list[str]:
    """The paths of the PUTs that reached the store, in order (of proxy.log[since:until])."""
    return [p for m, p, _, f in proxy.log[since:until] if m == "PUT" and f not in LANDS]


def manifest_last(proxy: FaultProxy, manifests: dict[str, list[str]]) -> None:
    """Each manifest (a store path: the paths it names) reached the store only after every path it names."""
    put = landed(proxy)
    for manifest, names in manifests.items():
        if manifest in put:
            before = set(put[:put.index(manifest)])
            assert not set(names) - before, (manifest, sorted(set(names) - before), faulted(proxy))


def stored(s3_env: dict, prefix: str) -> dict[str, bytes]:  # noqa: F811
    """Every object under `prefix` (read without faults), by its key below it."""
    s3, out = client(s3_env), {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix) + 1:]] = s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
    return out


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ---- shardline push-shards


SIZES = {"a": [6, 7, 5], "b": [4, 6]}


def shards_project(root: Path) -> Path:
    """A project whose data/shards holds sources a and b, each with its val/ shards; its params'
    store section FAST."""
    write_params(root, {**small_params([{"name": n, "uri": "unused", "format": "txt"} for n in SIZES]), "store": FAST})
    make_shards(root / "data/shards", SIZES)
    for name in SIZES:
        make_shards(root / "data/shards" / name, {"val": [2]})
    return root / "data/shards"


def index_manifests(local: Path, at: str) -> dict[str, list[str]]:
    """Each index.json under `local` as the proxy sees it at path `at`: the shard paths it names."""
    import json

    return {f"{at}/{i.relative_to(local).as_posix()}": [f"{at}/{i.parent.relative_to(local).as_posix()}/{s['file']}"
                                                         for s in json.loads(i.read_text())["shards"]]
            for i in local.rglob("index.json")}


@pytest.mark.timeout(60)
def test_push_shards_retries_a_lost_answer_a_stalled_check_and_a_refused_index(tmp_path, store, s3_env,  # noqa: F811
                                                                              capsys):
    """One of each, placed, nothing else: a shard's PUT lands and its answer is reset (sent again),
    the existence check of another stalls past the read timeout, and the first index.json PUT is
    refused 503. The store ends with the bytes of a fault-free push: data/shards, byte for byte."""
    from shardline.cli.main import main

    store.rate = 0
    local = shards_project(tmp_path)
    prefix = f"faults/push-placed/{tmp_path.name}"
    at = f"/{BUCKET}/{prefix}"
    with place(store, {f"PUT {at}/a/shard-00001.bin": "reset", f"HEAD {at}/b/shard-00000.bin": "stall",
                       f"PUT {at}/a/index.json": "503"}):
        assert main(["--root", str(tmp_path), "push-shards", f"s3://{BUCKET}/{prefix}"]) == 0, capsys.readouterr().err
    assert store.injected() == {"reset": 1, "stall": 1, "503": 1}, faulted(store)
    assert stored(s3_env, prefix) == files(local), faulted(store)
    manifest_last(store, index_manifests(local, at))
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        f"push-shards: 11 file(s) sent; set loader.shards_uri: s3://{BUCKET}/{prefix} to stream them"


@pytest.mark.timeout(90)
def test_push_shards_killed_in_a_fault_storm_ends_as_a_fault_free_push(tmp_path, store, s3_env):  # noqa: F811
    """`shardline push-shards` SIGKILLed while its 5th PUT is on the way, under the seed's schedule,
    then run again: the store holds data/shards byte for byte, no index.json ever reached it before
    its shards, and the shards that had landed are not sent again."""
    from shardline.cli.main import main

    local = shards_project(tmp_path)
    prefix = f"faults/push-killed/{tmp_path.name}"
    at, uri = f"/{BUCKET}/{prefix}", f"s3://{BUCKET}/{prefix}"
    store.persist("503", "PUT /", times=1)  # a fault before the kill, whatever the seed draws
    env = env_for(**{k: v for k, v in store.env(s3_env).items() if "AWS" in k})
    rc, mark, err = killed([str(BIN / "shardline"), "--root", str(tmp_path), "push-shards", uri], tmp_path, env,
                           store, nth(f"PUT {at}/", 5))
    assert rc == -signal.SIGKILL, (rc, err, faulted(store))
    # the PUTs answered whole before the kill: one that reached the store but whose answer was reset or
    # stalled is, to the client, not sent (seed 1308069452: a reset answer's shard was put again, rightly)
    before = {p for m, p, _, f in store.log[:mark] if m == "PUT" and f is None}
    assert main(["--root", str(tmp_path), "push-shards", uri]) == 0
    assert stored(s3_env, prefix) == files(local), faulted(store)
    manifest_last(store, index_manifests(local, at))
    again = {p for p in landed(store, mark) if not p.endswith("/index.json")} & before
    assert not again, (sorted(again), faulted(store))  # a landed shard is not sent twice
    assert store.injected()["503"] >= 1


# ---- the staged data half (parts.store): the clean stage, its parts on workers that share the bucket


def staged_project(root: Path, src: Path, uri: str | None = None):
    """A project of one txt source, downloaded (from disk, no store); `uri`: its parts.store."""
    sections = {"parts": {"store": uri}, "store": FAST} if uri else {}
    params, layout = make_project(root, [{"name": "code", "uri": str(src), "format": "txt"}],
                                  clean={"part_mb": 0.05}, **sections)
    download.run(params, layout, **QUIET)
    return params, layout


def clean_in_process(params, layout) -> None:
    from shardline.context import RunContext
    from shardline.orchestration.tasks.invoke import invoke

    invoke("clean", params, layout, RunContext(log=lambda _: None))


@pytest.fixture(scope="module")
def local_clean(texts, tmp_path_factory) -> dict[str, bytes]:  # noqa: F811
    """data/clean of a local run (no store): what a staged clean must write, byte for byte."""
    root = tmp_path_factory.mktemp("local")
    clean_in_process(*staged_project(root, texts))
    return files(root / "data/clean")


@pytest.mark.timeout(60)
def test_a_staged_clean_survives_a_stalled_fetch_a_lost_put_answer_and_a_cut_take(texts, store, tmp_path,  # noqa: F811
                                                                                monkeypatch, local_clean):
    """One of each, placed, nothing else: a worker's fetch of its raw input stalls past the read
    timeout mid-body, the PUT of a part's output lands and its answer is reset, and the driver's
    take of a finished part's file is cut halfway with no length promised (a cut taken for the
    file's end would be "the store changed under the stage")."""
    store.rate = 0
    monkeypatch.chdir(tmp_path)  # the workers' scratch
    prefix = f"faults/staged-placed/{tmp_path.name}"
    at = f"/{BUCKET}/{prefix}"
    params, layout = staged_project(tmp_path / "p", texts, f"s3://{BUCKET}/{prefix}")
    with place(store, {f"GET {at}/data/raw/": "stall", f"PUT {at}/data/clean/": "reset",
                       f"GET {at}/data/clean/": "cut"}):
        clean_in_process(params, layout)
    assert store.injected() == {"stall": 1, "reset": 1, "cut": 1}, faulted(store)
    assert files(layout.clean) == local_clean, faulted(store)


@pytest.mark.timeout(90)
def test_a_staged_clean_killed_in_a_fault_storm_resumes_to_the_bytes_of_a_local_run(texts, store, tmp_path,  # noqa: F811
                                                                                  monkeypatch, s3_env, local_clean):
    """`shardline stage clean` with parts.store SIGKILLed, under the seed's schedule, as the driver
    starts to take the first part a worker finished (its marker in the store, not yet in data/): run
    again, it writes the bytes of a local run, and takes that part from the store, not running it
    again (nor any other part the store held whole)."""
    import json
    import re

    store.rate = 0.1  # as the staged schedule's test: a clean of a few parts makes some hundred requests
    monkeypatch.chdir(tmp_path)
    prefix = f"faults/staged-killed/{tmp_path.name}"
    at = f"/{BUCKET}/{prefix}"
    params, layout = staged_project(tmp_path / "p", texts, f"s3://{BUCKET}/{prefix}")
    store.persist("reset", f"GET {at}/data/raw/", times=1)  # a fault before the kill, whatever the seed draws
    env = env_for(**{k: v for k, v in store.env(s3_env).items() if "AWS" in k})
    marker = re.compile(rf"{re.escape(at)}/data/clean/code/part-\d+\.json")

    def when(request: str) -> bool:  # the driver's first HEAD or GET of a finished part (workers only put here)
        return request.split(" ", 1)[1].startswith(f"{at}/data/clean/") and request.startswith(("HEAD", "GET")) \
            and any(marker.fullmatch(p) for p in landed(store))

    rc, mark, err = killed([str(BIN / "shardline"), "--root", str(layout.root), "stage", "clean"], tmp_path, env,
                           store, when)
    assert rc == -signal.SIGKILL, (rc, err, faulted(store))
    assert store.injected()["reset"] >= 1, faulted(store)
    held = {f"{at}/{k}": json.loads(v) for k, v in stored(s3_env, prefix).items() if k.endswith(".json")}
    done = {p: m for p, m in held.items() if isinstance(m, dict) and {"key", "files"} <= m.keys()}  # parts' markers
    assert done, (sorted(held), faulted(store))
    clean_in_process(params, layout)
    assert files(layout.clean) == local_clean, faulted(store)
    again = set(landed(store, mark))
    for marker, part in done.items():  # a part the store holds whole (its marker landed last) is not run again
        sent = {f"{marker.rsplit('/', 1)[0]}/{f}" for f in part["files"]} | {marker}
        assert not sent & again, (marker, sorted(sent & again), faulted(store))


# ---- dvc push, dvc pull: DVC's S3 remote, set as docs/scaling.md shows


@pytest.fixture(scope="module")
def dvc_repo(tmp_path_factory) -> Path:
    """A git + DVC repo whose data/ (two files) DVC tracks; each test gives it a remote of its own."""
    root = tmp_path_factory.mktemp("dvc") / "repo"
    (root / "data").mkdir(parents=True)
    for i in range(2):
        (root / "data" / f"f{i}.bin").write_bytes(random.Random(i).randbytes(60_000 + i))
    env = env_for()
    run(["git", "init", "-q"], root, env=env)
    run([str(BIN / "dvc"), "init", "-q"], root, env=env)
    run([str(BIN / "dvc"), "config", "core.analytics", "false"], root, env=env)
    run([str(BIN / "dvc"), "add", "-q", "data"], root, env=env)
    run(["git", "add", "-A"], root, env=env)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "data"], root, env=env)
    return root


def remote_at(repo: Path, proxy: FaultProxy, prefix: str, attempts: int = 10) -> dict:
    """`repo`'s default remote: s3://BUCKET/prefix through `proxy`, set as docs/scaling.md says
    (its timeouts, verify, botocore's retries in an AWS config file); the env to run dvc in."""
    aws_config = repo.parent / f"aws-config-{attempts}"
    aws_config.write_text(f"[default]\nretry_mode = standard\nmax_attempts = {attempts}\n")
    (repo / ".dvc/config.local").write_text(  # what `dvc remote add --local` and `modify --local` write
        f"[core]\n    remote = s\n['remote \"s\"']\n    url = s3://{BUCKET}/{prefix}\n    endpointurl = {proxy.url}\n"
        f"    read_timeout = 1\n    connect_timeout = 1\n    verify = true\n    configpath = {aws_config}\n")
    return {k: v for k, v in env_for(**{k: v for k, v in proxy.env(os.environ).items() if "AWS" in k}).items()
            if k != "AWS_MAX_ATTEMPTS"}  # the fixture's own setting for in-process clients: the config file's here


def clone(repo: Path, dest: Path, proxy: FaultProxy, prefix: str, attempts: int = 10) -> dict:
    run(["git", "clone", "-q", str(repo), str(dest)], dest.parent)
    return remote_at(dest, proxy, prefix, attempts)


def dir_manifests(repo: Path, at: str) -> dict[str, list[str]]:
    """Each .dir object of `repo`'s cache as the proxy sees it at path `at`: the objects it names."""
    import json

    cache = repo / ".dvc/cache"
    return {f"{at}/{d.relative_to(cache).as_posix()}": [f"{at}/files/md5/{e['md5'][:2]}/{e['md5'][2:]}"
                                                          for e in json.loads(d.read_text())]
            for d in cache.rglob("*.dir")}


DVC = str(BIN / "dvc")


@pytest.mark.timeout(90)
def test_dvc_push_and_pull_each_survive_a_placed_fault(dvc_repo, store, s3_env, tmp_path):  # noqa: F811
    """One each, nothing else: the PUT of an object lands and its answer is reset (botocore sends
    it again); the GET of one is cut short of its Content-Length (s3fs continues it by Range)."""
    store.rate = 0
    prefix = f"faults/dvc-placed/{tmp_path.name}"
    at = f"/{BUCKET}/{prefix}"
    env = remote_at(dvc_repo, store, prefix)
    with place(store, {f"PUT {at}/files/md5/": "reset"}):
        run([DVC, "push"], dvc_repo, env=env)
    assert stored(s3_env, prefix) == files(dvc_repo / ".dvc/cache"), faulted(store)
    manifest_last(store, dir_manifests(dvc_repo, at))
    env = clone(dvc_repo, tmp_path / "clone", store, prefix)
    with place(store, {f"GET {at}/files/md5/": "short"}):
        run([DVC, "pull"], tmp_path / "clone", env=env)
    assert store.injected() == {"reset": 1, "short": 1}, faulted(store)
    assert files(tmp_path / "clone/data") == files(dvc_repo / "data"), faulted(store)


def entries(repo: Path) -> list[str]:
    """The md5 of each file of `repo`'s data/, as DVC names the objects."""
    import json

    [d] = (repo / ".dvc/cache").rglob("*.dir")
    return sorted(e["md5"] for e in json.loads(d.read_text()))


# What DVC 3.67 prints when the store keeps failing (its words, not ours; docs/scaling.md): one
# "failed to transfer '<md5>' - <the client's error>" line per object, then the count. It names
# the object by its hash, never the remote or the file in the workspace (`-v` does: "failed to
# upload '<cache path>' to '<bucket/key>'"). A .dir object that cannot be read fails the pull as
# "unexpected error" (exit 255), naming nothing.


@pytest.mark.timeout(60)
def test_dvc_push_against_a_store_that_refuses_every_put_fails_naming_each_object(dvc_repo, store, s3_env,  # noqa: F811
                                                                                   tmp_path, monkeypatch):
    store.rate = 0
    prefix = f"faults/dvc-refused/{tmp_path.name}"
    env = remote_at(dvc_repo, store, prefix, attempts=1)  # botocore's retries: none (s3fs's own stay)
    store.persist("503", "PUT /")
    push = run([DVC, "push"], dvc_repo, check=False, env=env)
    print(push.stderr)
    lines = push.stderr.strip().splitlines()
    assert push.returncode == 1 and stored(s3_env, prefix) == {}, push.stderr
    assert sorted(line.split("'")[1] for line in lines[:-1]) == entries(dvc_repo), push.stderr  # the .dir: not tried
    assert all(line.endswith("(SlowDown) when calling the PutObject operation (reached max retries: 0): Please "
                             "reduce your request rate.") for line in lines[:-1]), push.stderr
    assert lines[-1] == "ERROR: failed to push data to the cloud - 3 files failed to upload", push.stderr
    # the retrain flow's push (retrain.dvc_push): one transient line naming the remote and DVC's first
    # error, DVC's own lines in the flow-run log; before, a CalledProcessError naming only the exit status
    from shardline.core.errors import DownloadError
    from shardline.orchestration.flows.pipeline import dvc_push

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_MAX_ATTEMPTS")
    said = []
    with pytest.raises(DownloadError) as failed:
        dvc_push(str(dvc_repo), said.append)
    first, _, rest = str(failed.value).partition(": ERROR: failed to transfer '")
    assert first == f"dvc push to s3://{BUCKET}/{prefix} failed" and failed.value.transient, failed.value
    assert rest.endswith("Please reduce your request rate.; the data is whole here: run 'dvc push' again (it sends "
                         "only what the remote lacks)"), failed.value
    assert said[-1] == "dvc push: ERROR: failed to push data to the cloud - 3 files failed to upload", said


@pytest.mark.timeout(60)
def test_dvc_pull_against_a_store_that_keeps_resetting_fails_and_writes_nothing(dvc_repo, store, s3_env,  # noqa: F811
                                                                                 tmp_path):
    """Every GET of a file's object reset mid-body (the .dir arrives): each object named by its
    md5, exit 1. Every GET reset, the .dir's too: exit 255, "unexpected error", naming nothing.
    Neither writes a file in the workspace."""
    from tests.integration.test_store_faults import put_all

    store.rate = 0
    prefix = f"faults/dvc-resetting/{tmp_path.name}"
    at = f"/{BUCKET}/{prefix}"
    put_all(s3_env, {f"{prefix}/{k}": v for k, v in files(dvc_repo / ".dvc/cache").items()})  # pushed, fault-free
    env = clone(dvc_repo, tmp_path / "clone", store, prefix, attempts=1)

    def objects(method, path, _):
        reset = method == "GET" and path.startswith(f"{at}/files/md5/") and not path.endswith(".dir")
        return "reset" if reset else None

    with intercept(store, objects):
        pull = run([DVC, "pull"], tmp_path / "clone", check=False, env=env)
    print(pull.stderr)
    lines = pull.stderr.strip().splitlines()
    failed = sorted(line.split("'")[1] for line in lines if line.startswith("ERROR: failed to transfer '"))
    assert pull.returncode == 1 and failed == entries(dvc_repo), pull.stderr
    assert "ConnectionResetError(104, 'Connection reset by peer')" in pull.stderr, pull.stderr
    assert lines[-1] == "ERROR: failed to pull data from the cloud - 3 files failed to download", pull.stderr
    assert not (tmp_path / "clone/data").exists()
    store.persist("reset", f"GET {at}/files/md5/")
    pull = run([DVC, "pull"], tmp_path / "clone", check=False, env=env)
    print(pull.stderr)
    assert pull.returncode == 255 and pull.stderr.startswith("ERROR: unexpected error - Response payload is not "
                                                             "completed"), pull.stderr
    assert not (tmp_path / "clone/data").exists()


@pytest.mark.timeout(120)
def test_dvc_push_killed_in_a_fault_storm_completes_the_remote_and_pull_gives_identical_files(dvc_repo, store,  # noqa: F811
                                                                                                s3_env, tmp_path):
    """`dvc push` SIGKILLed under the seed's schedule while its 2nd object PUT is on the way, then
    run again: the remote holds every object of the cache (no .dir before what it names), and a
    pull in a clone gives the same files."""
    store.faults, store.rate = FAULTS, 0.2  # as the schedule test: the cut body is docs/scaling.md's caveat
    prefix = f"faults/dvc-killed/{tmp_path.name}"
    at = f"/{BUCKET}/{prefix}"
    env = remote_at(dvc_repo, store, prefix)
    store.persist("503", f"PUT {at}/files/md5/", times=1)  # a fault before the kill, whatever the seed draws
    rc, _, err = killed([DVC, "push"], dvc_repo, env, store, nth(f"PUT {at}/files/md5/", 2))
    assert rc == -signal.SIGKILL, (rc, err, faulted(store))
    assert stored(s3_env, prefix) != files(dvc_repo / ".dvc/cache"), faulted(store)
    run([DVC, "push"], dvc_repo, env=env)
    assert stored(s3_env, prefix) == files(dvc_repo / ".dvc/cache"), faulted(store)
    manifest_last(store, dir_manifests(dvc_repo, at))
    env = clone(dvc_repo, tmp_path / "clone", store, prefix)
    run([DVC, "pull"], tmp_path / "clone", env=env)
    assert files(tmp_path / "clone/data") == files(dvc_repo / "data"), faulted(store)
