"""The trackers' own process: every backend (TensorBoard, W&B, MLflow) runs here, never in training.

Contract:
- Started by `Trackers.open` as `python -m shardline.training.tracking.child <parent pid>`, with
  pipes for stdin and stdout and the parent's stderr. Before anything else it drops to the lowest
  CPU priority (SCHED_IDLE on Linux, else nice 19; what it starts, wandb-core, inherits it), so
  its imports and stores only ever take CPU time training leaves idle.
- It never outlives its parent: on Linux the kernel kills it when the parent thread that started
  it ends (PR_SET_PDEATHSIG), and stdin's end without a "close" ends it at once, flushing and
  recording nothing, as a killed process would. A resumed run starts a new child on the same
  tracker files; two writers would break exactly one value per step.
- In, pickled on stdin: ("open", cfg, root, state_path, run_name, lineage, rows, step), rows as
  [(step, series)], then any of ("batch", [(step, series), ...]), ("flush",), ("close",). On
  "close" it closes every backend, records and exits 0.
- Out, on stdout, one per line: the lines the parent says ("log: <backend> failed ..."). A
  backend's own prints go to stderr. What each backend holds is recorded in the state file
  (atomic) after opening and after every flush and close.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys
from pathlib import Path
from typing import Callable, TextIO

from shardline.core import fsio  # light (as is the package): what is heavy loads after serve() lowers itself
from shardline.training.tracking import _backend, run_config, run_tags

PR_SET_PDEATHSIG = 1


def lower_priority() -> None:
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux (or a kernel without SCHED_IDLE)
        try:
            os.nice(19)
        except OSError:
            pass


def die_with(parent: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: stdin's end is the only sign the parent is gone
        pass
    if os.getppid() != parent:  # it died before the line above could take effect
        os._exit(0)


class Worker:
    def __init__(self, out: TextIO, cfg, state: Path, run_name: str):
        self.out, self.cfg, self.path, self.run_name = out, cfg, Path(state), run_name
        self.live: dict = {}
        self.known: dict = {}

    def say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def fail(self, name: str, e: BaseException) -> None:
        self.live.pop(name, None)
        self.say(f"log: {name} failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                 "training goes on without it, train.jsonl holds every step")

    def each(self, fn: Callable) -> None:
        for name, b in list(self.live.items()):
            try:
                fn(name, b)
            except Exception as e:  # a tracker never stops training, nor the others
                self.fail(name, e)

    def record(self) -> None:
        fsio.write_json(self.path, {"run_name": self.run_name, "backends": self.known})

    def recorded(self, root: Path) -> dict:
        """What each backend recorded when it last flushed; {} for a state file emptied, cut short or of
        another shape, said in one line: each tracker then writes its run again from train.jsonl, which
        holds every step (TensorBoard purges from step 1, W&B and MLflow start a run that supersedes it)."""
        if not self.path.exists():
            return {}
        try:
            value = fsio.read_json(self.path)
        except (OSError, ValueError):
            value = None
        backends = value.get("backends") if isinstance(value, dict) else None
        if isinstance(backends, dict) and all(v is None or isinstance(v, dict) for v in backends.values()):
            return backends
        shown = self.path.relative_to(root) if self.path.is_relative_to(root) else self.path
        self.say(f"log: {shown} is damaged (not the trackers' state); each tracker writes its run again from "
                 "train.jsonl")
        return {}

    def open(self, root: Path, lin, rows: list, step: int) -> None:  # lin: a records.Lineage (light to unpickle)
        self.known = self.recorded(Path(root))
        config, tags = run_config(lin), run_tags(lin)
        for name in self.cfg.backends:
            try:
                b = _backend(name, self.cfg, root, self.run_name, self.path.stem)
                self.known[name] = b.open(self.known.get(name), step, rows, config, tags)
                self.live[name] = b
            except Exception as e:
                self.fail(name, e)
        self.record()

    def flush(self, done: bool) -> None:
        self.each(lambda name, b: self.known.__setitem__(name, b.close() if done else b.flush()))
        self.record()


def serve(parent: int) -> None:
    lower_priority()
    die_with(parent)
    # Ctrl-C reaches the whole process group: the parent decides what the trackers do, not the key
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # a backend that prints must not corrupt the lines the parent reads
    inp, worker = sys.stdin.buffer, None
    while True:
        try:
            msg = pickle.load(inp)
        except Exception:  # the pipe ended (or broke mid-message) without "close": the parent was killed
            os._exit(0)
        if msg[0] == "open":
            _, cfg, root, state, run_name, lin, rows, step = msg
            worker = Worker(out, cfg, state, run_name)
            worker.open(root, lin, rows, step)
        elif worker is None:
            continue
        elif msg[0] == "batch":
            worker.each(lambda _, b: b.log(msg[1]))
        elif msg[0] == "flush":
            worker.flush(done=False)
        elif msg[0] == "close":
            worker.flush(done=True)
            out.close()
            sys.exit(0)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
