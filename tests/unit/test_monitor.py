"""The monitor's promises: strict JSON lines with every field, slow steps flagged once with
the right cause, exact summary numbers, progress output both ways, and no GPU needed."""

from __future__ import annotations

import json

import pytest
import torch

from shardline.training.monitor import Monitor, guess_peak_flops
from shardline.training.throughput import slow_steps

FIELDS = {"step", "loss", "lr", "tokens", "step_s", "data_wait_s", "compute_s", "tokens_per_s", "mfu",
          "gpu_util", "slow"}


def make(path=None, logs=None, **kw):
    kw = {"tokens_per_step": 1000, "flops_per_token": 1e6, "total_steps": 20, "peak_flops": 1e12,
          "progress": False, "log": (logs if logs is not None else []).append, "device": torch.device("cpu"),
          **kw}
    return Monitor(path, **kw)


def normal(mon, step, step_s=0.1, data=0.01):
    return mon.step(step, loss=3.0, lr=1e-3, data_wait_s=data, compute_s=step_s - data, step_s=step_s)


def test_jsonl_lines_have_every_field(tmp_path):
    path = tmp_path / "logs" / "train.jsonl"
    mon = make(path)
    recs = [normal(mon, s, step_s=0.1 * s) for s in range(1, 4)]
    mon.close()
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert lines == recs and all(set(r) == FIELDS for r in lines)
    r = lines[1]
    assert r["step"] == 2 and r["tokens"] == 2000 and r["slow"] is None and r["gpu_util"] is None
    assert r["tokens_per_s"] == pytest.approx(1000 / 0.2)
    assert r["mfu"] == pytest.approx(1e6 * 5000 / 1e12)


def test_resume_appends_and_non_finite_is_null(tmp_path):
    path = tmp_path / "train.jsonl"
    mon = make(path)
    normal(mon, 1)
    mon.close()
    mon = make(path, start_step=1)
    mon.step(2, loss=float("nan"), lr=1e-3, data_wait_s=0.0, compute_s=0.1, step_s=0.1)
    mon.close()
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2] and lines[1]["loss"] is None
    assert "NaN" not in path.read_text()
    assert mon.summary()["steps"] == 1 and mon.summary()["last_loss"] is None  # train.json is strict JSON too


def test_slow_steps_flagged_with_cause_and_logged_once():
    logs = []
    mon = make(logs=logs)
    for s in range(1, 11):
        normal(mon, s)
    data_bound = mon.step(11, loss=3.0, lr=1e-3, data_wait_s=0.9, compute_s=0.1, step_s=1.0)
    normal(mon, 12)
    compute_bound = mon.step(13, loss=3.0, lr=1e-3, data_wait_s=0.01, compute_s=0.99, step_s=1.0)
    normal(mon, 14)
    assert data_bound["slow"] == "input-bound" and compute_bound["slow"] == "compute-bound"
    slow_logs = [m for m in logs if "slow" in m]
    assert len(slow_logs) == 2
    assert "step 11" in slow_logs[0] and "input-bound" in slow_logs[0] and "1.000s" in slow_logs[0]
    assert "step 13" in slow_logs[1] and "compute-bound" in slow_logs[1]
    # each offers the command that profiles it (train.profile)
    assert slow_logs[0].endswith("to profile it: `dvc exp run -S 'train.profile={start_step:11,steps:3}'`")
    assert mon.summary()["slow_steps"] == [
        {"step": 11, "cause": "input-bound", "step_s": 1.0, "median_s": pytest.approx(0.1)},
        {"step": 13, "cause": "compute-bound", "step_s": 1.0, "median_s": pytest.approx(0.1)},
    ]


def test_the_slow_step_lines_and_the_slowest_name_one_step_and_one_command():
    """Issue 50: the log offered to profile from the step after a slow one, the card from the
    slowest itself. The card's lines and the train stage's last line are throughput.slow_steps."""
    logs = []
    mon = make(logs=logs)
    rows = [normal(mon, s) for s in range(1, 11)]
    rows.append(mon.step(11, loss=3.0, lr=1e-3, data_wait_s=0.9, compute_s=0.1, step_s=1.0))
    rows.append(normal(mon, 12))
    rows.append(mon.step(13, loss=3.0, lr=1e-3, data_wait_s=0.01, compute_s=1.99, step_s=2.0))
    command = "`dvc exp run -S 'train.profile={start_step:13,steps:3}'`"
    assert slow_steps(rows) == [
        "slow steps: 2 (1 input-bound, 1 compute-bound)",
        f"the slowest, step 13 (2.000 s, compute-bound): profile it where training next reaches it with {command} "
        "(train.profile)"]
    assert logs[-1].startswith("step 13: slow step 2.000s") and logs[-1].endswith(f"to profile it: {command}")
    assert slow_steps(rows[:10]) == ["slow steps: 0 (0 input-bound, 0 compute-bound)"]


