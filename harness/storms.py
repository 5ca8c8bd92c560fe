"""Kills during fault storms (issue 52, point 2): every path by which the line reads or writes an
object store, SIGKILLed at a random request while 30% of the requests fail, then run again, ends
with the bytes of a run that met neither.

    with moto_s3() as env:
        rows = run_storms(work, seed=1, env=env)     # one Row per path of PATHS; print(table(rows))

The paths: `push-shards` (data/shards to a bucket), `train-stream` (`stage train` reading
loader.shards_uri), `train-ckpt` (`stage train` writing train.checkpoint_uri: saves, retention's
deletes, the sweep and the resume's reads), `staged-clean` (`stage clean` with parts.store: its
parts on workers that share only the bucket). Each runs on its own copy of one small project
whose data half was built here once, in this process, and for each:
1. the reference: the path's command, uninterrupted, through a FaultProxy at rate 0 (no fault; the
   proxy counts its requests, n);
2. the storm: the same command through a FaultProxy on the path's seed at RATE (0.3) of every
   fault of the default schedule (FAULTS: 500, 503, reset, stall, short), its process group
   SIGKILLed as the proxy receives a request once k - 1 have got through (no fault), k drawn from
   the seed uniformly in [1, 0.9 n] (that request is answered 500 to no one: faultproxy.killed).
   Counted in requests that got through, both runs do the same work: k lands anywhere in the
   first nine tenths of the run's progress, not only in the first n requests of a storm that
   makes half as many again. Not the last tenth: where the streamed cache's prefetch races its
   reads, a run's requests vary by a few, and a k past the storm's last request never kills;
3. run again under the same proxy, its schedule going on, until it exits 0: a transient failure
   (exit 75: the store section's retries ran out) is run again, as an orchestrator would; any
   other exit, AGAIN runs, or a kill that never fired fails the storm;
4. what it made (`made`: the objects of its prefix; per-step losses and each kept checkpoint's
   model and optimizer bytes; data/clean and the parts in the bucket) equals the reference's, key
   for key and byte for byte, and no temp is left in the project or its working folder (`.tmp-`,
   `.part`, `.next`, a `.fetch`, a worker's scratch).
The store section (STORE) tries a request 12 times with short waits and 0.5 s timeouts: at p = 0.3
twelve failures in a row come once in two million requests, so a re-run for a transient failure
is rare, not routine. botocore's own retries are off (AWS_MAX_ATTEMPTS=1): the section's loop
retries every fault, and its waits are the short ones. The same seed replays the same schedules
and kill points (`Row.replay`). bench/chaos.py runs the storms on its --seed after the line's
kills; tests/integration/test_storms.py is the CI version.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import signal
import subprocess
import time
import zlib
from collections import Counter
from pathlib import Path

import yaml

from harness import chaoscheck
from harness.faultproxy import FAULTS, FaultProxy, killed
from harness.projects import BIN, env_for, small_params, stdlib_dir, write_params
from harness.s3 import BUCKET, client, upload_dir

PATHS = ("push-shards", "train-stream", "train-ckpt", "staged-clean")
RATE = 0.3
AGAIN = 5  # runs after the kill before the storm is called failed
STORE = {"attempts": 12, "backoff_s": 0.02, "max_backoff_s": 0.2, "timeout_s": 0.5, "budget_s": 60}
# checkpoints every 2 steps, 2 kept: a run of 8 saves 4 and retention deletes 2
TRAIN = {"steps": 8, "checkpoint_every": 2, "keep_last": 2, "keep_every": 0, "warmup_steps": 2, "threads": 1}
MODEL = ("model.pt", "optimizer.pt")
# shards of ~10 KB, several per source, and a streamed cache of two: training fetches shards (and
# fetches again what it evicted) from its first step to its last, so a kill can land in any step
SHARD_MB, CACHE_MB = 0.01, 0.02
SCRATCH = ".shardline-parts"  # shardline.data.staging's workers' scratch, in their working folder
LEFTOVER = (*chaoscheck.LEFTOVER, ".fetch")


@dataclasses.dataclass
class Row:
    path: str
    seed: int                # the proxy's: the schedule and k
    n: int                   # requests of the fault-free reference
    k: int                   # the storm's run was killed once k - 1 of its requests had got through
    at: str = ""             # that request, "METHOD path"
    at_n: int = 0            # its place among the storm's requests
    requests: int = 0        # the storm's, every run's
    faults: Counter = dataclasses.field(default_factory=Counter)
    reruns: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)  # the transient lines that asked for a re-run
    differs: list[str] = dataclasses.field(default_factory=list)
    leftovers: list[str] = dataclasses.field(default_factory=list)
    problem: str = ""        # the kill never fired, a run failed for good
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.differs or self.leftovers or self.problem)

    def summary(self) -> str:
        """What replays it and what the proxy did: for a failure message."""
        return (f"{self.path}: proxy seed {self.seed}, killed at request {self.k} of {self.n} ({self.at}, "
                f"request {self.at_n} of the storm), "
                f"{self.requests} requests, faults {dict(self.faults)}, {self.reruns} re-run(s) "
                f"{self.errors}; differs {self.differs[:10]}; leftovers {self.leftovers[:10]}; {self.problem}")


def path_seed(seed: int, path: str) -> int:
    return zlib.crc32(f"{seed}:{path}".encode())


def build(dest: Path, files: int = 8) -> Path:
    """A project of `files` stdlib modules whose data half (download, clean, tokenize, shard) ran
    here, in this process, without a store; params sized by TRAIN and STORE."""
    from shardline.context import RunContext
    from shardline import paramsfile
    from shardline.core.layout import Layout
    from shardline.data import download
    from shardline.orchestration.tasks.invoke import invoke

    src = stdlib_dir(dest / "src", files)
    root = dest / "built"
    root.mkdir(parents=True)
    write_params(root, small_params([{"name": "code", "uri": str(src), "format": "txt"}], train=TRAIN,
                                    eval={"blocks": 4}, store=STORE, shard={"target_mb": SHARD_MB}))
    params, layout = paramsfile.load(root / "params.yaml"), Layout.at(root)
    download.run(params, layout, log=lambda _: None)
    for name in ("clean", "tokenize", "shard"):
        invoke(name, params, layout, RunContext(log=lambda _: None))
    return root


def setup(path: str, built: Path, dest: Path, uri: str, shards_uri: str) -> list[str]:
    """A copy of `built` at `dest` set for `path` (its store at `uri`); the command to run there."""
    shutil.copytree(built, dest)
    p = yaml.safe_load((dest / "params.yaml").read_text())
    cmd = ["stage", "train"]
    if path == "push-shards":
        cmd = ["push-shards", uri]
    elif path == "train-stream":
        p["loader"] = {**p["loader"], "shards_uri": shards_uri, "cache_mb": CACHE_MB}
        shutil.rmtree(dest / "data/shards")  # streamed: nothing read from here
    elif path == "train-ckpt":
        p["train"] = {**p["train"], "checkpoint_uri": uri}
    else:
        p["parts"] = {**p.get("parts", {}), "store": uri}
        shutil.rmtree(dest / "data/clean")
        cmd = ["stage", "clean"]
    write_params(dest, p)
    (dest.parent / f"{dest.name}-cwd").mkdir()  # the command's working folder: staged workers' scratch
    return [str(BIN / "shardline"), "--root", str(dest), *cmd]


def objects(env: dict, prefix: str) -> dict[str, bytes]:
    """Every object under `prefix`, read straight from the store, by its key below it."""
    s3, out = client(env), {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix) + 1:]] = s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
    return out


def made(path: str, root: Path, env: dict, prefix: str) -> dict[str, bytes]:
    """What a run of `path` made, by name: compared byte for byte with the reference's."""
    if path == "push-shards":
        return objects(env, prefix)
    if path == "staged-clean":
        return {**{f"data/clean/{p.relative_to(root / 'data/clean').as_posix()}": p.read_bytes()
                   for p in sorted((root / "data/clean").rglob("*")) if p.is_file()},
                **{f"store: {k}": v for k, v in objects(env, prefix).items()}}
    rows = [json.loads(ln) for ln in (root / "data/metrics/train.jsonl").read_text().splitlines() if ln.strip()]
    out = {"losses": json.dumps([(r["step"], r["loss"]) for r in rows]).encode()}
    if path == "train-stream":
        ckpts = root / "data/checkpoints"
        return {**out, **{f"{d.name}/{n}": (d / n).read_bytes() for d in sorted(ckpts.glob("step-*")) for n in MODEL}}
    stored = objects(env, prefix)  # the model's and optimizer's bytes; of the rest, the names (train_state.json
    out["objects"] = "\n".join(sorted(stored)).encode()  # counts resumes, the manifest hashes it)
    return {**out, **{k: v for k, v in stored.items() if k.rsplit("/", 1)[-1] in MODEL}}


