"""Chaos suite: the whole line under SIGKILLs in every stage ends identical to an unkilled run.

    python -m bench.chaos [--seed N] [--kills 20] [--corpus stdlib|shared]

Builds a reference project with one uninterrupted `dvc repro`, then runs a second project
from scratch through a seeded plan of kills that follows the line through every stage: mid-download, mid-part in
clean and tokenize (token ids written, their .json not), mid-dedup, mid-shard-write, mid-step,
mid-checkpoint-write, mid-retention (exact moments through shardline.chaos kill points, a real
SIGKILL) plus SIGKILLs of the whole process group at random times. Every kill is followed by
a resume through an entry point a user types, in turn `dvc repro`, `shardline pipeline` and the
Prefect deployment (`shardline serve` + `prefect deployment run`; the runner gets the kill
spec in its environment, which its flow runs inherit). Pass: every file under data/ (raw,
clean, tokenizer, tokens, shards, every retained checkpoint's files and the set of them,
metrics) identical to the reference's, bytes or, for JSON holding timings, all but the VARYING
fields (listed below; the evidence card is left out); no temp, .part or .next file left; per-step
losses and consumed global-batch hashes equal; final model and optimizer bytes equal (CPU);
`dvc status` clean. Prints a table of
kills per stage and outcomes; the same --seed replays the same plan (without one, a random
seed is drawn and printed). It fails unless every named point fired at least once (it prints
those that never did) and --kills kills landed at named points (timed kills come on top).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DATA = ("data/clean", "data/tokenizer", "data/tokens", "data/shards")
STAGE_OF = {"download.file": "download", "clean.part": "clean", "clean.dedup": "clean", "tokenize.part": "tokenize",
            "shard.file": "shard", "train.step": "train", "train.eval": "train", "checkpoint.files": "train",
            "retention": "train"}


POINTS = {"download.file": 2, "clean.part": 4, "clean.dedup": 4, "tokenize.part": 4, "shard.file": 2,
          "train.step": 9, "checkpoint.files": 2, "retention": 2}  # point -> largest k drawn


def plan(seed: int, kills: int) -> list[str]:
    """One kill spec per attempt. A spec arms every point, each at a random k-th hit, so the kill
    lands at the first armed point the resumed run reaches, wherever the line stands; a few
    attempts are SIGKILLs of the whole process group at a random time instead."""
    rnd = random.Random(seed)
    specs = [",".join(f"{p}#{rnd.randint(1, k)}" for p, k in POINTS.items()) for _ in range(2 * kills + 10)]
    for _ in range(max(3, kills // 6)):
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
    `prefect deployment run`; a timed kill takes down the runner's whole process group."""
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
        timed = spec.startswith("timed:")
        cmd = [str(BIN / "prefect"), "deployment", "run", "shardline-pipeline/line"]
        r = subprocess.run(cmd + ([] if timed else ["--watch", "--watch-timeout", "600"]), cwd=root, env=e,
                           capture_output=True, text=True)
        run_id = next(ln.split()[-1] for ln in r.stdout.splitlines() if "UUID:" in ln)
        if timed:
            time.sleep(float(spec[6:]))
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
            state = _api(e, f"/flow_runs/{run_id}")["state"]["type"]
            return "completed" if state == "COMPLETED" else "killed"
        state = _api(e, f"/flow_runs/{run_id}")["state"]
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


def attempt(root: Path, entry: str, spec: str, prefect_env: dict, timeout: float = 600) -> str:
    """Run one entry point under one kill spec; 'killed', 'completed' or 'failed: ...'."""
    e = {**env(prefect_env), "SHARDLINE_CHAOS_LOG": str(root / "chaos.log")}
    if spec and not spec.startswith("timed:"):
        e["SHARDLINE_CHAOS"] = spec
    if entry == "deployment":
        return deployment_attempt(root, e, spec)
    proc = subprocess.Popen(entry_cmd(entry), cwd=root, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    if spec.startswith("timed:"):
        try:
            out, _ = proc.communicate(timeout=float(spec[6:]))
            return "completed" if proc.returncode == 0 else f"failed: {out[-500:]}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return "killed"
    log = Path(e["SHARDLINE_CHAOS_LOG"])
    before = log.stat().st_size if log.exists() else 0
    out, _ = proc.communicate(timeout=timeout)
    # The fired point is the evidence, not the exit code: dvc runs the stage under $SHELL, and a
    # shell that does not exec its last command reports the SIGKILL as 137, bash's exec as -9.
    if proc.returncode == -signal.SIGKILL or (log.exists() and log.stat().st_size > before):
        return "killed"
    return "completed" if proc.returncode == 0 else f"failed: {out[-800:]}"


def tree(root: Path, dirs=DATA) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in dirs for p in sorted((root / d).rglob("*")) if p.is_file()}


