"""What the chaos suite compares once the killed line has finished: outputs, leftovers, .gitignore,
and what each resume redid.

Contract: every function takes the two finished projects (or their chaos logs) and returns what
differs, never raises; bench.chaos turns each into one pass/fail line. The chaos log
(SHARDLINE_CHAOS_LOG and SHARDLINE_CHAOS_DONE_LOG, written by shardline.core.chaos) holds, in time order, `name#k` for a named kill
point that fired, `kill timed` for a timed SIGKILL of the whole process group (the suite writes
it), and `done <stage> <unit>` for a unit of work made durable: a downloaded file, a clean part or
its selection, a token part, a shard, a training step, a checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections import Counter
from pathlib import Path

from shardline.training import checkpoint

DATA = ("data/clean", "data/tokenizer", "data/tokens", "data/shards")

# What differs between two runs of the same line by design, left out of the comparison (everything
# else under data/ is compared): timings, when and under which Prefect run a file was written, how
# many times the killed run resumed, and what one process saw (train.json's "this_process", and
# which checkpoints that last process saved or resumed from). The evidence card is compared but
# for its lines quoting timings or the resume count (CARD_VARYING); its plot is not, as it draws
# tokens/s.
VARYING = {"step_s", "data_wait_s", "compute_s", "tokens_per_s", "mfu", "gpu_util", "slow", "eval_s", "created",
           "prefect_flow_run_id", "resumes", "median_tokens_per_s", "p95_step_s", "data_wait_pct", "mean_mfu",
           "slow_steps", "this_process", "resumed_from", "checkpoints_saved"}
CARD_VARYING = re.compile(r"tokens/s over|p95 step time|data wait|eval\(s\), .* s in all|training resumed \d+ time"
                          r"|slow steps: |^  - the slowest, step |^- the slowest step")  # the slowest: which step
LEFTOVER = (".tmp-", ".part", ".next")  # names a finished line never leaves behind


def tree(root: Path, dirs=DATA) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in dirs for p in sorted((root / d).rglob("*")) if p.is_file()}


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VARYING}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def outputs(root: Path) -> dict[str, object]:
    """Every file under data/ but the loss plot: bytes (sha256), JSON without the VARYING fields,
    the evidence card without its CARD_VARYING lines."""
    out: dict[str, object] = {}
    for p in sorted((root / "data").rglob("*")):
        rel = str(p.relative_to(root))
        if not p.is_file() or rel == "data/reports/train.png":
            continue
        if rel == "data/reports/evidence.md":
            out[rel] = [ln for ln in p.read_text().splitlines() if not CARD_VARYING.search(ln)]
        elif p.suffix == ".jsonl":
            out[rel] = [_strip(json.loads(ln)) for ln in p.read_text().splitlines() if ln.strip()]
        elif p.name in ("train_state.json", "manifest.json", "train.json", "headline.json"):
            doc = _strip(json.loads(p.read_text()))
            if isinstance(doc.get("files"), dict):  # a checkpoint's: train_state.json's hash holds its resumes count
                doc["files"] = {k: v for k, v in doc["files"].items() if k != "train_state.json"}
            out[rel] = doc
        elif p.name == ".gitignore":  # DVC's, checked apart (`unignored`)
            continue
        elif p.name == "train.csv":  # step,loss,lr,tokens_per_s: all but the timing column
            out[rel] = [ln.rsplit(",", 1)[0] for ln in p.read_text().splitlines()]
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def unignored(root: Path) -> list[str]:
    """The files under data/ git would offer to commit: every one is a dvc.yaml output, which DVC
    lists in a .gitignore beside it as it records it (the .gitignore files themselves aside)."""
    r = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", "data"], cwd=root,
                       capture_output=True, text=True, check=True)
    return [ln[3:] for ln in r.stdout.splitlines() if not ln.endswith(".gitignore")]


def leftovers(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in (root / "data").rglob("*") if any(m in p.name for m in LEFTOVER)]


def training(root: Path) -> tuple[list, dict]:
    rows = [json.loads(ln) for ln in (root / "data/metrics/train.jsonl").read_text().splitlines() if ln.strip()]
    last = sorted((root / "data/checkpoints").glob("step-*"))[-1]
    files = checkpoint.read_manifest(last).files
    return [(r["step"], r["loss"], r["batches"]) for r in rows], {k: files[k].sha256 for k in ("model.pt", "optimizer.pt")}


def fired(lines: list[str]) -> list[str]:
    """The named kill points that fired, in order."""
    return [ln for ln in lines if "#" in ln and not ln.startswith("done ")]


def _kill(line: str) -> bool:
    return line == "kill timed" or bool(fired([line]))


def redone(ref: list[str], chaos: list[str], checkpoint_every: int) -> tuple[list[str], int]:
    """(problems, steps redone) from the two chaos logs. A resume may redo only what was in
    flight at the kill: no downloaded file, clean part, selection, token part, shard or checkpoint
    is made twice, and training restarts from the newest checkpoint written before the kill (so it
    redoes only the steps since, fewer than checkpoint_every + 1). The killed line must make no
    unit the unkilled one did not, and the same training steps."""
    problems = []
    units = Counter(ln for ln in chaos if ln.startswith("done ") and not ln.startswith("done train "))
    ref_units = Counter(ln for ln in ref if ln.startswith("done ") and not ln.startswith("done train "))
    problems += [f"{u[5:]}: made {n} times" for u, n in sorted(units.items()) if n > 1]
    if set(units) - set(ref_units):  # (a unit made durable just before a kill may miss its log line)
        problems.append(f"units the unkilled run never made: {sorted(set(units) - set(ref_units))[:5]}")
    steps = [ln for ln in chaos if ln.startswith("done train step ")]
    if {s for s in steps} != {s for s in ref if s.startswith("done train step ")}:
        problems.append("the killed line did not do the same training steps as the unkilled one")
    last_step = last_ckpt = 0
    pending = None  # (last step, newest checkpoint) at the latest kill not yet followed by a step
    redo = 0
    for ln in chaos:
        if _kill(ln):
            pending = (last_step, last_ckpt)
        elif ln.startswith("done checkpoint step-"):
            last_ckpt = int(ln.rsplit("-", 1)[1])
        elif ln.startswith("done train step "):
            step = int(ln.split()[3])
            # a kill between a checkpoint's rename and its done line: it was durable, just not logged
            unlogged = pending is not None and pending[1] < step - 1 <= pending[0] and \
                f"done checkpoint step-{step - 1:09d}" in ref
            if pending is not None:
                if step - 1 != pending[1] and not unlogged:
                    problems.append(f"after a kill at step {pending[0]} training went on from step {step - 1}, "
                                    f"not from the newest checkpoint, step {pending[1]}")
                redo += max(pending[0] - (step - 1), 0)
                pending = None
            last_step = step
    if redo > checkpoint_every * sum(map(_kill, chaos)):
        problems.append(f"{redo} steps redone: more than checkpoint_every per kill")
    return problems, redo
