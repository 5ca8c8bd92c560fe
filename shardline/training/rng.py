"""The one place that seeds, captures and restores random state (python, numpy, torch, cuda).

Contract: `seed_all(seed)` is called once at the start of a fresh run; `capture()` returns the
state of every generator as plain data that `torch.load(weights_only=True)` accepts (no
pickled numpy objects); `restore(state)` puts them back exactly. `RNG()` is the same pair as a
stateful part of a checkpoint (shardline.training.state). The loader draws from none
of these (its order is a pure function of seed and position), so only model init and dropout
consume them.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds every CUDA device too


def capture() -> dict:
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    py = random.getstate()
    return {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore(state: dict) -> None:
    v, internal, gauss = state["python"]
    random.setstate((v, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class RNG:
    """Every generator of this process as one stateful part of a checkpoint (rng.pt)."""

    def state_dict(self) -> dict:
        return capture()

    def load_state_dict(self, state: dict) -> None:
        restore(state)