# What differs between two runs of the same line by design, left out of the comparison (everything
# else under data/ is compared): timings, when and under which Prefect run a file was written, how
# many times the killed run resumed, and what one process saw (train.json's "this_process", and
# which checkpoints that last process saved or resumed from). The evidence card (data/reports) is
# built from these same files and quotes timings throughout: it is not compared.
VARYING = {"step_s", "data_wait_s", "compute_s", "tokens_per_s", "mfu", "gpu_util", "slow", "eval_s", "created",
           "prefect_flow_run_id", "resumes", "median_tokens_per_s", "p95_step_s", "data_wait_pct", "mean_mfu",
           "slow_steps", "this_process", "resumed_from", "checkpoints_saved"}
LEFTOVER = (".tmp-", ".part", ".next")  # names a finished line never leaves behind


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VARYING}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def outputs(root: Path) -> dict[str, object]:
    """Every file under data/ but the reports: bytes (sha256), or JSON without the VARYING fields."""
    out: dict[str, object] = {}
    for p in sorted((root / "data").rglob("*")):
        rel = str(p.relative_to(root))
        if not p.is_file() or rel.startswith("data/reports/"):
            continue
        if p.suffix == ".jsonl":
            out[rel] = [_strip(json.loads(ln)) for ln in p.read_text().splitlines() if ln.strip()]
        elif p.name in ("train_state.json", "manifest.json", "train.json"):
            doc = _strip(json.loads(p.read_text()))
            if isinstance(doc.get("files"), dict):  # a checkpoint's: train_state.json's hash holds its resumes count
                doc["files"] = {k: v for k, v in doc["files"].items() if k != "train_state.json"}
            out[rel] = doc
        elif p.name == ".gitignore":  # DVC's, checked apart (`ignored`)
            continue
        elif p.name == "train.csv":  # step,loss,lr,tokens_per_s: all but the timing column
            out[rel] = [ln.rsplit(",", 1)[0] for ln in p.read_text().splitlines()]
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def unignored(root: Path) -> list[str]:
    """The dvc.yaml outputs under data/ that data/.gitignore (DVC writes it as it records each
    output) does not list: git would offer to commit them."""
    listed = set((root / "data/.gitignore").read_text().splitlines()) if (root / "data/.gitignore").exists() else set()
    return [d for d in ("/raw", "/clean", "/tokenizer", "/tokens", "/shards", "/checkpoints", "/reports")
            if d not in listed]


def leftovers(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in (root / "data").rglob("*") if any(m in p.name for m in LEFTOVER)]


def training(root: Path) -> tuple[list, dict]:
    rows = [json.loads(ln) for ln in (root / "data/metrics/train.jsonl").read_text().splitlines() if ln.strip()]
    last = sorted((root / "data/checkpoints").glob("step-*"))[-1]
    files = json.loads((last / "manifest.json").read_text())["files"]
    return [(r["step"], r["loss"], r["batches"]) for r in rows], {k: files[k]["sha256"] for k in ("model.pt", "optimizer.pt")}


