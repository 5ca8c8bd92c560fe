"""How a network runs, not what it computes: activation checkpointing (full, selective) gives losses
and weights bit-identical to none on CPU, dropout included; torch.compile per block trains both
architectures in both attention modes, its losses equal to eager's here; the state dict's names
never change."""

from __future__ import annotations

import pytest
import torch

from shardline.core.config import Train
from shardline.model import ModelConfig, build
from shardline.training.network import prepare
from tests.integration.test_train import built  # noqa: F401 (the fixture)

EOS = 0
COMBOS = [(a, m) for a in ("gpt2", "llama") for m in ("causal", "document")]


def train(arch: str, attention: str, *, recompute="none", compile=False, dropout=0.1, steps=3):
    torch.manual_seed(0)
    extra = {"n_kv_head": 2, "head_dim": 8, "ffn_hidden": 64} if arch == "llama" else {}
    model = build(ModelConfig(arch, vocab_size=100, seq_len=32, n_layer=2, n_head=4, d_model=32, dropout=dropout,
                              attention=attention, eos_id=EOS, **extra))
    names = list(model.state_dict())
    prepare(model, Train(activation_checkpointing=recompute, compile=compile))
    assert list(model.state_dict()) == names
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    g, losses = torch.Generator().manual_seed(1), []
    for step in range(steps):
        x = torch.randint(1, 100, (4, 32), generator=g)
        x[:, [7, 19]] = EOS  # three documents per block
        torch.manual_seed(100 + step)  # dropout, as the trainer reseeds it every step
        _, loss = model(x, torch.roll(x, -1, 1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, model.state_dict()


@pytest.mark.parametrize("arch,attention", COMBOS)
def test_recompute_is_bit_identical_to_none(arch, attention):
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        base, weights = train(arch, attention)
        for mode in ("full", "selective"):
            losses, again = train(arch, attention, recompute=mode)
            assert losses == base, mode
            assert all(torch.equal(weights[k], again[k]) for k in weights), mode
    finally:
        torch.use_deterministic_algorithms(was)


def test_what_each_mode_recomputes():
    """The ops the backward pass runs, counted: full runs every block's forward again (its matmuls
    too); selective keeps the matmul outputs and recomputes only the cheap ops (here RMSNorm's
    rsqrt and SwiGLU's silu). bench.train measures the memory this saves and the time it costs."""
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    def backward_ops(mode: str) -> Counter:
        torch.manual_seed(0)
        model = build(ModelConfig("llama", vocab_size=100, seq_len=16, n_layer=2, n_head=4, d_model=32,
                                  n_kv_head=2, head_dim=8, ffn_hidden=64))
        prepare(model, Train(activation_checkpointing=mode))
        x = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(0))
        loss = model(x, x)[1]
        with Count() as c:
            loss.backward()
        return c.ops

    none, selective, full = (backward_ops(m) for m in ("none", "selective", "full"))
    print({m: (c["mm"], c["rsqrt"], c["silu"]) for m, c in (("none", none), ("selective", selective), ("full", full))})
    # per block, forward: 7 matmuls (q k v o gate up down), 2 RMSNorms (rsqrt), 1 silu; 2 blocks. full
    # replays 6 of the 7: recomputation stops once it has what the backward reads (not down_proj's output)
    assert full["mm"] == none["mm"] + 12 and selective["mm"] == none["mm"] == 30
    assert full["rsqrt"] == selective["rsqrt"] == none["rsqrt"] + 4 and full["silu"] == selective["silu"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("arch,attention", COMBOS)
def test_compiled_blocks_train_as_eager(arch, attention):
    eager, _ = train(arch, attention, dropout=0.0)
    compiled, _ = train(arch, attention, dropout=0.0, compile=True, recompute="selective")
    print(f"{arch}/{attention}: eager {eager}, compiled {compiled}")
    assert compiled == pytest.approx(eager, rel=1e-6, abs=0)


@pytest.mark.slow
def test_the_trainer_runs_compiled_with_recompute_as_eager(built, tmp_path):  # noqa: F811
    """Through the real trainer (the shipped llama, document attention): compile + selective recompute
    train to the eager run's losses; dropout off, since inductor draws its masks its own way."""
    from tests.conftest import run
    from tests.integration.test_train import SL, losses, project

    sizes = {"model": {"dropout": 0.0}, "eval": {"every": 0}}
    eager = project(built, tmp_path / "eager", train={"steps": 3, "checkpoint_every": 3}, **sizes)
    fast = project(built, tmp_path / "fast", train={"steps": 3, "checkpoint_every": 3, "compile": True,
                                                    "activation_checkpointing": "selective"}, **sizes)
    run([SL, "stage", "train"], eager)
    run([SL, "stage", "train"], fast, timeout=600)
    assert losses(fast) == pytest.approx(losses(eager), rel=1e-6, abs=0)
