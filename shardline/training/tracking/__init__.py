"""The trackers a run also reports to (params `log.backends`: TensorBoard, W&B, MLflow), off the
training loop's thread, holding exactly what data/metrics/train.jsonl holds.

Contract:
- `series(record)` is what a tracker gets of one step record: loss, learning rate, gradient norm,
  tokens/s, MFU, data wait and step time; the held-out eval, in total and per source, in loss and
  bits per byte; the guards' events (`guard/skip`, `guard/spike` on a flagged step,
  `guard/rollbacks` on the first step after one); eval.tasks' results (`downstream/<task>/<metric>`).
  A value train.jsonl holds as null (a skipped step's loss) is left out, never sent as NaN.
- `Trackers.open(rows, step)` starts every listed backend for this run (identity `tag`): `rows`
  are train.jsonl's records, already cut back to `step`, where training stands. Each backend
  makes its run hold exactly one value per step of `rows` and nothing past them (shardline.training.
  tracking.tensorboard, .wandb_run, .mlflow_run say how), so after a kill, a resume or a rollback
  the series a tracker shows equals train.jsonl. `step(record)` queues one record; `close()`
  sends what is queued and closes each backend, waiting at most log.close_timeout_s.
- Everything a backend does runs on one worker thread: a slow server never holds up a step. What
  each holds is recorded in .shardline/trackers/<tag>.json (atomic) after every flush (every
  log.flush_s, and at every checkpoint): the durable step and run id each backend resumes from.
- A backend that fails (a full disk, a server gone, its package missing) is dropped for the rest
  of the process with one line saying so; training goes on, train.jsonl keeps every step.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from pathlib import Path
from typing import Callable

from shardline.core import fsio
from shardline.core.config import Log as LogSection

Log = Callable[[str], None]
STEP = {"train/loss": "loss", "train/lr": "lr", "train/grad_norm": "grad_norm", "perf/tokens_per_s": "tokens_per_s",
        "perf/mfu": "mfu", "perf/data_wait_s": "data_wait_s", "perf/step_s": "step_s"}
EXTRA = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}  # backend -> its pip extra


def series(rec: dict) -> dict[str, float]:
    """One step record as a tracker gets it (names with a / group in every tracker's UI)."""
    out = {name: float(rec[k]) for name, k in STEP.items()
           if isinstance(rec.get(k), (int, float)) and math.isfinite(rec[k])}
    if rec.get("guard") in ("skip", "spike"):
        out[f"guard/{rec['guard']}"] = 1.0
    if rec.get("rollbacks"):
        out["guard/rollbacks"] = float(len(rec["rollbacks"]))
    ev = rec.get("eval")
    if ev:
        for k in ("loss", "bpb"):
            out[f"eval/{k}"] = float(ev["total"][k])
            out.update({f"eval/{src}/{k}": float(v[k]) for src, v in ev["sources"].items()})
        for task, metrics in (ev.get("tasks") or {}).items():  # eval.tasks: lm-eval's numbers
            out.update({f"downstream/{task}/{m}": float(v) for m, v in metrics.items()})
    return out


def run_config(lin: dict) -> dict:
    """The run's identity and lineage, as trackers take config: what it trained on and with what."""
    dv, params = lin["data_version"], lin["params"]
    return {"data_version": dv["shards_sha256"], "dvc_md5": dv["dvc_md5"], "tokenizer_sha256": dv["tokenizer_sha256"],
            "mix": lin["mix"], "clean_rules": lin["clean_rules"], "tokenizer": params["tokenizer"],
            "model": params["model"], "train": params["train"], "loader": params["loader"],
            "code_commit": lin["code"]["commit"], "code_dirty": lin["code"]["dirty"], "parent": lin["parent"],
            "init_from": (lin.get("init") or {}).get("from")}


def run_tags(lin: dict) -> dict[str, str]:
    """Short facts to filter runs by (W&B tags are <= 64 characters)."""
    dv = lin["data_version"]
    return {"data": (dv["shards_sha256"] or "")[:12], "code": (lin["code"]["commit"] or "none")[:10],
            "model": lin["params"]["model"].get("arch", "?"),
            "mix": ",".join(f"{k}={v:g}" for k, v in (lin["mix"] or {}).items())[:58]}


def _backend(name: str, cfg: LogSection, root: Path, run_name: str):
    if name == "tensorboard":
        from shardline.training.tracking.tensorboard import TensorBoard
        return TensorBoard(Path(root, cfg.dir), run_name)
    if name == "wandb":
        from shardline.training.tracking.wandb_run import WandB
        return WandB(Path(root, cfg.dir), run_name, cfg)
    from shardline.training.tracking.mlflow_run import MLflow
    return MLflow(Path(root, cfg.dir), run_name, cfg)


class Trackers:
    def __init__(self, cfg: LogSection, root: Path, state: Path, run_name: str, lin: dict, log: Log):
        self.cfg, self.root, self.path, self.run_name, self.lin, self.log = cfg, Path(root), state, run_name, lin, log
        self.live: dict = {}
        self.said: list[str] = []  # lines from the worker, said by the training thread (its log may not be thread-safe)
        self.q: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None
        self.flush_now = threading.Event()

    def open(self, rows: list[dict], step: int) -> None:
        if not self.cfg.backends:
            return
        self.thread = threading.Thread(target=self._work, args=(rows, step), name="shardline-trackers", daemon=True)
        self.thread.start()

    def step(self, rec: dict) -> None:
        if self.thread is not None:
            self.q.put((rec["step"], series(rec)))
            self._say()

    def flush(self) -> None:
        """At a checkpoint: have the worker flush and record what each backend holds."""
        self.flush_now.set()

    def close(self) -> None:
        if self.thread is None:
            return
        self.q.put(None)
        self.thread.join(self.cfg.close_timeout_s)
        if self.thread.is_alive():
            self.said.append(f"log: a tracker was still sending after log.close_timeout_s {self.cfg.close_timeout_s:g} s "
                             "(a slow or unreachable server?); left behind. train.jsonl holds every step.")
        self.thread = None
        self._say()

    def _say(self) -> None:
        while self.said:
            self.log(self.said.pop(0))

    # ---- the worker thread
    def _fail(self, name: str, e: BaseException) -> None:
        self.live.pop(name, None)
        hint = f" (pip install -e '.[{EXTRA[name]}]')" if isinstance(e, ImportError) else ""
        self.said.append(f"log: {name} failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}){hint}; "
                         "training goes on without it, train.jsonl holds every step")

    def _each(self, fn: Callable) -> None:
        for name, b in list(self.live.items()):
            try:
                fn(name, b)
            except Exception as e:  # a tracker never stops training
                self._fail(name, e)

    def _record(self, known: dict) -> None:
        fsio.write_json(self.path, {"run_name": self.run_name, "backends": known})

    def _work(self, rows: list[dict], step: int) -> None:
        known = fsio.read_json(self.path).get("backends", {}) if self.path.exists() else {}
        config, tags = run_config(self.lin), run_tags(self.lin)
        for name in self.cfg.backends:
            try:
                b = _backend(name, self.cfg, self.root, self.run_name)
                known[name] = b.open(known.get(name), step, [(r["step"], series(r)) for r in rows], config, tags)
                self.live[name] = b
            except Exception as e:
                self._fail(name, e)
        self._record(known)
        last_flush, done = time.monotonic(), False
        while not done:
            try:
                items = [self.q.get(timeout=0.5)]
            except queue.Empty:
                items = []
            while True:  # what queued while the last batch was sent goes out as one batch
                try:
                    items.append(self.q.get_nowait())
                except queue.Empty:
                    break
            done = None in items
            batch = [i for i in items if i is not None]
            if batch:
                self._each(lambda _, b: b.log(batch))
            if done or self.flush_now.is_set() or time.monotonic() - last_flush >= self.cfg.flush_s:
                self.flush_now.clear()
                self._each(lambda name, b: known.__setitem__(name, b.close() if done else b.flush()))
                last_flush = time.monotonic()
                self._record(known)
