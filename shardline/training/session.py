"""A training run, started: every part built and brought to where training stands.

Contract: `start(params, layout, ctx, device, dist, rolled_back)` builds the loader, the network,
the held-out set, the optimizer, GradScaler, guards and checkpointer (one dict of stateful parts,
shardline.training.state); finds the checkpoint to start from (resume.find_start) and loads it,
or starts fresh (from train.init_from's model, judged on the held-out set first); truncates the
step records to where training stands and opens the monitor. It returns a `Session`: what the
loop in train.py uses, nothing more. The order of what draws from torch's RNG (building the model)
is the order a killed run's start had: bit-exact resume depends on it.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from shardline.context import RunContext
from shardline.core import fsio
from shardline.core.config import Params, Train
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.filenames import step_dir
from shardline.stream.loader import Loader
from shardline.training import checkpoint, identity, lineage, storage
from shardline.training.checkpointer import Checkpointer
from shardline.training.dist import Dist
from shardline.training.evaluate import HeldOut, compact, evaluate
from shardline.training.guard import Guard
from shardline.training.monitor import Monitor, guess_peak_flops
from shardline.training.steplog import read_records, truncate_records
from shardline.training.network import Network, prepare
from shardline.training.optimizer import configure_optimizer
from shardline.training.profiling import StepProfiler
from shardline.training.resume import Origin, find_start, resume
from shardline.training.rng import RNG
from shardline.training.state import ModelState, OptimizerState, TrainState
from shardline.training.tracking import Trackers


# data/reports/profile/.keep: what the folder holds without train.profile (the card lists no dotfile)
PROFILES_KEEP = b"train.profile's torch.profiler traces land in this folder (docs/watching.md).\n"


def autocast_for(cfg: Train, device: torch.device):
    if cfg.precision == "fp32":
        return contextlib.nullcontext()
    if cfg.precision == "fp16" and device.type != "cuda":
        raise BadInput("train.precision: fp16 needs CUDA; use bf16 on CPU")
    return torch.autocast(device.type, dtype=torch.bfloat16 if cfg.precision == "bf16" else torch.float16)


@dataclass
class Session:
    """A started run's parts and where it stands (fields as the loop names them)."""

    params: Params
    ctx: RunContext
    device: torch.device
    dist: Dist
    loader: Loader
    model: torch.nn.Module
    net: torch.nn.Module  # the model as the strategy wrapped it (DDP, FSDP)
    opt: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    autocast: Any
    held: HeldOut | None
    guards: Guard
    state: TrainState
    checkpointer: Checkpointer
    monitor: Monitor
    trackers: Trackers  # TensorBoard, W&B, MLflow (log.backends), rank 0 only
    profiler: StepProfiler  # train.profile
    origin: Origin
    ledger: list[dict]  # the guard's rollbacks on record
    pending: list[dict]  # rollbacks this timeline has not recorded yet
    kept: Path  # .shardline/kept/<identity>/
    target: int  # the step this run trains to
    tokens_per_step: int

    def evaluate(self) -> dict:
        return held_out(self.params, self.loader, self.model, self.held, self.device, self.autocast, self.dist)

    def retain(self, before: int | None) -> None:
        # inside a run of flagged steps, the checkpoint a rollback would return to stays
        cfg = self.params.train
        for s in self.checkpointer.store.retain(cfg.keep_last, cfg.keep_every, self.ctx.log, before=before):
            if step_dir(self.kept, s).exists():
                checkpoint.remove(step_dir(self.kept, s))

    def after_save(self, path: Path, before: int | None) -> None:  # on the saver's thread
        self.checkpointer.store.keep(path, self.kept)
        self.retain(before)


def held_out(params: Params, loader: Loader, model, held: HeldOut, device: torch.device, autocast, dist: Dist) -> dict:
    """The model on the held-out set now (every rank its slice of each batch); no RNG stream moves."""
    return evaluate(model, held, params.mix, batch=loader.spec.global_batch // dist.world, device=device,
                    autocast=autocast, rank=dist.rank, world=dist.world, all_sum=dist.all_sum,
                    pad=dist.strategy == "fsdp")


