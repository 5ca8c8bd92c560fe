"""train stage: a Llama or GPT-2 (shardline.model) on the shards, resumable bit-for-bit from any kill.

`run` is the stage; `_train` is the loop, over a run that shardline.training.session started (every
part built, resumed or fresh), until a rollback restarts it or the target step is reached. A step is
shardline.training.step's `train_step(batch) -> StepResult`; everything around it (held-out eval,
records and trackers, the profiler, chaos points and progress, checkpoints) is a hook
(shardline.training.hooks), closed on the one way out of the loop. A caller adds its own through
RunContext.hooks.

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
import os
from typing import Callable

import torch

from shardline.context import RunContext
from shardline.core import fsio
from shardline.core.config import Params, Train
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.training import guard, hooks
from shardline.training.dist import Dist, relaunch_under_torchrun
from shardline.training.guard import RolledBack, Trouble
from shardline.training.monitor import Monitor
from shardline.training.throughput import slow_steps, summarize
from shardline.training.steplog import read_records, write_derived
from shardline.training.resume import Origin
from shardline.training.session import start
from shardline.training.state import TrainState
from shardline.training.step import Trainer

Log = Callable[[str], None]


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
        except Exception as e:  # a collective that failed: one line, not gloo's fifty (its traceback kept)
            if (lost := dist.lost_peers(e, layout)) is None:
                raise
            raise lost from None
    dist.close()  # not on an exception: see Dist.close
    return summary


def _train(params: Params, layout: Layout, ctx: RunContext, device: torch.device, dist: Dist,
           rolled_back: bool) -> dict:
    """The loop: a step, then its hooks, to the target step; one way out (hooks.close) for a
    finished run and for a rollback alike."""
    session = start(params, layout, ctx, device, dist, rolled_back)
    state, target, log = session.state, session.target, ctx.log
    trainer = Trainer(session)
    every, checkpoints = hooks.hooks_for(session, layout, ctx.hooks)
    if state.step >= target:
        log(f"train: already at step {state.step} = this data version's start {state.version_start} + train.steps "
            f"{params.train.steps}: nothing to train (raise train.steps to continue)")
    trouble = None
    try:
        while state.step < target:
            for h in every:
                h.before_step(state.step + 1)
            result = trainer.train_step(trainer.next_batch())
            record = hooks.StepRecord()
            for h in every:
                h.after_step(result, record)
    except Trouble as t:  # a spike or a run of skips: the guard rolls back once every hook is closed
        trouble = t
    if trouble is None and session.guards.run:
        log(f"train: the run ends inside {len(session.guards.run)} flagged step(s) (from step "
            f"{session.guards.run[0]['step']}, fewer than a rollback needs): the last checkpoint holds them; "
            "raising train.steps may roll back before it")
    hooks.close(every, ok=trouble is None)
    if trouble is not None:
        guard.roll_back(trouble, session.checkpointer.store, session.kept, session.ledger, params.train,
                        since=state.version_start, rank=dist.rank, barrier=dist.barrier, log=log)
    return _summary(layout, dist, state, session.origin, checkpoints.saved, session.monitor, session.tokens_per_step,
                    log)


def _summary(layout: Layout, dist: Dist, state: TrainState, origin: Origin, saved: list[str], monitor: Monitor,
             tokens_per_step: int, log) -> dict:
    summary = {"final_step": state.step, "tokens_seen": state.tokens_seen, "resumed_from": origin.parent,
               "checkpoints_saved": saved, "this_process": monitor.summary()}
    if dist.rank == 0:  # figures over every step on record (train.jsonl), not only this process's
        rows = read_records(layout.train_log)
        summary = {**summarize(rows, tokens_per_step), **summary}
        fsio.write_json(layout.train_summary, summary)
        write_derived(rows, layout.metrics)
        if any(r.get("slow") for r in rows):  # the evidence card's words, from the same records
            log(f"train: {'; '.join(slow_steps(rows))}")
    return summary
