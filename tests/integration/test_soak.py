"""The soak's short version (bench.soak runs 50,000 steps; issue 52, point 3): 3,000 steps with eval,
checkpoints every 250 with retention and all three trackers on, watched from outside, then the same run
SIGKILLed near its end and resumed. What must hold at any length: retention bounds the checkpoints on
disk at every moment, the training process opens no more files at the end than early on, every step is
recorded once, and the kill resumes to the same weights, byte for byte."""

from __future__ import annotations

import json

import pytest

from harness.soak import KEEP_LAST, fd_growth, final_weights, last_step, project, watch

pytestmark = pytest.mark.slow
STEPS, KEEP_EVERY = 3_000, 1_000


def test_a_long_run_stays_bounded_and_a_kill_near_its_end_resumes_exactly(tmp_path):
    a = project(tmp_path / "a", STEPS, keep_every=KEEP_EVERY)
    samples, _ = watch(a)
    bound = KEEP_LAST + STEPS // KEEP_EVERY + 1  # the last two, every 1,000th, and the one being written
    assert max(s["ckpt_dirs"] for s in samples) <= bound
    assert sorted(p.name for p in (a / "data/checkpoints").glob("step-*")) == [
        "step-000001000", "step-000002000", "step-000002750", "step-000003000"]
    growth = fd_growth(samples)
    # no file left open per step or checkpoint, in any process (a leak of one a checkpoint would be +2 or +3
    # in the last fifth); the trackers' process opens one more for a moment now and then (mlflow's journal)
    assert any("shardline" in who for who in growth), growth
    assert all(late <= early + 1 for early, late in growth.values()), growth
    steps = [json.loads(ln)["step"] for ln in (a / "data/metrics/train.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1))

    b = project(tmp_path / "b", STEPS, keep_every=KEEP_EVERY)
    _, code = watch(b, kill_past=STEPS - 150)
    assert code == -9 and last_step(b / "data/metrics/train.jsonl") < STEPS
    watch(b)
    assert final_weights(b) == final_weights(a)
