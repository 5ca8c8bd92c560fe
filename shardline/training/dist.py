"""Training on many processes and nodes: torchrun's process group, DDP or FSDP.

Contract:
- `Dist` is this process's place in a torchrun job, read from torchrun's env (RANK, WORLD_SIZE,
  LOCAL_RANK); without torchrun it is one process and every collective is a no-op. RANK is the
  global rank: rank 0 writes metrics and checkpoint manifests, so nodes share data/ (a shared
  filesystem), or a bucket (loader.shards_uri and train.checkpoint_uri: shardline.training.bucket).
- The process group gets train.dist_timeout_s: a collective that a hung rank never joins fails
  after that, not after torch's 30 minutes. A rank that dies is seen sooner: its torchrun agent
  stops at once (no restarts) and the survivors' collectives fail on the closed connection.
  The agent of a node whose rank hangs does not notice the others fail: under SLURM,
  `srun --kill-on-bad-exit=1` ends it.
- `relaunch_under_torchrun` is the one-node convenience behind train.nproc_per_node. A multi-node
  job runs one torchrun per node itself (c10d rendezvous; tests/integration/test_distributed.py `nodes` has
  the command); LOCAL_RANK is then set and nothing is relaunched.
- `wrap` applies train.strategy before the optimizer is built: ddp replicates the model and
  all-reduces gradients; fsdp (FSDP2 `fully_shard`, each block and the root) shards parameters,
  gradients and optimizer state, with bf16 as FSDP's mixed precision (bf16 parameters and compute,
  fp32 reductions; `mixed_precision`: the trainer then runs no autocast). With one process both
  are plain single-process training.
- Checkpoints hold the model and optimizer in either form whatever the strategy: a single
  process's or each rank's shards (shardline.training.state; `holds_full_state` says which
  ranks read a full checkpoint's), so a checkpoint resumes at any world size and strategy.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import os
import re
import socket
import traceback
from typing import Callable, Iterable

import torch

from shardline.core.config import Params, Train
from shardline.core.errors import ShardlineError
from shardline.core.layout import Layout
from shardline.training import launch

Log = Callable[[str], None]


class Dist:
    """This process's place in a torchrun job (a single process when not under torchrun)."""

    def __init__(self, cfg: Train, device: torch.device, log: Log = print):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.timeout = datetime.timedelta(seconds=cfg.dist_timeout_s)
        self._side = None
        self.strategy = cfg.strategy if self.world > 1 else "single"
        # fsdp + bf16: FSDP2's mixed precision (bf16 parameters and compute, fp32 gradient reductions)
        self.mixed_precision = self.strategy == "fsdp" and cfg.precision == "bf16"
        if cfg.strategy == "fsdp" and self.world == 1 and self.rank == 0:
            log("train: train.strategy is fsdp but this is one process (train.nproc_per_node 1, no torchrun): "
                "training single-process, nothing to shard")
        if self.world > 1 and not torch.distributed.is_initialized():
            if device.type == "cuda":
                torch.cuda.set_device(device)  # NCCL and FSDP's default mesh use the current device
            torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                                 timeout=self.timeout)

    @property
    def holds_full_state(self) -> bool:
        """Whether this rank reads the checkpoint's model and optimizer (fsdp: rank 0 broadcasts them)."""
        return self.strategy != "fsdp" or self.rank == 0

    def wrap(self, model: torch.nn.Module, blocks: Iterable[torch.nn.Module]) -> torch.nn.Module:
        """The module to run forward/backward through. Build the optimizer on `model` after this:
        fully_shard swaps its parameters for sharded ones. Hold the result no longer than the
        process group (see `close`). Under fsdp with `mixed_precision`, parameters are all-gathered
        and computed on in bf16 while the sharded fp32 parameters, the optimizer and the gradient
        reduce-scatter stay fp32 (torchtitan's default policy)."""
        if self.strategy == "fsdp":
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
                if self.mixed_precision else MixedPrecisionPolicy()
            for block in blocks:  # one all-gather per block, so only one block is ever unsharded
                fully_shard(block, mp_policy=mp)
            return fully_shard(model, mp_policy=mp)
        if self.strategy == "ddp":
            return torch.nn.parallel.DistributedDataParallel(model)
        return model

    def grad_sync(self, net: torch.nn.Module, last: bool):
        """Context for one micro-batch's backward through `net` (from `wrap`): gradients cross
        ranks only on the last micro-batch of a step."""
        if self.strategy == "ddp" and not last:
            return net.no_sync()
        if self.strategy == "fsdp":
            net.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    def side_group(self):
        """A gloo group of every rank for work off the training thread (checkpoint writes), whose
        collectives never interleave with training's; made once per process (a collective: every
        rank's first call is at the same point). None in one process."""
        if self.world > 1 and self._side is None:
            self._side = torch.distributed.new_group(backend="gloo", timeout=self.timeout)
        return self._side

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def share(self, obj):
        """Rank 0's `obj` on every rank (a small picklable value), so no rank acts on its own read of a file."""
        if self.world > 1:
            box = [obj]
            torch.distributed.broadcast_object_list(box, src=0)
            return box[0]
        return obj

    def all_sum(self, value: torch.Tensor) -> torch.Tensor:
        """The elementwise sum of `value` over the ranks (itself in one process)."""
        if self.world > 1:
            value = value.clone()
            torch.distributed.all_reduce(value)
        return value

    def lost_peers(self, e: BaseException, layout: Layout) -> ShardlineError | None:
        """`e` as one line when it is a collective that failed (a peer gone, a timeout), naming this rank,
        its node and gloo's or NCCL's reason, its traceback kept in layout.rank_log; None for any other
        error. Transient: another rank stopped first, and says why in its own line."""
        text = str(e)
        if self.world == 1 or not (isinstance(e, torch.distributed.DistError) or (isinstance(e, RuntimeError) and any(
                w in text for w in ("gloo", "NCCL", "Connection closed by peer", "Connection reset by peer",
                                    "Timed out waiting")))):
            return None
        first = re.sub(r"^\[[^\]]*\]\s*", "", (text.strip().splitlines() or [""])[0])  # gloo's source location
        reason = first.split(". ")[0].rstrip(".")
        path = layout.rank_log(self.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(traceback.format_exception(e)))
        err = ShardlineError(f"train: rank {self.rank} of {self.world} on {socket.getfqdn()}: {launch.PEERS_LOST} "
                             f"in a collective ({reason}): another rank stopped first (its line says why) or the "
                             f"network failed; re-run to resume from the last checkpoint (traceback: {layout.rel(path)})")
        err.transient = True
        return err

    def close(self) -> None:
        """Destroy the process group; call it only once the wrapped model is gone. DDP's reducer
        and FSDP's mesh hold the group: were one of them its last holder, its destructor would
        join gloo's threads holding the GIL, which a finishing gloo op waits for (a deadlock seen
        at the end of runs). After a failure, let the group die with the process instead: the
        traceback keeps the model alive."""
        if self.world > 1 and torch.distributed.is_initialized():
            gc.collect()  # a wrapper kept alive only by a reference cycle goes now, not after
            torch.distributed.destroy_process_group()


def relaunch_under_torchrun(params: Params, layout: Layout, ctx) -> dict:
    """Run the train stage as train.nproc_per_node processes on this machine and wait for them;
    they get what the orchestrator handed this process (its run id, its md5 of the shards). A
    failure is one line per cause (shardline.training.launch)."""
    n = params.train.nproc_per_node
    args = ["--root", str(layout.root), "stage", "train",
            *(["--run-id", ctx.run_id] if ctx.run_id else []), *(["--shards-md5", ctx.shards_md5] if ctx.shards_md5 else [])]
    launch.torchrun(n, args, layout, ctx.log)
    return {"nproc": n}


def grad_norm(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(the global gradient norm as a plain tensor, and as torch computed it: a DTensor under
    fsdp, which is what clipping wants back). DDP's gradients are already averaged, so every
    rank computes the same norm."""
    raw = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    return (raw.full_tensor() if hasattr(raw, "full_tensor") else raw), raw
