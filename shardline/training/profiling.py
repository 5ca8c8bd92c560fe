"""train.profile: a torch.profiler trace of chosen optimizer steps, for the step a run finds slow.

Contract: `StepProfiler(cfg, out, device, log)`; the loop calls `before(step)` as optimizer step
`step` (counted from 1, as train.jsonl counts) starts and `after(step)` once its record is
written, and `after(step, end=True)` where the run stops (its last step, a rollback). Steps start_step .. start_step + steps - 1 run inside one torch.profiler session (CPU
activity, CUDA too on a GPU; shapes and, with `memory`, allocations), so the trace holds their
data wait, forward, backward and update whole. It is written as Chrome trace JSON to
data/reports/profile/trace-<first>-<last>.json (chrome://tracing, https://ui.perfetto.dev), and
on a GPU with `memory` a CUDA memory snapshot beside it, memory-<first>-<last>.pickle
(https://pytorch.org/memory_viz); both through a temp file and a rename, so a kill leaves no half
trace. A run that resumes past start_step says so once and profiles nothing. Profiling changes no
bit of training: it is not part of a run's identity.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import torch

from shardline.core import fsio
from shardline.core.filenames import memory_snapshot, profile_trace
from shardline.core.sections_watch import Profile
from shardline.training.throughput import profile_command


def _promote(tmp: Path, final: Path) -> None:
    # torch writes the file itself, by name: make it durable, then give it its name
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)
    fsio.fsync_dir(final.parent)


class StepProfiler:
    def __init__(self, cfg: Profile | None, out: Path, device: torch.device, log: Callable[[str], None],
                 start: int):
        self.cfg, self.out, self.device, self.log, self.prof = cfg, Path(out), device, log, None
        if cfg is not None and start >= cfg.start_step:
            log(f"train.profile: step {cfg.start_step} is behind where this run starts (step {start + 1}): nothing "
                f"is profiled; a start_step ahead of it is (`{profile_command(start + 1, cfg.steps)}`)")
            self.cfg = None

    @property
    def last(self) -> int:
        return self.cfg.start_step + self.cfg.steps - 1

    def before(self, step: int) -> None:
        if self.cfg is None or step != self.cfg.start_step:
            return
        acts = [torch.profiler.ProfilerActivity.CPU]
        if self.device.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
            if self.cfg.memory:
                torch.cuda.memory._record_memory_history(max_entries=100_000)
        self.prof = torch.profiler.profile(activities=acts, record_shapes=True, profile_memory=self.cfg.memory)
        self.prof.__enter__()

    def after(self, step: int, end: bool = False) -> None:
        """`end`: the run stops here (its last step, or a rollback): what was profiled is written."""
        if self.prof is None or (step != self.last and not end):
            return
        self.prof.__exit__(None, None, None)
        self.out.mkdir(parents=True, exist_ok=True)
        first = self.cfg.start_step
        path = profile_trace(self.out, first, step)
        tmp = fsio.temp_name(path)
        self.prof.export_chrome_trace(str(tmp))
        _promote(tmp, path)
        wrote = [path.name]
        if self.device.type == "cuda" and self.cfg.memory:
            snap = memory_snapshot(self.out, first, step)
            tmp = fsio.temp_name(snap)
            torch.cuda.memory._dump_snapshot(str(tmp))
            torch.cuda.memory._record_memory_history(enabled=None)
            _promote(tmp, snap)
            wrote.append(snap.name)
        self.prof = None
        self.log(f"train.profile: steps {first}-{step} profiled: {', '.join(str(self.out / w) for w in wrote)} "
                 "(open the trace in https://ui.perfetto.dev or chrome://tracing)")
