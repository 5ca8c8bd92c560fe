"""The stateful parts of a training run: what a checkpoint holds, each with `state_dict()` and
`load_state_dict()` (the `Stateful` protocol, as torch's own objects have it).

Contract:
- The trainer hands the checkpointer (shardline.training.checkpointer) one dict of parts:
  "model" and "optimizer" (`ModelState`, `OptimizerState` below), "scaler" (torch's GradScaler as it is),
  "rng" (shardline.training.rng.RNG), "loader" (shardline.stream.loader.Loader), "guard"
  (shardline.training.guard.Guard) and "train" (`TrainState`).
- `TrainState` is the trainer's counters. `state_dict()` also records what this job is
  (grad_accum, world size, strategy: the report and the card read them); `load_state_dict()`
  restores only the counters, so a resume at another world size records its own job.
- `ModelState` and `OptimizerState` have two forms. `state_dict()` / `load_state_dict()`: this rank's own,
  as DCP saves and reshards it (under fsdp DTensor shards, keyed by parameter name; the
  optimizer's {"state"} only: its param_groups come from params.train, and loading keeps the
  live ones); no collective. `full_state_dict()` / `load_full_state_dict()`: as one process saves
  it, whatever the strategy (`module.state_dict()`, `optimizer.state_dict()` keyed by parameter
  index), returned on rank 0 and None elsewhere; under fsdp gathered to rank 0, or broadcast from
  it (collectives: every rank calls them, model before optimizer), so a full checkpoint resumes
  at any world size and strategy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from shardline.core.errors import ShardlineError
from shardline.training.dist import Dist


class Stateful(Protocol):
    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


@dataclass
class TrainState:
    """Where training stands: the counters a resume continues from."""

    step: int = 0
    tokens_seen: int = 0
    resumes: int = 0  # starts from a checkpoint after a stop or crash (a rollback's restart is none)
    version_start: int = 0  # the step this data version's training began at
    grad_accum: int = 1  # this job, recorded beside the counters and never loaded
    world_size: int = 1
    strategy: str = "single"

    def state_dict(self) -> dict:
        return {"step": self.step, "tokens_seen": self.tokens_seen, "resumes": self.resumes,
                "version_start_step": self.version_start, "grad_accum": self.grad_accum,
                "world_size": self.world_size, "strategy": self.strategy}

    def load_state_dict(self, state: dict) -> None:
        # checkpoints older than the resume count and data versions have neither: 0, as they began
        self.step, self.tokens_seen = state["step"], state["tokens_seen"]
        self.resumes, self.version_start = state.get("resumes", 0), state.get("version_start_step", 0)


def _options(**kw):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(**kw)


class ModelState:
    """The network's weights (`module`: the model before strategy wrappers, fsdp's sharded one)."""

    def __init__(self, module: torch.nn.Module, dist: Dist):
        self.module, self.dist = module, dist

    def state_dict(self) -> dict:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(self.module)

    def load_state_dict(self, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(self.module, state, options=_options(strict=True))

    def full_state_dict(self) -> dict | None:
        if self.dist.strategy != "fsdp":
            return self.module.state_dict() if self.dist.rank == 0 else None
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        msd = get_model_state_dict(self.module, options=_options(full_state_dict=True, cpu_offload=True))
        return msd if self.dist.rank == 0 else None

    def load_full_state_dict(self, state: dict | None) -> None:
        if self.dist.strategy != "fsdp":
            self.module.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(self.module, state if self.dist.rank == 0 else {},
                             options=_options(full_state_dict=True, broadcast_from_rank0=True))


class OptimizerState:
    """The optimizer's state (moments, step counts) of `opt`, built on `module`'s parameters."""

    def __init__(self, module: torch.nn.Module, opt: torch.optim.Optimizer, dist: Dist):
        self.module, self.opt, self.dist = module, opt, dist

    def state_dict(self) -> dict:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        # initialises an empty optimizer's state (a step at lr 0), so DCP has tensors to load into
        return {"state": get_optimizer_state_dict(self.module, self.opt)["state"]}

    def load_state_dict(self, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

        groups = get_optimizer_state_dict(self.module, self.opt)["param_groups"]  # the live ones (see the contract)
        set_optimizer_state_dict(self.module, self.opt, {"state": state["state"], "param_groups": groups})

    def full_state_dict(self) -> dict | None:
        if self.dist.strategy != "fsdp":
            return self.opt.state_dict() if self.dist.rank == 0 else None
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        osd = get_optimizer_state_dict(self.module, self.opt, options=_options(full_state_dict=True, cpu_offload=True))
        return _by_index(osd) if self.dist.rank == 0 else None

    def load_full_state_dict(self, state: dict | None) -> None:
        if self.dist.strategy != "fsdp":
            self.opt.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        set_optimizer_state_dict(self.module, self.opt, _by_name(state, self.module, self.opt) if self.dist.rank == 0
                                 else {}, options=_options(full_state_dict=True, broadcast_from_rank0=True))


def _by_index(osd: dict) -> dict:
    """An optimizer state dict keyed by parameter name (torch.distributed.checkpoint's form) in
    the form `Optimizer.state_dict` has: parameters numbered in param_groups order."""
    index = {name: i for i, name in enumerate(n for g in osd["param_groups"] for n in g["params"])}
    return {"state": {index[n]: s for n, s in osd["state"].items()},
            "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in osd["param_groups"]]}


def _by_name(osd: dict, model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict:
    """The inverse of `_by_index`, naming each index after the live optimizer's parameter."""
    name_of = {id(p): n for n, p in model.named_parameters()}
    names = [name_of[id(p)] for g in opt.param_groups for p in g["params"]]
    saved = sum(len(g["params"]) for g in osd["param_groups"])
    if saved != len(names):
        raise ShardlineError(f"train: the checkpoint's optimizer holds {saved} parameters, this model's {len(names)}")
    return {"state": {names[i]: s for i, s in osd["state"].items()},
            "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in osd["param_groups"]]}
