"""train stage: a Llama or GPT-2 (shardline.model) on the shards, resumable bit-for-bit from any kill.

`run` is the stage; `_train` is the loop, over a run that shardline.training.session started (every
part built, resumed or fresh), until a rollback restarts it or the target step is reached.

Contract:
- Everything a resume needs is in the newest valid checkpoint: model, optimizer, GradScaler,
  RNG states, loader position, step, tokens seen, the guards' state (one dict of stateful parts,
  shardline.training.state, that the checkpointer saves and loads); plus, for a rollback decided
  after it, the ledger beside it. What can be derived is derived: the LR is a function of the
  step (shardline.training.schedule); the data order of (seed, mix, position); dropout is re-seeded every
  step from (train.seed, step, rank), so a resumed run draws exactly what the killed one would.
  On CPU with train.deterministic, a run killed any number of times ends bit-identical to one
  never killed (tests/integration/test_train.py).
- Resume compares the run's identity (shardline.training.identity: data version, mix, model, loader seed
  and batch geometry, the optimisation settings) with the newest checkpoint's: a change is
  refused, continued (train.allow_data_change, recorded in the lineage, with the parent judged
  on this run's held-out set as the "before") or starts a fresh model (train.fresh_on_data_change,
  or `new_run` from the orchestrator: an experiment), setting the old checkpoints aside first.
- Guards (shardline.training.guard), on values all-reduced over the ranks before each update: a
  non-finite loss or gradient norm skips the update; a spike or a run of skips rolls back (the
  ledger first, then a start like a resume's, which skips the trouble's batches), and past
  train.max_rollbacks training stops (Diverged). The gradient norm before clipping is recorded
  every step.
- Held-out eval (shardline.training.evaluate) every eval.every steps, at every checkpoint and the last
  step, after the update and before the step's record: it goes into that record, eval.json and
  the checkpoint's manifest. It touches no RNG stream: eval on or off, training is identical.
  Downstream tasks (eval.tasks, shardline.training.downstream) join it at the checkpoints
  eval.tasks_every names, under the same rule.
- Every saved checkpoint is hard-linked under .shardline/kept/<identity>/, so a checkout that
  replaces data/checkpoints never takes the only copy. The links go when the run ends under an
  orchestrator that records data/checkpoints right after (`recorded`: DVC commits it), when
  retention removes the checkpoint, or when a later start finds it `recoverable`.
- Under torchrun (RANK/WORLD_SIZE set, one node or many) ranks share each global batch (the
  loader's elastic slices); gradients are averaged by DDP or FSDP (train.strategy, see
  shardline.training.dist); checkpoints are written as train.checkpoint_format says
  (shardline.training.checkpointer: full, by rank 0; sharded, every rank its shards), metrics by
  global rank 0; everyone waits at a barrier. `train.nproc_per_node > 1` makes `run` relaunch
  itself under torchrun on this machine.
- Per step, data/metrics/train.jsonl gets tokens, step/data-wait/compute time, tokens/s, MFU
  (shardline.training.monitor); a resumed run first drops lines past its checkpoint.
- The network (shardline.training.network) is params.yaml's model, or train.init_from's: a fresh
  start from it loads its weights and evaluates it on the held-out set before the first step (the
  lineage's `init`). Activation checkpointing and torch.compile apply per block before the
  strategy wraps it; under fsdp, bf16 is FSDP's mixed precision instead of autocast.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
import shutil
import time
from typing import Callable

import torch

from shardline.context import RunContext
from shardline.core import chaos, fsio
from shardline.core.config import Params, Train
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.training import guard
from shardline.training.dist import Dist, grad_norm, relaunch_under_torchrun
from shardline.training.downstream import Downstream
from shardline.training.evaluate import compact, due
from shardline.training.guard import RolledBack, Trouble
from shardline.training.monitor import Monitor, read_records, summarize, write_derived
from shardline.training.resume import Origin
from shardline.training.schedule import lr_at
from shardline.training.session import start
from shardline.training.state import TrainState

Log = Callable[[str], None]


def step_seed(seed: int, step: int, rank: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}:{step}:{rank}".encode(), digest_size=8).digest(), "little")


def device_for(cfg: Train) -> torch.device:
    if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise BadInput("train.device: cuda requested but no CUDA device is available")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def run(params: Params, layout: Layout, ctx: RunContext = RunContext()) -> dict:
    """Train to this data version's start + train.steps, with what the orchestrator knows in `ctx`
    (shardline.context): `on_step(step, target)` reports progress; `new_run`: the orchestrator
    starts a new experiment, so a changed identity trains a fresh model (as
    train.fresh_on_data_change does) instead of being refused; `recoverable(checkpoint_dir)` says
    whether a checkpoint is kept elsewhere (then it is removed, not archived, to make room). Every
    checkpoint saved is also hard-linked under .shardline/kept/ until something records it:
    `recorded` says the orchestrator records data/checkpoints as this run ends (DVC's commit), so
    the links are dropped at a successful end; `recoverable` prunes them at the next start."""
    cfg = params.train
    if cfg.nproc_per_node > 1 and "LOCAL_RANK" not in os.environ:
        return relaunch_under_torchrun(params, layout, ctx)
    if cfg.deterministic:
        torch.use_deterministic_algorithms(True)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = device_for(cfg)
    dist = Dist(cfg, device, ctx.log)
    ctx = ctx if dist.rank == 0 else ctx.quiet()
    rolled_back = False
    while True:
        try:
            summary = _train(params, layout, ctx, device, dist, rolled_back)
            break
        except RolledBack:  # the ledger holds it: start again exactly as a resume after a kill would
            rolled_back, ctx = True, dataclasses.replace(ctx, new_run=False)
    dist.close()  # not on an exception: see Dist.close
    return summary


def _train(params: Params, layout: Layout, ctx: RunContext, device: torch.device, dist: Dist,
           rolled_back: bool) -> dict:
    session = start(params, layout, ctx, device, dist, rolled_back)
    cfg, log, kept, held = params.train, ctx.log, session.kept, session.held
    loader, model, net, opt, scaler, autocast = (session.loader, session.model, session.net, session.opt,
                                                 session.scaler, session.autocast)
    state, guards, checkpointer, monitor = session.state, session.guards, session.checkpointer, session.monitor
    target, ledger, pending, lin = session.target, session.ledger, session.pending, session.lin
    tokens_per_step = session.tokens_per_step
    downstream = Downstream.for_training(params, layout, session)  # eval.tasks, checked before a step trains
    batches = iter(loader)
    saved = []
    if state.step >= target:
        log(f"train: already at step {state.step} = this data version's start {state.version_start} + train.steps "
            f"{cfg.steps}: nothing to train (raise train.steps to continue)")
    while state.step < target:
        step, t0 = state.step, time.perf_counter()
        session.profiler.before(step + 1)
        skipped = [b for e in guard.skips_before(step, ledger) for b in e["batches"]]
        if skipped:  # replaying past a rollback: its batches are never trained on
            loader.skip(len(skipped))
            batches = iter(loader)
            log(f"train: step {step + 1}: skipping the {len(skipped)} batch(es) a rollback set aside")
        for group in opt.param_groups:
            group["lr"] = lr_at(step - state.version_start, cfg)
        torch.manual_seed(step_seed(cfg.seed, step, dist.rank))
        wait, total, hashes = 0.0, torch.zeros((), device=device), []
        for micro in range(cfg.grad_accum):
            tw = time.perf_counter()
            n = loader.batches_consumed + 1  # the global batch number, which faults are planted by
            x, y = next(batches)
            wait += time.perf_counter() - tw
            hashes.append(loader.last_batch)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with dist.grad_sync(net, last=micro == cfg.grad_accum - 1):
                with autocast:
                    _, loss = net(x, y)
                loss = chaos.planted(loss, n, dist.rank)
                loss = loss / cfg.grad_accum
                scaler.scale(loss).backward()
            if chaos.fault("train.inf_grad", n, dist.rank):
                grad = next(model.parameters()).grad  # under fsdp a DTensor: this rank's shard takes it
                (grad.to_local() if hasattr(grad, "to_local") else grad).view(-1)[0] = float("inf")
            total += loss.detach()
        scaler.unscale_(opt)
        norm, raw = grad_norm(model)
        # fp16: an inf gradient is GradScaler's overflow, which it skips and backs off from itself
        bad = ~torch.isfinite(total) | (~torch.isfinite(norm) & (not scaler.is_enabled()))
        shared = dist.all_sum(torch.stack([total, bad.float()]))  # one decision for every rank
        loss_value, finite = float(shared[0] / dist.world), float(shared[1]) == 0
        try:
            verdict = guards.judge(step + 1, loss_value, finite, hashes)
        except Trouble as t:
            checkpointer.wait()  # a checkpoint of the trouble being written is on disk (and then removed) first
            monitor.close()
            session.trackers.close()  # what they hold past the step rolled back to is dropped as they reopen
            session.profiler.after(step, end=True)
            guard.roll_back(t, checkpointer.store, kept, ledger, cfg, since=state.version_start, rank=dist.rank,
                            barrier=dist.barrier, log=log)
        if verdict != "skip":
            if cfg.grad_clip:
                torch.nn.utils.clip_grads_with_norm_(model.parameters(), cfg.grad_clip, raw)
            scaler.step(opt)
        else:
            log(f"train: step {step + 1}: non-finite {'loss' if not math.isfinite(loss_value) else 'gradient'}"
                f", skipped (no update; batches {', '.join(hashes)})")
        scaler.update()
        opt.zero_grad(set_to_none=True)
        state.step = step = step + 1
        state.tokens_seen += tokens_per_step
        dt = time.perf_counter() - t0
        # after the update, before the record: its time is not the step's (eval_s says what it cost)
        ev = compact(session.evaluate()) if held is not None and due(step, target, params) else None
        ev = downstream.at(step, target, ev)  # eval.tasks at their checkpoints, outside the training RNG
        extra = {"batches": hashes, "grad_norm": float(norm),  # consumed ids, auditable; norm before clipping
                 **({"guard": verdict} if verdict != "ok" else {}), **({"skipped_batches": skipped} if skipped else {}),
                 **({"rollbacks": pending} if pending else {}), **({"eval": ev} if ev else {})}
        pending = []
        session.trackers.step(monitor.step(step, loss=loss_value, lr=opt.param_groups[0]["lr"], data_wait_s=wait,
                                           compute_s=dt - wait, step_s=dt, extra=extra))
        session.profiler.after(step)
        chaos.done("train", f"step {step} rank {dist.rank}")
        chaos.point("train.step", f"{step}:rank{dist.rank}")  # e.g. train.step@3:rank1 kills one rank
        if ctx.on_step:
            ctx.on_step(step, target)
        if step % cfg.checkpoint_every == 0 or step == target:
            path = checkpointer.save(step, lin, ev, then=functools.partial(
                session.after_save, before=guards.run[0]["step"] if guards.run else None))
            session.trackers.flush()
            if path is not None:
                saved.append(path.name)
                lin = {**lin, "parent": path.name, "data_change": []}
            dist.barrier()
    if guards.run:
        log(f"train: the run ends inside {len(guards.run)} flagged step(s) (from step {guards.run[0]['step']}, "
            "fewer than a rollback needs): the last checkpoint holds them; raising train.steps may roll back "
            "before it")
    checkpointer.wait()  # the last checkpoint is on disk before the stage reports success
    session.profiler.after(state.step, end=True)
    if dist.rank == 0:  # a run killed inside its last retention, resumed with nothing to train, finishes it here
        session.retain(guards.run[0]["step"] if guards.run else None)
    if ctx.recorded and dist.rank == 0 and kept.exists():
        shutil.rmtree(kept)  # the orchestrator records data/checkpoints now: the links are not needed
    dist.barrier()
    monitor.close()
    session.trackers.close()
    return _summary(layout, dist, state, session.origin, saved, monitor, tokens_per_step)


def _summary(layout: Layout, dist: Dist, state: TrainState, origin: Origin, saved: list[str], monitor: Monitor,
             tokens_per_step: int) -> dict:
    summary = {"final_step": state.step, "tokens_seen": state.tokens_seen, "resumed_from": origin.parent,
               "checkpoints_saved": saved, "this_process": monitor.summary()}
    if dist.rank == 0:  # figures over every step on record (train.jsonl), not only this process's
        rows = read_records(layout.train_log)
        summary = {**summarize(rows, tokens_per_step), **summary}
        fsio.write_json(layout.train_summary, summary)
        write_derived(rows, layout.metrics)
    return summary