def start(params: Params, layout: Layout, ctx: RunContext, device: torch.device, dist: Dist,
          rolled_back: bool) -> Session:
    cfg, log = params.train, ctx.log
    store, metrics = storage.for_run(params, layout), layout.train_log
    loader = Loader.from_params(params, layout, rank=dist.rank, world=dist.world, log=log)
    network = Network.for_run(params, layout, loader.seq_len, share=dist.share, rank=dist.rank)
    held = (HeldOut.for_training(params, layout, loader.spec.remote, loader.seq_len,
                                 loader.reader.sources[0].index["tokenizer_sha256"], log)
            if params.eval.every else None)
    ident = identity.current(params, loader.state_dict(), network.section, network.init)
    kept = layout.kept / identity.tag(ident)
    latest, changes, ledger = find_start(params, layout, store, ctx, dist, ident, kept)
    model = network.build(cfg.seed, fresh=latest is None).to(device)
    prepare(model, cfg)
    net = dist.wrap(model, model.blocks)
    opt = configure_optimizer(model, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(cfg.beta1, cfg.beta2),
                              device_type=device.type)
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")
    # under fsdp, bf16 is FSDP's mixed precision (bf16 parameters, fp32 reductions), not autocast
    autocast = contextlib.nullcontext() if dist.mixed_precision else autocast_for(cfg, device)
    state, guards = TrainState(grad_accum=cfg.grad_accum, world_size=dist.world, strategy=dist.strategy), Guard(cfg)
    checkpointer = Checkpointer(cfg, dist, store, {
        "model": ModelState(model, dist), "optimizer": OptimizerState(model, opt, dist), "scaler": scaler, "rng": RNG(),
        "loader": loader, "guard": guards, "train": state})
    evaluate_now = functools.partial(held_out, params, loader, model, held, device, autocast, dist)

    origin, init = Origin(), None
    if latest is None and network.init is not None:
        init = network.init.lineage()
        if held is not None:  # the imported model as it came, judged on this line's held-out set
            init["eval"] = compact(evaluate_now())
        log(f"train: initialised from {network.init.where} ({network.init.architecture}); held-out before "
            f"training: {lineage.eval_line(init.get('eval'))}")
    if latest is not None:
        origin = resume(checkpointer, latest, changes, rolled_back)
        log(f"train: {'rolled back to' if rolled_back else 'resuming from'} {latest.name} (step {state.step}, "
            f"{state.tokens_seen:,} tokens)"
            + (f"; ALLOWED CHANGES: {'; '.join(origin.changed)}" if origin.changed else ""))
        if origin.changed and held is not None:
            origin.continued_from["eval_now"] = compact(evaluate_now())
    else:
        log(f"train: fresh start, {network.config.arch} with {model.num_params(non_embedding=False):,} parameters "
            f"({network.config.attention} attention)")
    target = state.version_start + cfg.steps
    pending = [e for e in ledger if e["n"] > origin.known]  # rollbacks this timeline has not recorded yet
    lin = lineage.collect(params, layout, loader.version, parent=origin.parent, run_id=ctx.run_id,
                          shards_md5=ctx.shards_md5, data_change=origin.changed, continued_from=origin.continued_from,
                          rollbacks=ledger, model=network.section, init=init if latest is None else origin.init,
                          not_code=ctx.not_code, vocab_size=network.config.vocab_size)
    checkpointer.lineage = lin  # the checkpointer advances it with each save
    name = params.log.run_name or ctx.run_name or f"{layout.root.name}-{identity.tag(ident)[:8]}"
    trackers = Trackers(params.log if dist.rank == 0 else params.log.model_copy(update={"backends": ()}), layout.root,
                        layout.tracker_state(identity.tag(ident)), name, lin, log)
    if dist.rank == 0:
        metrics.parent.mkdir(parents=True, exist_ok=True)
        layout.profiles.mkdir(parents=True, exist_ok=True)  # an output of the stage: never empty, or DVC warns
        if not layout.profiles_keep.exists():
            fsio.write_bytes(layout.profiles_keep, PROFILES_KEEP)
        truncate_records(metrics, state.step)
        trackers.open(read_records(metrics) if params.log.backends else [], state.step)
    tokens_per_step = loader.spec.global_batch * loader.seq_len * cfg.grad_accum
    monitor = Monitor(metrics if dist.rank == 0 else None, tokens_per_step=tokens_per_step,
                      flops_per_token=model.flops_per_token(), total_steps=target, start_step=state.step,
                      peak_flops=guess_peak_flops(device) * dist.world,  # tokens_per_step is the whole job's
                      slow_factor=cfg.slow_step_factor, log=log, device=device,
                      progress=None if dist.rank == 0 else False)
    return Session(params, ctx, device, dist, loader, model, net, opt, scaler, autocast, held, guards, state,
                   checkpointer, monitor, trackers,
                   StepProfiler(cfg.profile if dist.rank == 0 else None, layout.profiles, device, log, state.step), origin,
                   ledger, pending, kept, target, tokens_per_step)
