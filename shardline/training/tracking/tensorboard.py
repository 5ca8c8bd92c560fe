"""TensorBoard: event files under <log.dir>/tensorboard/<run name>/, one per process that wrote.

Contract: `open(prior, step, rows, config, tags)` starts a writer whose first event tells every
reader (TensorBoard's own, and tensorboard's EventAccumulator in the tests) to drop what earlier
files hold at or past `durable + 1` (SummaryWriter's purge_step), where `durable` is the last step
known flushed before (the state on record), capped at `step`; then it writes `rows` past
`durable` again from train.jsonl. So whatever a killed or rolled-back process wrote past its last
flush, a reader sees each step once, as train.jsonl has it. `flush()` and `close()` return the
new durable step. The lineage goes in as a text summary at the step each process starts from.
"""

from __future__ import annotations

import json
from pathlib import Path

from shardline.core.layout import TENSORBOARD


class TensorBoard:
    def __init__(self, root: Path, run_name: str):
        self.dir = Path(root) / TENSORBOARD / run_name
        self.w, self.last = None, 0

    def open(self, prior: dict | None, step: int, rows: list, config: dict, tags: dict) -> dict:
        from torch.utils.tensorboard import SummaryWriter

        durable = min(int((prior or {}).get("durable", 0)), step)
        # flushes are ours (flush()): its own timer would make "durable" a guess
        self.w = SummaryWriter(str(self.dir), purge_step=durable + 1, max_queue=10**6, flush_secs=10**6)
        self.w.add_text("shardline/lineage", "```json\n" + json.dumps({**config, "tags": tags}, indent=1) + "\n```", step)
        self.last = durable
        self.log([r for r in rows if r[0] > durable])
        return self.flush()

    def log(self, batch: list) -> None:
        for s, metrics in batch:
            for k, v in metrics.items():
                self.w.add_scalar(k, v, s)
            self.last = s

    def flush(self) -> dict:
        self.w.flush()
        return {"durable": self.last}

    def close(self) -> dict:
        self.w.close()
        return {"durable": self.last}
