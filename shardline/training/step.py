"""One optimisation step: `Trainer.next_batch()` then `Trainer.train_step(batch) -> StepResult`.

Contract:
- `next_batch()` reads one global step's micro-batches from the loader (train.grad_accum of them),
  first skipping the batches a rollback set aside for this step (the guard's ledger); the time it
  waited is the step's data wait.
- `train_step(batch)` sets the step's learning rate (a function of the step: schedule.lr_at) and
  dropout seed (`step_seed(train.seed, step, rank)`), runs forward and backward per micro-batch
  under the strategy's gradient sync and autocast, unscales, takes the gradient norm before
  clipping, and shares one verdict over the ranks (the guard: `ok`, `skip` for a non-finite loss
  or gradient norm, or `Trouble` raised for a spike or a run of skips, before any update). It then
  clips, updates (unless skipped), zeroes the gradients and advances the step and token counters.
  It touches nothing else: evaluation, records, checkpoints and the rest are hooks
  (shardline.training.hooks) that see its `StepResult`.
- The order of operations, and so the weights, are those of the loop this replaced: on CPU with
  train.deterministic, bit-identical (tests/integration/test_trainer.py runs both).
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field

import torch

from shardline.core import chaos
from shardline.training import guard
from shardline.training.dist import grad_norm
from shardline.training.schedule import lr_at


def step_seed(seed: int, step: int, rank: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}:{step}:{rank}".encode(), digest_size=8).digest(), "little")


@dataclass
class Batch:
    """One global step's micro-batches: (global batch number, inputs, targets, content hash) each."""

    micro: list[tuple[int, torch.Tensor, torch.Tensor, str]]
    wait_s: float  # time spent waiting on the loader
    skipped: list[str] = field(default_factory=list)  # batches a rollback set aside, skipped before these

    @property
    def hashes(self) -> list[str]:
        return [h for _, _, _, h in self.micro]


@dataclass(frozen=True)
class StepResult:
    """What one step did, for the hooks."""

    step: int  # the step just taken (1-based: the number of updates so far, skipped ones included)
    loss: float  # the mean over ranks of the step's loss (micro-batches summed, as trained)
    grad_norm: float  # before clipping
    lr: float
    verdict: str  # the guard's: "ok", "skip" (no update) or a flagged step's label
    batches: list[str]  # consumed batches' hashes, auditable
    skipped: list[str]  # batches skipped before this step (a rollback's)
    data_wait_s: float
    step_s: float  # the whole step, data wait included


class Trainer:
    """The step of a started run (shardline.training.session.Session)."""

    def __init__(self, session):
        self.s = session
        self.cfg = session.params.train
        self._batches = iter(session.loader)

    def next_batch(self) -> Batch:
        s = self.s
        t0 = time.perf_counter()
        skipped = [b for e in guard.skips_before(s.state.step, s.ledger) for b in e["batches"]]
        if skipped:  # replaying past a rollback: its batches are never trained on
            s.loader.skip(len(skipped))
            self._batches = iter(s.loader)
            s.ctx.log(f"train: step {s.state.step + 1}: skipping the {len(skipped)} batch(es) a rollback set aside")
        micro = []
        for _ in range(self.cfg.grad_accum):
            n = s.loader.batches_consumed + 1  # the global batch number, which faults are planted by
            x, y = next(self._batches)
            micro.append((n, x, y, s.loader.last_batch))
        return Batch(micro, time.perf_counter() - t0, skipped)

    def train_step(self, batch: Batch) -> StepResult:
        s, cfg = self.s, self.cfg
        t0, step, rank = time.perf_counter(), s.state.step, s.dist.rank
        for group in s.opt.param_groups:
            group["lr"] = lr_at(step - s.state.version_start, cfg)
        torch.manual_seed(step_seed(cfg.seed, step, rank))
        total = torch.zeros((), device=s.device)
        for i, (n, x, y, _) in enumerate(batch.micro):
            x, y = x.to(s.device, non_blocking=True), y.to(s.device, non_blocking=True)
            with s.dist.grad_sync(s.net, last=i == len(batch.micro) - 1):
                with s.autocast:
                    _, loss = s.net(x, y)
                loss = chaos.planted(loss, n, rank)
                loss = loss / cfg.grad_accum
                s.scaler.scale(loss).backward()
            if chaos.fault("train.inf_grad", n, rank):
                grad = next(s.model.parameters()).grad  # under fsdp a DTensor: this rank's shard takes it
                (grad.to_local() if hasattr(grad, "to_local") else grad).view(-1)[0] = float("inf")
            total += loss.detach()
        s.scaler.unscale_(s.opt)
        norm, raw = grad_norm(s.model)
        # fp16: an inf gradient is GradScaler's overflow, which it skips and backs off from itself
        bad = ~torch.isfinite(total) | (~torch.isfinite(norm) & (not s.scaler.is_enabled()))
        shared = s.dist.all_sum(torch.stack([total, bad.float()]))  # one decision for every rank
        loss_value, finite = float(shared[0] / s.dist.world), float(shared[1]) == 0
        verdict = s.guards.judge(step + 1, loss_value, finite, batch.hashes)  # Trouble: a rollback, before any update
        if verdict != "skip":
            if cfg.grad_clip:
                torch.nn.utils.clip_grads_with_norm_(s.model.parameters(), cfg.grad_clip, raw)
            s.scaler.step(s.opt)
        else:
            s.ctx.log(f"train: step {step + 1}: non-finite {'loss' if not math.isfinite(loss_value) else 'gradient'}"
                      f", skipped (no update; batches {', '.join(batch.hashes)})")
        s.scaler.update()
        s.opt.zero_grad(set_to_none=True)
        s.state.step = step + 1
        s.state.tokens_seen += s.tokens_per_step
        return StepResult(step + 1, loss_value, float(norm), s.opt.param_groups[0]["lr"], verdict, batch.hashes,
                          batch.skipped, batch.wait_s, batch.wait_s + time.perf_counter() - t0)
