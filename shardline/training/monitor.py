"""Training throughput monitor: one JSON line per step, slow-step diagnosis, a progress line.

Contract:
- `step(step, ...)` is called once per optimizer step; `step` counts the steps the run has
  completed, this one included (1 for the first step of a fresh run; a run resumed after k
  steps passes start_step=k and continues at k+1). It returns the record and appends it as one
  JSON line to `path` (append mode, flushed per line). Earlier lines are never rewritten:
  truncating the log back to a checkpoint on resume is the trainer's job.
- Record: step, loss, lr, tokens (seen by the run through this step: step * tokens_per_step),
  step_s, data_wait_s, compute_s, tokens_per_s, mfu, gpu_util (NVML percent; None off CUDA or
  without NVML), slow (None, "input-bound" or "compute-bound"), plus what the caller passes in
  `extra` (the batch hashes; grad_norm, before clipping; `guard`: "skip" or "spike" when the
  training guards flagged the step; `skipped_batches` a rollback set aside before it; `rollbacks`,
  on the first step after one; `eval`, the held-out evaluation done at this step, with its downstream
  `tasks` where they ran, timed apart from step_s). Non-finite floats are written as null, nested
  ones too, so every line is strict JSON.
- MFU = flops_per_token * tokens_per_s / peak_flops. tokens_per_step and peak_flops must
  describe the same hardware (one rank, or the whole job). Without peak_flops it is an
  *estimate*: dense bf16 datasheet peak by CUDA device name (fallback: A100's), or on CPU
  cores * 2.5 GHz * 16 fp32 FLOP/cycle.
- Slow step: step_s > slow_factor x the median of the previous `window` step times, once at
  least 5 are known. Its cause is whichever of data_wait_s / compute_s exceeds its own rolling
  median by more (ties: input-bound); each slow step is logged once via `log`, with numbers.
- progress (default: stderr is a TTY): a one-line bar on stderr (step/total, tokens/s, loss,
  the latest val loss, ETA from the rolling median). Otherwise a line via `log` about every 10%
  of total_steps. Every eval also gets a line of its own (val loss per source).
- `summary()` covers the steps seen by this process (throughput.py's figures). Nothing here raises
  for lack of a GPU.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from shardline.training.steplog import own_mix
from shardline.training.throughput import Seen, clean, profile_command

if TYPE_CHECKING:  # imported where a device is asked about: the report reads records without torch
    import torch


MIN_KNOWN = 5  # fewer step times than this give a median too noisy to call anything slow

# Dense bf16 tensor-core peaks (FLOP/s, no sparsity) from vendor datasheets; longest name first
# so "L40S" wins over "L4" and "A100" over "A10". Clocks, PCIe vs SXM and dtype all move them.
_GPU_PEAK = sorted({
    "H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L40": 181e12, "L4": 121e12,
    "A10": 125e12, "V100": 125e12, "T4": 65e12, "4090": 165e12, "3090": 71e12,
}.items(), key=lambda kv: -len(kv[0]))
_GPU_FALLBACK = 312e12


def guess_peak_flops(device: torch.device) -> float:
    """This rank's share of its device's peak fp32/bf16 FLOP/s, for MFU (an estimate).
    CPU: the cores of this machine split over the ranks torchrun put on it (LOCAL_WORLD_SIZE),
    at 2.5 GHz and 32 FLOP/cycle with two FMA units of AVX2/AVX-512 (16 without FMA)."""
    import torch

    if device.type == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name(device).upper()
        return next((peak for key, peak in _GPU_PEAK if key in name), _GPU_FALLBACK)
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    per_cycle = 32 if ("fma" in flags and ("avx2" in flags or "avx512f" in flags)) else 16
    cores = (os.cpu_count() or 1) / max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return cores * 2.5e9 * per_cycle


def _gpu_util_reader(device: torch.device) -> Callable[[], float] | None:
    """A probed zero-argument reader of GPU utilisation, or None when there is no way to read it."""
    import torch

    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    try:
        idx = device.index if device.index is not None else torch.cuda.current_device()
    except Exception:
        return None
    try:
        # torch maps the index through CUDA_VISIBLE_DEVICES to NVML's numbering; prefer it.
        torch.cuda.utilization(idx)
        return lambda: float(torch.cuda.utilization(idx))
    except Exception:
        pass
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(idx)
        pynvml.nvmlDeviceGetUtilizationRates(handle)
        return lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except Exception:
        return None


def _hms(seconds: float) -> str:
    s = int(max(0.0, seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class Monitor:
    def __init__(self, path: Path | None, *, tokens_per_step: int, flops_per_token: float, total_steps: int,
                 start_step: int = 0, peak_flops: float | None = None, slow_factor: float = 3.0, window: int = 50,
                 log: Callable[[str], None] = print, progress: bool | None = None,
                 device: torch.device | None = None):
        import torch

        device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.tokens_per_step, self.flops_per_token = tokens_per_step, flops_per_token
        self.total_steps, self.start_step = total_steps, start_step
        self.peak_flops = peak_flops or guess_peak_flops(device)
        self.slow_factor, self.log = slow_factor, log
        self.progress = sys.stderr.isatty() if progress is None else progress
        self._gpu_util = _gpu_util_reader(device)
        self._recent = {k: deque(maxlen=window) for k in ("step_s", "data_wait_s", "compute_s")}
        self._seen, self._slow = Seen(), []  # what the summary needs of each record (not the records), the slow steps
        self._every = max(1, math.ceil(total_steps / 10))
        self._last_draw, self._file = 0.0, None
        self._val: float | None = None  # the latest held-out loss (total), for the progress line
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")

    def step(self, step: int, *, loss: float, lr: float, data_wait_s: float, compute_s: float,
             step_s: float, extra: dict | None = None) -> dict:
        tps = self.tokens_per_step / step_s if step_s > 0 else float("nan")
        rec = {"step": step, "loss": float(loss), "lr": float(lr), "tokens": step * self.tokens_per_step,
               "step_s": step_s, "data_wait_s": data_wait_s, "compute_s": compute_s, "tokens_per_s": tps,
               "mfu": self.flops_per_token * tps / self.peak_flops, "gpu_util": self._read_gpu_util(),
               "slow": None, **(extra or {})}
        # Judge against the steps before this one: a slow step must not raise its own bar.
        if len(self._recent["step_s"]) >= MIN_KNOWN:
            med = {k: statistics.median(d) for k, d in self._recent.items()}
            if 0 < self.slow_factor * med["step_s"] < step_s:
                data_excess, compute_excess = data_wait_s - med["data_wait_s"], compute_s - med["compute_s"]
                rec["slow"] = "input-bound" if data_excess >= compute_excess else "compute-bound"
                self._slow.append({"step": step, "cause": rec["slow"], "step_s": step_s, "median_s": med["step_s"]})
                self._say(f"step {step}: slow step {step_s:.3f}s = {step_s / med['step_s']:.1f}x the median "
                          f"{med['step_s']:.3f}s, {rec['slow']} (data wait {data_wait_s:.3f}s vs median "
                          f"{med['data_wait_s']:.3f}s; compute {compute_s:.3f}s vs median {med['compute_s']:.3f}s); "
                          f"to profile it: `{profile_command(step)}`")
        for k in self._recent:
            self._recent[k].append(rec[k])
        self._seen.add(rec)
        if rec.get("eval"):  # beside the training loss: weighted as its batches are, by this run's mix
            self._val = own_mix(rec["eval"])["loss"]
        if self._file is not None:
            self._file.write(json.dumps({k: clean(v) for k, v in rec.items()}) + "\n")
            self._file.flush()
        self._report(rec)
        return rec

    def _read_gpu_util(self) -> float | None:
        if self._gpu_util is None:
            return None
        try:
            return self._gpu_util()
        except Exception:
            self._gpu_util = None  # NVML went away mid-run: stop asking rather than fail training
            return None

    def _eta(self, step: int) -> str:
        return _hms((self.total_steps - step) * statistics.median(self._recent["step_s"]))

    def _say(self, msg: str) -> None:
        if self.progress:  # clear the bar so the message is not glued onto it
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
        self.log(msg)

    def _report(self, rec: dict) -> None:
        step, last = rec["step"], rec["step"] >= self.total_steps
        if rec.get("eval"):  # every eval gets a line of its own, per source
            per = ", ".join(f"{n} {v['loss']:.4f}" + (f" ±{(v['loss_ci'][1] - v['loss_ci'][0]) / 2:.3f} over "
                                                     f"{v['docs']} docs" if "loss_ci" in v else "")
                            for n, v in rec["eval"]["sources"].items())
            self._say(f"step {step}: val loss {self._val:.4f} by this run's mix ({per}; eval "
                      f"{rec['eval']['eval_s']:.2f}s)")
        if self.progress:
            now = time.monotonic()
            if now - self._last_draw < 0.1 and not last:
                return  # redrawing faster than the eye reads only costs the training loop time
            self._last_draw = now
            frac = min(1.0, step / max(1, self.total_steps))
            bar = "#" * int(frac * 20)
            sys.stderr.write(f"\r[{bar:<20}] {step}/{self.total_steps} | {rec['tokens_per_s']:,.0f} tok/s"
                             f" | loss {rec['loss']:.4f}{self._val_text()} | eta {self._eta(step)}\033[K")
            sys.stderr.flush()
        elif step % self._every == 0 or last:
            self.log(f"step {step}/{self.total_steps} ({100 * step / max(1, self.total_steps):.0f}%) | "
                     f"loss {rec['loss']:.4f}{self._val_text()} | {rec['tokens_per_s']:,.0f} tok/s | "
                     f"mfu {rec['mfu']:.2%} | eta {self._eta(step)}")

    def _val_text(self) -> str:
        return "" if self._val is None else f" | val {self._val:.4f}"

    def summary(self) -> dict:
        """Over the steps this process ran."""
        return {**self._seen.summary(self.tokens_per_step), "slow_steps": list(self._slow)}

    def close(self) -> None:
        if self.progress and len(self._seen):
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.progress = False  # the bar is finished; a second close must not add a line
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "Monitor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
