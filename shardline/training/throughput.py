"""A run's steps summed: the throughput figures of data/metrics/train.json and the evidence card,
and the slow steps as both the card and the train stage's last line say them.

Contract: `summarize(records, tokens_per_step)` gives steps, tokens, median_tokens_per_s,
p95_step_s, data_wait_pct, mean_mfu, slow_steps, skipped_steps, rollbacks and last_loss over step
records (this process's, or a whole train.jsonl); `Seen` keeps what it needs of each record (24
bytes a step, not the record) and gives the same figures, figure for figure. `slow_steps` is the
slow steps' lines (count by cause, the slowest with `profile_command`, the command that profiles
it), `slowest` that step. `clean` makes a record strict JSON (non-finite floats as null). No torch.
"""

from __future__ import annotations

import math
import statistics
from array import array

import numpy as np

from shardline.training.steplog import median_tokens_per_s


def profile_command(step: int, steps: int = 3) -> str:
    """The command that profiles `step` and the steps after it (train.profile) when training reaches them.
    One -S of the whole mapping, quoted: train.profile ships null, on which DVC refuses a -S of one
    of its keys, and the shell would expand the braces."""
    return f"dvc exp run -S 'train.profile={{start_step:{step},steps:{steps}}}'"


def clean(v):
    """`v` with every non-finite float (nested ones too) as None: strict JSON."""
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return None if isinstance(v, float) and not math.isfinite(v) else v


class Seen:
    """The steps a process ran, as `summarize` reads them, in 24 bytes a step: a week-long run kept
    every record (about 1 KB each, its batch hashes and evals included) and its memory grew with the
    steps (bench.soak: +5% over 50,000 steps). The rare events (slow, skipped, rolled back) as lists."""

    def __init__(self):
        self.step_s, self.tokens_per_s, self.data_wait_s = array("d"), array("d"), array("d")
        self.mfus = array("d")
        self.slow, self.skipped, self.rollbacks, self.last_loss = [], [], [], None

    def add(self, rec: dict) -> None:
        self.step_s.append(rec["step_s"])
        self.tokens_per_s.append(rec["tokens_per_s"])
        self.data_wait_s.append(rec["data_wait_s"])
        if rec.get("mfu") is not None and math.isfinite(rec["mfu"]):
            self.mfus.append(rec["mfu"])
        if rec.get("slow"):
            self.slow.append({"step": rec["step"], "cause": rec["slow"]})
        if rec.get("guard") == "skip":
            self.skipped.append(rec["step"])
        self.rollbacks += rec.get("rollbacks", [])
        self.last_loss = rec["loss"]

    def __len__(self) -> int:
        return len(self.step_s)

    def summary(self, tokens_per_step: int) -> dict:
        """What `summarize` gives for the same records, figure for figure."""
        n, total = len(self), sum(self.step_s)
        return {"steps": n, "tokens": n * tokens_per_step,
                "median_tokens_per_s": statistics.median(self.tokens_per_s) if n else None,
                "p95_step_s": float(np.percentile(self.step_s, 95)) if n else None,
                "data_wait_pct": 100.0 * sum(self.data_wait_s) / total if total > 0 else None,
                "mean_mfu": sum(self.mfus) / len(self.mfus) if self.mfus else None,
                "slow_steps": list(self.slow), "skipped_steps": list(self.skipped), "rollbacks": list(self.rollbacks),
                "last_loss": clean(self.last_loss) if n else None}


def summarize(records: list[dict], tokens_per_step: int) -> dict:
    """Throughput figures over step records (this process's, or a whole train.jsonl)."""
    step_s = [r["step_s"] for r in records]
    mfus = [r["mfu"] for r in records if r.get("mfu") is not None and math.isfinite(r["mfu"])]
    total = sum(step_s)
    return {
        "steps": len(records),
        "tokens": len(records) * tokens_per_step,
        "median_tokens_per_s": median_tokens_per_s(records),
        "p95_step_s": float(np.percentile(step_s, 95)) if records else None,  # linear interpolation
        "data_wait_pct": 100.0 * sum(r["data_wait_s"] for r in records) / total if total > 0 else None,
        "mean_mfu": sum(mfus) / len(mfus) if mfus else None,
        "slow_steps": [{"step": r["step"], "cause": r["slow"]} for r in records if r.get("slow")],
        "skipped_steps": [r["step"] for r in records if r.get("guard") == "skip"],  # non-finite: no update
        "rollbacks": [e for r in records for e in r.get("rollbacks", [])],
        "last_loss": clean(records[-1]["loss"]) if records else None,  # NaN (a skipped step) is not JSON
    }


def slow_steps(records: list[dict]) -> list[str]:
    """The slow steps on record, as the evidence card and the train stage's last line both say
    them: their count by cause, then the slowest (the longest step_s among them) with the command
    that profiles it. One computation: the card and the log once named different steps."""
    slow = [r for r in records if r.get("slow")]
    causes = {c: sum(r["slow"] == c for r in slow) for c in ("input-bound", "compute-bound")}
    lines = [f"slow steps: {len(slow)} ({causes['input-bound']} input-bound, {causes['compute-bound']} compute-bound)"]
    worst = slowest(records)
    if worst:
        lines.append(f"the slowest, step {worst['step']} ({worst['step_s']:.3f} s, {worst['slow']}): profile it where "
                     f"training next reaches it with `{profile_command(worst['step'])}` (train.profile)")
    return lines


def slowest(records: list[dict]) -> dict | None:
    """The slowest of the slow steps (the longest step_s among those flagged); None: none flagged."""
    return max((r for r in records if r.get("slow")), key=lambda r: r["step_s"], default=None)
