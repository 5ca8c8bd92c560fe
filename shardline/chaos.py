"""Named kill points for crash tests: `point(name)` SIGKILLs this process when the
comma-separated env var SHARDLINE_CHAOS names it. An entry is `name` (first hit), `name#k`
(the k-th hit in this process) or a full name with a qualifier such as `checkpoint.files@20`.
SHARDLINE_CHAOS_LOG names a file that gets the point that fired. A real SIGKILL at an exact moment (mid-part, mid-checkpoint-write, mid-retention) that a test
or the chaos suite could not hit by timing alone, and that a seed can replay; a no-op costing
one env lookup otherwise.

Points: download.file, clean.part, clean.dedup, tokenize.part (token ids written, their .json
not yet), shard.file, train.step (+ @<step>:rank<r>, one rank of a torchrun job), train.eval
(after each held-out batch of an evaluation), checkpoint.files (+ @step), retention (+ @step).
"""

from __future__ import annotations

import os
import signal
from collections import Counter

_hits: Counter[str] = Counter()


def point(name: str, qualifier: str | None = None) -> None:
    spec = os.environ.get("SHARDLINE_CHAOS")
    if not spec:
        return
    _hits[name] += 1
    wanted = spec.split(",")
    if name in wanted or f"{name}#{_hits[name]}" in wanted or (qualifier and f"{name}@{qualifier}" in wanted):
        record = os.environ.get("SHARDLINE_CHAOS_LOG")  # which point fired, for the suite's table
        if record:
            with open(record, "a") as f:
                f.write(f"{name}#{_hits[name]}\n")
        os.kill(os.getpid(), signal.SIGKILL)