def run_chaos(workdir: Path, params: dict, *, seed: int, kills: int, prefect_env: dict, log=print,
              cover_all: bool = True, entries: tuple[str, ...] = ("dvc repro", "pipeline", "deployment")) -> dict:
    """cover_all: keep killing (within the plan) until every kill point has fired at least once."""
    ref = project(workdir / "ref", params)
    r = subprocess.run(entry_cmd("dvc repro"), cwd=ref, env=env(), capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"reference dvc repro failed:\n{r.stdout}\n{r.stderr}")
    crash = project(workdir / "chaos", params)
    table: Counter = Counter()
    fired, chaos_log = 0, crash / "chaos.log"  # fired: kills at a named point (timed ones are extra)
    hit: Counter = Counter()
    # a point that has killed its share is disarmed: else a point early in the line (download.file
    # kills after 1 or 2 files) would hold every attempt there, and the line never get past it
    share = -(-kills // len(POINTS))
    for i, spec in enumerate(plan(seed, kills)):
        if fired >= kills and (set(hit) >= set(POINTS) or not cover_all):  # enough kills (and every point fired)
            break
        if not spec.startswith("timed:"):
            spec = ",".join(x for x in spec.split(",") if hit[x.split("#")[0]] < share)
        entry = entries[i % len(entries)]
        seen = chaos_log.read_text().splitlines() if chaos_log.exists() else []
        outcome = attempt(crash, entry, spec, prefect_env)
        now = chaos_log.read_text().splitlines() if chaos_log.exists() else []
        where = now[-1] if len(now) > len(seen) else ("timed" if spec.startswith("timed:") else "-")
        stage = STAGE_OF.get(where.split("#")[0], "whichever ran")
        table[(stage, where.split("#")[0], outcome.split(":")[0])] += 1
        fired += outcome == "killed" and len(now) > len(seen)
        if outcome == "killed":
            hit[where.split("#")[0]] += 1
        log(f"  {i + 1:2d}. {entry:10} {('at ' + where) if outcome == 'killed' else spec[:30]:28} -> {outcome[:120]}")
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
    steps_ref, w_ref = training(ref)
    steps_crash, w_crash = training(crash)
    mine, theirs = outputs(crash), outputs(ref)
    differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    result = {
        "kills": fired, "table": table, "never fired": sorted(set(POINTS) - set(hit)),
        "every output under data/ identical (but VARYING fields and the reports)": not differ,
        "no leftovers (temps, .part, .next)": not leftovers(crash),
        "every output git-ignored": not unignored(crash),
        "detail": {"differ": differ, "leftovers": leftovers(crash), "not in data/.gitignore": unignored(crash)},
        "data identical": tree(ref) == tree(crash),
        "losses and batches identical": steps_ref == steps_crash,
        "weights identical": w_ref == w_crash,
        "dvc status clean": status.strip() == "Data and pipelines are up to date.",
    }
    return result


def small_params(corpus: str) -> dict:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    if corpus == "shared" and (REPO.parent / "shared" / "corpora" / "tinyshakespeare.txt").exists():
        c = REPO.parent / "shared" / "corpora"
        params["sources"] = [{"name": "shakespeare", "uri": str(c / "tinyshakespeare.txt"), "format": "txt",
                              "txt_unit": "blank_lines"},
                             {"name": "wiki", "uri": str(c / "wikitext2-valid.jsonl"), "format": "jsonl"}]
        params["mix"] = {"shakespeare": 0.5, "wiki": 0.5}
    params["clean"]["part_mb"] = 0.5
    params["tokenizer"]["vocab_size"] = 1024
    params["shard"].update(seq_len=64, target_mb=0.1)
    params["model"].update(n_layer=1, n_head=2, d_model=32)
    params["loader"]["global_batch"] = 8
    params["train"].update(steps=40, checkpoint_every=4, keep_last=2, keep_every=0, warmup_steps=2, threads=1)
    return params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=None, help="the plan's seed (default: a random one, printed)")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--corpus", choices=["stdlib", "shared"], default="shared")
    args = ap.parse_args()
    from flows.server import local_server

    t0 = time.perf_counter()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(10**6)
    with tempfile.TemporaryDirectory() as tmp, local_server(Path(tmp) / "prefect") as penv:
        print(f"chaos: seed {args.seed}, plan of {len(plan(args.seed, args.kills))} kill specs, corpus {args.corpus}")
        res = run_chaos(Path(tmp), small_params(args.corpus), seed=args.seed, kills=args.kills, prefect_env=penv)
    print(f"\n{'stage':14} {'kill point':18} {'outcome':10} count")
    for (stage, where, outcome), n in sorted(res.pop("table").items()):
        print(f"{stage:14} {where:18} {outcome:10} {n}")
    never, detail = res.pop("never fired"), res.pop("detail")
    ok = res["kills"] >= args.kills and not never and all(v for k, v in res.items() if k != "kills")
    for k, v in res.items():
        print(f"{k}: {v}")
    print(f"named points never fired: {', '.join(never) if never else 'none'} (of {', '.join(POINTS)})")
    print(f"compared all but these fields (they differ by design): {', '.join(sorted(VARYING))}")
    for k, v in detail.items():
        if v:
            print(f"{k}: {v[:20]}")
    print(f"\nchaos: {'PASS' if ok else 'FAIL'} ({res['kills']} kills, {time.perf_counter() - t0:.0f}s)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
