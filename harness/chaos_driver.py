"""The chaos driver: the whole line under SIGKILLs in every stage ends identical to an unkilled run.

`python -m bench.chaos` (the full suite) and tests/integration/test_chaos.py (the CI version) drive it.

Builds a reference project with one uninterrupted `dvc repro`, then runs a second project from
scratch through a seeded plan of kills that follows the line through every stage, at the named
kill points of shardline.core.chaos (a real SIGKILL of the process that holds the work, at an exact
moment): inside writes (an HTTP body into its .part while the loopback server also cuts bodies
short, a clean part's parquet, a token part's ids, a shard's bytes), after units of work (a file,
a part, a selection, a shard, a step, a held-out batch, a checkpoint's files, a retention), and
in the orchestrators (`dvc repro` killed with its stage done but not recorded; the pipeline flow
between DVC's cache write and dvc.lock; the flow, and under `shardline serve` the runner, between
two stage task runs), plus SIGKILLs of the whole process group at random times. Every kill is
followed by a resume through an entry point a user types, in turn `dvc repro`, `shardline
pipeline` and the Prefect deployment (`shardline serve` + `prefect deployment run`; the runner
gets the kill spec in its environment, which its flow runs inherit).

Pass (harness/chaoscheck.py): every file under data/ identical to the reference's (bytes or, for
JSON holding timings, all but the VARYING fields; the evidence card but its timing lines; not
the loss plot, which draws tokens/s), the same retained checkpoints, no temp, .part or .next
file left, no file under data/ that git would offer to commit, per-step losses, consumed global-batch hashes and final weights equal (CPU), `dvc status`
clean, and no resume redid finished work: no file, part, shard or checkpoint made twice, and
training went on from the newest checkpoint each time. The same seed replays the same plan.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import yaml

from harness import chaoscheck as check
from harness.projects import up_to_date

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# point -> (stage, largest k drawn, most kills). A point that kills before its unit of work is
# durable (inside a write, a checkpoint's files, dvc before it records) leaves the next attempt at
# the same place: armed at a low k it would hold every attempt there, so it is disarmed once it
# has killed its most. Training steps always progress (k reaches past checkpoint_every). A point
# the line passes only once or in a short window (a file finished, the selections written) is
# armed at its first hit, so it fires whatever the seed.
POINTS = {
    "download.file": ("download", 1, 2), "download.body": ("download", 4, 3),
    "clean.write": ("clean", 6, 2), "clean.part": ("clean", 3, 3), "clean.dedup": ("clean", 1, 2),
    "minhash.write": ("clean", 2, 2), "minhash.part": ("clean", 3, 3), "clean.cluster": ("clean", 14, 2),
    "tokenize.write": ("tokenize", 3, 2), "tokenize.part": ("tokenize", 3, 3),
    "shard.write": ("shard", 3, 2), "shard.file": ("shard", 2, 3),
    "train.step": ("train", 9, None), "train.eval": ("train", 3, 2), "checkpoint.files": ("train", 2, 3),
    "retention": ("train", 2, 2),
    "dvc.record": ("dvc repro", 1, 2), "pipeline.commit": ("pipeline", 1, 2), "pipeline.between": ("pipeline", 2, 2),
}
# what the CI run (tests/integration/test_chaos.py) requires: one kill inside a write or a unit in every stage,
# a checkpoint write among them, and dvc killed before it records
CI_POINTS = ("download.file", "clean.write", "tokenize.write", "shard.write", "train.step", "checkpoint.files",
             "dvc.record", "pipeline.commit")


def plan(seed: int, kills: int, points: tuple[str, ...] = tuple(POINTS), timed: bool = True) -> list[str]:
    """One kill spec per attempt. A spec arms every point, each at a random k-th hit, so the kill
    lands at the first armed point the resumed run reaches, wherever the line stands; a few
    attempts (`timed`) are SIGKILLs of the whole process group at a random time instead."""
    rnd = random.Random(seed)
    specs = [",".join(f"{p}#{rnd.randint(1, POINTS[p][1])}" for p in points) for _ in range(3 * kills + 10)]
    for _ in range(max(3, kills // 6) if timed else 0):
        specs.insert(rnd.randint(0, len(specs)), f"timed:{rnd.uniform(0.5, 4.0):.2f}")
    return specs


def project(root: Path, params: dict) -> Path:
    root.mkdir(parents=True)
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for cmd in (["git", "init", "-q"], ["git", "config", "user.email", "c@example.com"],
                ["git", "config", "user.name", "chaos"], [str(BIN / "dvc"), "init", "-q"],
                [str(BIN / "dvc"), "config", "core.analytics", "false"]):
        subprocess.run(cmd, cwd=root, check=True, capture_output=True)
    return root


def env(extra: dict | None = None) -> dict:
    return {**os.environ, **(extra or {}), "PATH": f"{BIN}:{os.environ['PATH']}", "DO_NOT_TRACK": "1",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING"}


def entry_cmd(entry: str) -> list[str]:
    return [str(BIN / "dvc"), "repro"] if entry == "dvc repro" else [str(BIN / "shardline"), "pipeline"]


def _api(e: dict, path: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(e["PREFECT_API_URL"] + path, timeout=30) as r:
        return json.loads(r.read())


def _deployed_root(e: dict) -> str | None:
    import urllib.error

    try:
        return _api(e, "/deployments/name/shardline-pipeline/line")["parameters"].get("root")
    except urllib.error.HTTPError:
        return None


def deployment_attempt(root: Path, e: dict, spec: str) -> str:
    """`shardline serve` (with the kill spec in its env, which its flow runs inherit), then
    `prefect deployment run`; a timed kill takes down the runner's whole process group, and so
    does the point pipeline.between (the flow run shares the runner's group)."""
    port = e["PREFECT_API_URL"].split(":")[-1].split("/")[0]
    log = root / "serve.log"
    start = log.stat().st_size if log.exists() else 0
    with open(log, "ab") as out:
        serve = subprocess.Popen([str(BIN / "shardline"), "serve", "--port", port], cwd=root, env=e, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 120
        while b"orphaned run(s) marked Crashed" not in log.read_bytes()[start:]:
            if serve.poll() is not None or time.time() > deadline:
                return f"failed: runner did not start: {log.read_text()[-500:]}"
            time.sleep(0.3)
        while _deployed_root(e) != str(root):  # the runner registers its deployments after the sweep
            if serve.poll() is not None or time.time() > deadline:
                return f"failed: deployment never appeared: {log.read_text()[-500:]}"
            time.sleep(0.3)
        r = subprocess.run([str(BIN / "prefect"), "deployment", "run", "shardline-pipeline/line"], cwd=root, env=e,
                           capture_output=True, text=True)
        run_id = next(ln.split()[-1] for ln in r.stdout.splitlines() if "UUID:" in ln)
        if spec.startswith("timed:"):
            time.sleep(float(spec[6:]))
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
            state = _api(e, f"/flow_runs/{run_id}")["state"]["type"]
            return "completed" if state == "COMPLETED" else "killed"
        deadline = time.time() + 600
        while (state := _api(e, f"/flow_runs/{run_id}")["state"])["type"] not in ("COMPLETED", "CRASHED", "FAILED",
                                                                                 "CANCELLED"):
            if serve.poll() is not None:  # the runner died: a kill if a point fired (attempt checks), else a failure
                return f"failed: the runner exited ({serve.returncode}): {log.read_text()[-500:]}"
            if time.time() > deadline:
                return "failed: the flow run did not finish in 600 s"
            time.sleep(0.5)
        if state["type"] == "COMPLETED":
            return "completed"
        return "killed" if state["type"] == "CRASHED" else f"failed: {state['type']} {state.get('message')}"
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGTERM)
            try:
                serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(serve.pid, signal.SIGKILL)


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def attempt(root: Path, entry: str, spec: str, prefect_env: dict, timeout: float = 600) -> str:
    """Run one entry point under one kill spec; 'killed', 'completed' or 'failed: ...'. The fired
    point is the evidence of a named kill, not the exit code: dvc runs the stage under $SHELL,
    and a shell that does not exec its last command reports the SIGKILL as 137, bash's exec as -9."""
    log = root / "chaos.log"
    e = {**env(prefect_env), "SHARDLINE_CHAOS_LOG": str(log), "SHARDLINE_CHAOS_DONE_LOG": str(log)}
    if spec and not spec.startswith("timed:"):
        e["SHARDLINE_CHAOS"] = spec
    before = len(check.fired(_lines(log)))
    if entry == "deployment":
        outcome = deployment_attempt(root, e, spec)
    else:
        proc = subprocess.Popen(entry_cmd(entry), cwd=root, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=float(spec[6:]) if spec.startswith("timed:") else timeout)
            outcome = "completed" if proc.returncode == 0 else f"failed: {out[-800:]}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            if not spec.startswith("timed:"):
                raise
            outcome = "killed"
    if len(check.fired(_lines(log))) > before:
        return "killed"
    if spec.startswith("timed:") and outcome == "killed":
        with open(log, "a") as f:
            f.write("kill timed\n")
    return outcome


def run_chaos(workdir: Path, params: dict, *, seed: int, kills: int, prefect_env: dict, log=print,
              cover_all: bool = True, entries: tuple[str, ...] = ("dvc repro", "pipeline", "deployment"),
              points: tuple[str, ...] = tuple(POINTS), most: int | None = None, timed: bool = True) -> dict:
    """cover_all: keep killing (within the plan) until every one of `points` has fired at least
    once; `most`: no point kills more often than that; `timed`: random-time kills too (the short
    CI run: each point once, no timed kills, so the same seed is the same run on any machine)."""
    cap = {p: min(c for c in (POINTS[p][2], most, 10**9) if c is not None) for p in points}
    ref = project(workdir / "ref", params)
    r = subprocess.run(entry_cmd("dvc repro"), cwd=ref, env=env({"SHARDLINE_CHAOS_DONE_LOG": str(ref / "chaos.log")}),
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"reference dvc repro failed:\n{r.stdout}\n{r.stderr}")
    crash = project(workdir / "chaos", params)
    table: Counter = Counter()
    hit: Counter = Counter()  # kills per named point (timed ones are extra)
    for i, spec in enumerate(plan(seed, kills, points, timed)):
        if sum(hit.values()) >= kills and (set(hit) >= set(points) or not cover_all):
            break
        if not spec.startswith("timed:"):  # points that killed their most are disarmed
            spec = ",".join(x for x in spec.split(",") if hit[x.split("#")[0]] < cap[x.split("#")[0]])
        entry = entries[i % len(entries)]
        seen = check.fired(_lines(crash / "chaos.log"))
        outcome = attempt(crash, entry, spec, prefect_env)
        now = check.fired(_lines(crash / "chaos.log"))
        where = now[-1].split("#")[0] if len(now) > len(seen) else ("timed" if spec.startswith("timed:") else "-")
        table[(POINTS[where][0] if where in POINTS else "whichever ran", where, outcome.split(":")[0])] += 1
        if where in POINTS:
            hit[where] += 1
        log(f"  {i + 1:2d}. {entry:10} {('at ' + now[-1]) if where in POINTS else spec[:30]:28} -> {outcome[:120]}")
        if outcome.startswith("failed"):
            raise SystemExit(f"resume failed after a kill: {outcome}")
        if outcome == "completed":
            log("  (the line completed before an armed point was reached; no more kills possible)")
            break
    for entry in entries:  # finish through every entry point; all but the first find nothing to do
        outcome = attempt(crash, entry, "", prefect_env)
        log(f"  final {entry:10} -> {outcome[:200]}")
        assert outcome == "completed", outcome
    status = subprocess.run([str(BIN / "dvc"), "status"], cwd=crash, env=env(), capture_output=True, text=True).stdout
    steps_ref, w_ref = check.training(ref)
    steps_crash, w_crash = check.training(crash)
    mine, theirs = check.outputs(crash), check.outputs(ref)
    differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    kept = lambda root: sorted(p.name for p in (root / "data/checkpoints").glob("step-*"))  # noqa: E731
    problems, steps_redone = check.redone(_lines(ref / "chaos.log"), _lines(crash / "chaos.log"),
                                          params["train"]["checkpoint_every"])
    return {
        "kills": sum(hit.values()), "table": table, "never fired": sorted(set(points) - set(hit)),
        "steps redone": steps_redone,
        "every output under data/ identical (but VARYING fields, timing lines, the plot)": not differ,
        "same checkpoints retained": kept(crash) == kept(ref),
        "no leftovers (temps, .part, .next)": not check.leftovers(crash),
        "every output git-ignored": not check.unignored(crash),
        "no finished work redone (files, parts, shards, checkpoints; steps only since the newest checkpoint)":
            not problems,
        "detail": {"differ": differ, "leftovers": check.leftovers(crash), "not git-ignored":
                   check.unignored(crash), "redone": problems,
                   "retained (killed, unkilled)": [kept(crash), kept(ref)] if kept(crash) != kept(ref) else []},
        "data identical": check.tree(ref) == check.tree(crash),
        "losses and batches identical": steps_ref == steps_crash,
        "weights identical": w_ref == w_crash,
        "dvc status clean": up_to_date(status),
    }


def small_params(corpus: str, http_url: str | None = None) -> dict:
    """A line small enough to kill 40 times; `http_url`: the wiki source is fetched from there."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    if corpus == "shared" and (REPO.parent / "shared" / "corpora" / "tinyshakespeare.txt").exists():
        c = REPO.parent / "shared" / "corpora"
        params["sources"] = [{"name": "shakespeare", "uri": str(c / "tinyshakespeare.txt"), "format": "txt",
                              "txt_unit": "blank_lines"},
                             {"name": "wiki", "uri": http_url or str(c / WIKI), "format": "jsonl"}]
        params["mix"] = {"shakespeare": 0.5, "wiki": 0.5}
    params["download"]["backoff_s"] = 0.05  # the server cuts bodies short on purpose: retry at once
    params["clean"]["part_mb"] = 0.5
    params["clean"]["near_dedup"] = {}  # its signature parts and clustering are killed too
    params["tokenizer"]["vocab_size"] = 1024
    params["shard"].update(seq_len=64, target_mb=0.1)
    params["model"].update(n_layer=1, n_head=2, d_model=32)
    params["loader"]["global_batch"] = 8
    params["train"].update(steps=40, checkpoint_every=4, keep_last=2, keep_every=0, warmup_steps=2, threads=1)
    return params


WIKI = "wikitext2-valid.jsonl"