def leftovers(root: Path) -> list[str]:
    """Temps under the project and a worker's scratch in its working folder."""
    cwd = root.parent / f"{root.name}-cwd"
    found = [str(p.relative_to(root)) for p in root.rglob("*") if any(m in p.name for m in LEFTOVER)]
    return found + [str(p.relative_to(cwd)) for p in (cwd / SCRATCH).glob("*")]


def through(proxy: FaultProxy, env: dict) -> dict:
    """The environment of a command whose store is reached through `proxy`; botocore's own retries off."""
    return env_for(**{k: v for k, v in proxy.env(env).items() if k.startswith("AWS_")}, AWS_MAX_ATTEMPTS="1")


class ThroughK:
    """A `killed` trigger: the first request to arrive once k - 1 requests have got through; `at`
    holds it ("METHOD path") and its place among the proxy's requests (the log may not hold it yet
    when the killed command's wait returns)."""

    def __init__(self, proxy: FaultProxy, k: int):
        self.proxy, self.k, self.at = proxy, k, ("", 0)

    def __call__(self, request: str) -> bool:
        fire = sum(f is None for *_, f in self.proxy.log) >= self.k - 1
        if fire:
            self.at = (request, len(self.proxy.log) + 1)
        return fire


def storm(path: str, work: Path, env: dict, seed: int, built: Path, shards_uri: str) -> Row:
    """One path's reference, then its storm (module docstring, 1-4)."""
    t0, pseed = time.perf_counter(), path_seed(seed, path)
    prefix = f"storms/{seed}/{path}"
    ref, hit = work / path / "ref", work / path / "storm"
    cmd = setup(path, built, ref, f"s3://{BUCKET}/{prefix}/ref", shards_uri)
    with FaultProxy(env["AWS_ENDPOINT_URL"], seed=pseed, rate=0) as quiet:
        r = subprocess.run(cmd, cwd=f"{ref}-cwd", env=through(quiet, env), capture_output=True, text=True, timeout=600)
        n = len(quiet.log)
    if r.returncode != 0:
        raise RuntimeError(f"{path}: the fault-free reference failed ({r.returncode}): {r.stderr[-2000:]}")
    row = Row(path, pseed, n, random.Random(pseed).randint(1, max(1, n * 9 // 10)))
    want = made(path, ref, env, f"{prefix}/ref")
    cmd = setup(path, built, hit, f"s3://{BUCKET}/{prefix}/storm", shards_uri)
    with FaultProxy(env["AWS_ENDPOINT_URL"], seed=pseed, rate=RATE, faults=FAULTS, stall_s=1.5) as proxy:
        e = through(proxy, env)
        when = ThroughK(proxy, row.k)
        rc, at, err = killed(cmd, Path(f"{hit}-cwd"), e, proxy, when, timeout=600)
        row.at, row.at_n = when.at
        if at < 0:
            row.problem = (f"the kill never fired: the run ended (exit {rc}) before {row.k - 1} of its "
                           f"{len(proxy.log)} requests got through")
        elif rc != -signal.SIGKILL:
            row.problem = f"killed at request {row.k}, it exited {rc}: {err.strip()[-500:]}"
        while not row.problem:
            r = subprocess.run(cmd, cwd=f"{hit}-cwd", env=e, capture_output=True, text=True, timeout=600)
            row.reruns += 1
            if r.returncode == 0:
                break
            line = (r.stderr.strip().splitlines() or [""])[-1]
            if r.returncode != 75 or row.reruns >= AGAIN:
                row.problem = f"run {row.reruns + 1} exited {r.returncode}: {line}"
            row.errors.append(line)
        row.requests, row.faults = len(proxy.log), proxy.injected()
        row.faults["500"] -= at >= 0  # the kill's own answer, to no one: not the schedule's
        row.faults += Counter()  # drops a zero
    if not row.problem:
        got = made(path, hit, env, f"{prefix}/storm")
        row.differs = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
        row.leftovers = leftovers(hit)
    row.seconds = time.perf_counter() - t0
    return row


def run_storms(work: Path, seed: int, env: dict, paths=PATHS, log=print) -> list[Row]:
    """Every path's storm on `seed` (`env` reaches the S3 server; the bucket is BUCKET), in order."""
    built = build(work / "base")
    shards = f"storms/{seed}/shards"
    upload_dir(env, built / "data/shards", BUCKET, shards)  # what train-stream reads, put without faults
    rows = []
    for path in paths:
        rows.append(storm(path, work, env, seed, built, f"s3://{BUCKET}/{shards}"))
        log(f"storm {path}: {'identical' if rows[-1].ok else 'FAIL'} ({rows[-1].seconds:.0f}s)")
    return rows


def table(rows: list[Row]) -> str:
    """Per path: the kill point drawn (once k - 1 requests got through, k <= 0.9 n, n the fault-free run's;
    the storm's request it fell on), the storm's requests over every run, its faults by kind, the
    re-runs after the kill, and whether it ended identical to the fault-free run."""
    lines = [f"{'path':13} {'kill: k of n':>12} {'at request':>10} {'requests':>8}  {'faults injected':42} "
             f"{'re-runs':>7}  identical"]
    for r in rows:
        faults = ", ".join(f"{f} {r.faults[f]}" for f in FAULTS if r.faults[f]) or "none"
        lines.append(f"{r.path:13} {f'{r.k} of {r.n}':>12} {r.at_n:>10} {r.requests:>8}  {faults:42} {r.reruns:>7}  "
                     f"{'yes' if r.ok else 'NO'}")
    return "\n".join(lines)
