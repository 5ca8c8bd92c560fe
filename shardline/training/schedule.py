"""Learning-rate schedules: the LR is a pure function of (step within this data version, train settings).

Contract: `lr_at(step, cfg)` for step 0, 1, ... (the step about to run, counted from the data
version's start). Linear warmup over train.warmup_steps to train.lr, then
- cosine: from lr down to min_lr, reaching it at train.steps;
- wsd (warmup-stable-decay): lr held, then a linear decay to min_lr over the last
  train.decay_fraction of the steps after warmup, reaching it at train.steps.
Never stored: a resume recomputes it, so a checkpoint cannot disagree with the schedule.
"""

from __future__ import annotations

import math

from shardline.core.config import Train


def lr_at(step: int, cfg: Train) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    if cfg.schedule == "wsd":
        decay_from = 1.0 - cfg.decay_fraction  # progress at which the decay starts
        if progress <= decay_from:
            return cfg.lr
        return cfg.lr + (cfg.min_lr - cfg.lr) * (progress - decay_from) / cfg.decay_fraction
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))