def test_nothing_is_slow_before_five_steps():
    mon = make()
    normal(mon, 1)
    assert all(normal(mon, s, step_s=10.0 * s)["slow"] is None for s in range(2, 6))
    assert normal(mon, 6, step_s=1000.0)["slow"] == "compute-bound"


def test_summary_matches_hand_computed_values():
    mon = make(tokens_per_step=100)
    for s, (step_s, wait) in enumerate([(1, 0.5), (2, 0.5), (3, 1), (4, 1), (5, 2)], start=1):
        mon.step(s, loss=10.0 - s, lr=1e-3, data_wait_s=wait, compute_s=step_s - wait, step_s=step_s)
    got = mon.summary()
    assert got["steps"] == 5 and got["tokens"] == 500 and got["last_loss"] == 5.0
    assert got["median_tokens_per_s"] == pytest.approx(100 / 3)  # of 100, 50, 33.3, 25, 20
    assert got["p95_step_s"] == pytest.approx(4.8)  # index 0.95 * 4 = 3.8: 4 + 0.8 * (5 - 4)
    assert got["data_wait_pct"] == pytest.approx(100 * 5 / 15)
    assert got["mean_mfu"] == pytest.approx(1e6 * (100 + 50 + 100 / 3 + 25 + 20) / 5 / 1e12)
    assert got["slow_steps"] == []


def test_progress_false_logs_every_tenth():
    logs = []
    mon = make(logs=logs, total_steps=20)
    for s in range(1, 21):
        normal(mon, s)
    assert [m.split(" ")[1] for m in logs] == [f"{s}/20" for s in range(2, 21, 2)]
    assert "tok/s" in logs[-1] and "eta 0:00:00" in logs[-1]


def test_progress_bar_on_stderr(capsys):
    logs = []
    mon = make(logs=logs, progress=True, total_steps=5)
    for s in range(1, 6):
        normal(mon, s)
    mon.close()
    err = capsys.readouterr().err
    assert err.startswith("\r") and "5/5" in err and "tok/s" in err and "eta" in err and err.endswith("\n")
    assert logs == []


def test_no_gpu_is_fine():
    # Asking for CUDA where there is none must give gpu_util None, never an error.
    dev = torch.device("cuda") if not torch.cuda.is_available() else torch.device("cpu")
    mon = Monitor(None, tokens_per_step=10, flops_per_token=1.0, total_steps=2, progress=False,
                  log=lambda m: None, device=dev)
    assert mon.step(1, loss=1.0, lr=0.1, data_wait_s=0.0, compute_s=0.1, step_s=0.1)["gpu_util"] is None
    assert mon.summary()["mean_mfu"] > 0
    assert guess_peak_flops(torch.device("cpu")) > 0
    mon.close()
    mon.close()


def test_cpu_peak_is_shared_by_the_ranks_on_one_machine(monkeypatch):
    """Two torchrun ranks on one CPU machine share its cores: each rank's peak is half, so the
    job's peak (rank peak x world) is the machine's, not twice it (MFU was overstated 2x)."""
    cpu = torch.device("cpu")
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    whole = guess_peak_flops(cpu)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert guess_peak_flops(cpu) == whole / 2


def _long_run(mon, keep: list | None) -> None:
    for s in range(1, 3001):
        extra = {"batches": [f"{s:016x}"] * 8, "grad_norm": 1.0, **({"guard": "skip"} if s % 997 == 0 else {}),
                 **({"rollbacks": [{"n": 1, "step": s}]} if s == 1500 else {})}
        rec = mon.step(s, loss=float("nan") if s == 3000 else 3.0 - s / 3000, lr=1e-3, data_wait_s=0.01,
                       compute_s=0.09 if s != 2000 else 1.0, step_s=0.1 if s != 2000 else 1.01, extra=extra)
        if keep is not None:
            keep.append(rec)


def test_the_summary_keeps_no_record_and_says_what_summarize_says_of_them():
    """A week-long run kept every record (about 1 KB each): bench.soak saw the trainer's memory grow 5%
    over 50,000 steps. The monitor keeps what its summary needs, and says the same as summarize."""
    import tracemalloc

    from shardline.training.throughput import summarize

    mon, recs = make(total_steps=3000), []
    _long_run(mon, recs)
    held = mon.summary()
    assert held == {**summarize(recs, 1000), "slow_steps": held["slow_steps"]}
    assert [s["step"] for s in held["slow_steps"]] == [2000] and held["skipped_steps"] == [997, 1994, 2991]
    tracemalloc.start()
    mon = make(total_steps=3000)
    before = tracemalloc.get_traced_memory()[0]
    _long_run(mon, None)
    grew = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grew < 3000 * 100, grew  # ~24 bytes a step (three floats and an MFU), not a record's ~1 KB
