"""The trackers a run also reports to (params `log.backends`: TensorBoard, W&B, MLflow), in a
process of their own, holding exactly what data/metrics/train.jsonl holds.

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
  sends what is queued and closes each backend, waiting at most log.close_timeout_s (then the
  child is killed: a rollback's re-open never overlaps two writers).
- Everything a backend does runs in one child process (shardline.training.tracking.child) at the
  lowest CPU priority: their Python (MLflow's store, W&B, TensorBoard, and their imports) would
  otherwise hold the GIL and take a core training needs, and a slow server never holds up a step.
  Training only queues each step's series; a feeder thread pickles them into the child's stdin.
  The child dies with the training process (killed with it, never a second writer after a
  resume). It records what each backend holds in .shardline/trackers/<tag>.json (atomic) after
  every flush (every log.flush_s, and at every checkpoint): the durable step and run id each
  backend resumes from.
- A plug-in's tracker (a name of the "shardline.trackers" entry points, docs/extending.md) is made
  by the callable its entry point names, with (log.dir as a Path, the run name, the log section),
  and answers as the built-in ones do: open(prior, step, rows, config, tags), log(batch), flush()
  and close(), the three returning what it records of itself (the `prior` of its next open).
- A backend whose package is not installed stops the train stage before it starts, with one
  line naming the extra (shardline.core.extras, checked by the stage's dispatch). One that fails
  later (a full disk, a server gone) is dropped for the rest of the process with one line saying
  so, as is the child ending; training goes on, train.jsonl keeps every step. Lines are said by
  the training thread (its log may not be thread-safe).
"""

from __future__ import annotations

import math
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from shardline.core import extras, plugins  # light, as the child needs (importlib only)

if TYPE_CHECKING:  # not at run time: the child imports this package before it lowers its priority
    from shardline.core.config import Log as LogSection
    from shardline.training.records import Lineage

Log = Callable[[str], None]
STEP = {"train/loss": "loss", "train/lr": "lr", "train/grad_norm": "grad_norm", "perf/tokens_per_s": "tokens_per_s",
        "perf/mfu": "mfu", "perf/data_wait_s": "data_wait_s", "perf/step_s": "step_s"}


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


def run_config(lin: Lineage) -> dict:
    """The run's identity and lineage, as trackers take config: what it trained on and with what."""
    dv, params = lin.data_version, lin.params
    return {"data_version": dv.shards_sha256, "dvc_md5": dv.dvc_md5, "tokenizer_sha256": dv.tokenizer_sha256,
            "mix": lin.mix, "clean_rules": lin.clean_rules, "tokenizer": params["tokenizer"],
            "model": params["model"], "train": params["train"], "loader": params["loader"],
            "code_commit": lin.code.commit, "code_dirty": lin.code.dirty, "parent": lin.parent,
            "init_from": lin.init.source if lin.init else None}


def run_tags(lin: Lineage) -> dict[str, str]:
    """Short facts to filter runs by (W&B tags are <= 64 characters)."""
    return {"data": lin.data_version.shards_sha256[:12], "code": (lin.code.commit or "none")[:10],
            "model": lin.params["model"].get("arch", "?"),
            "mix": ",".join(f"{k}={v:g}" for k, v in (lin.mix or {}).items())[:58]}


def _backend(name: str, cfg: LogSection, root: Path, run_name: str, key: str):
    """`key`: the run's identity (its state file's name), for a backend that must tell its runs apart."""
    if name not in extras.TRACKERS:  # a plug-in's (docs/extending.md): made as the built-in ones are
        return plugins.load("trackers", name)(Path(root, cfg.dir), run_name, cfg)
    extras.need(extras.TRACKERS[name], f"log.backends {name}")
    if name == "tensorboard":
        from shardline.training.tracking.tensorboard import TensorBoard
        return TensorBoard(Path(root, cfg.dir), run_name)
    if name == "wandb":
        from shardline.training.tracking.wandb_run import WandB
        return WandB(Path(root, cfg.dir), run_name, cfg)
    from shardline.training.tracking.mlflow_run import MLflow
    return MLflow(Path(root, cfg.dir), run_name, cfg, key)


class Trackers:
    def __init__(self, cfg: LogSection, root: Path, state: Path, run_name: str, lin: Lineage, log: Log):
        self.cfg, self.root, self.path, self.run_name, self.lin, self.log = cfg, Path(root), state, run_name, lin, log
        self.said: list[str] = []  # lines from the child and the feeder, said by the training thread
        self.q: queue.Queue = queue.Queue()  # unbounded: training never waits on a full pipe, the feeder does
        self.proc: subprocess.Popen | None = None
        self.feeder: threading.Thread | None = None
        self.reader: threading.Thread | None = None
        self.flush_now = threading.Event()
        self.stopped = False  # the child is gone (or being stopped): nothing more is sent
        self.lock = threading.Lock()  # the feeder and close() may both see the child end: said once

    def open(self, rows: list[dict], step: int) -> None:
        if not self.cfg.backends:
            return
        # from this (the training) thread: the child's PR_SET_PDEATHSIG fires when the thread that
        # started it ends, and this one lasts as long as the process
        self.proc = subprocess.Popen([sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-m",
                                      "shardline.training.tracking.child", str(os.getpid())],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.reader = threading.Thread(target=self._read, args=(self.proc,), name="shardline-trackers-said",
                                       daemon=True)
        self.feeder = threading.Thread(target=self._feed, args=(self.proc, rows, step), name="shardline-trackers",
                                       daemon=True)
        self.reader.start()
        self.feeder.start()

    def step(self, rec: dict) -> None:
        if self.proc is not None:
            self.q.put((rec["step"], series(rec)))
            self._say()

    def flush(self) -> None:
        """At a checkpoint: have the child flush and record what each backend holds."""
        self.flush_now.set()

    def close(self) -> None:
        if self.proc is None:
            return
        proc, deadline = self.proc, time.monotonic() + self.cfg.close_timeout_s
        self.q.put(None)
        self.feeder.join(self.cfg.close_timeout_s)
        try:
            code = proc.wait(max(0.0, deadline - time.monotonic()))
            if code:  # it ended by itself, not cleanly; said once (the feeder may have seen it first)
                self._ended(proc)
        except subprocess.TimeoutExpired:
            with self.lock:
                self.stopped = True
            self.said.append(f"log: a tracker was still sending after log.close_timeout_s {self.cfg.close_timeout_s:g} "
                             "s (a slow or unreachable server?); stopped. train.jsonl holds every step.")
            # a rollback opens new trackers next: two children must never write the same files
            proc.kill()
            proc.wait()
        self.feeder.join(5)
        self.reader.join(5)  # the child's last lines
        self.proc = None
        self._say()

    def _say(self) -> None:
        while self.said:
            self.log(self.said.pop(0))

    # ---- the feeder and reader threads
    def _ended(self, proc: subprocess.Popen) -> None:
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
        try:
            code = proc.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        self.said.append(f"log: the trackers' process ended (exit {code}); training goes on, "
                         "train.jsonl holds every step")

    def _send(self, proc: subprocess.Popen, msg: tuple) -> None:
        if self.stopped:
            return
        try:
            pickle.dump(msg, proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            proc.stdin.flush()
        except (OSError, ValueError):  # BrokenPipeError: the child died
            self._ended(proc)

    def _feed(self, proc: subprocess.Popen, rows: list[dict], step: int) -> None:
        self._send(proc, ("open", self.cfg, self.root, self.path, self.run_name, self.lin,
                          [(r["step"], series(r)) for r in rows], step))
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
                self._send(proc, ("batch", batch))
            if done:
                self._send(proc, ("close",))
            elif self.flush_now.is_set() or time.monotonic() - last_flush >= self.cfg.flush_s:
                self.flush_now.clear()
                self._send(proc, ("flush",))
                last_flush = time.monotonic()
        try:
            proc.stdin.close()
        except OSError:
            pass

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.said.append(line.decode("utf-8", "replace").rstrip("\n"))
