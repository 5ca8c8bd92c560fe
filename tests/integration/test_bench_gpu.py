"""bench.gpu stays ready for the day a GPU is lent: its script runs end to end on the CPU
(--dry-run: a tiny model; fp16 and FlexAttention, which are CUDA's, skipped and said so), through
the trainer the line uses, so an API change breaks this test and not the GPU session."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, env_for


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_gpu_bench_runs_end_to_end_on_the_cpu(tmp_path):
    out = tmp_path / "gpu.json"
    r = subprocess.run([sys.executable, "-m", "bench.gpu", "--dry-run", "--out", str(out)], cwd=REPO, env=env_for(),
                       capture_output=True, text=True, timeout=540)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    results = {x["check"]: x for x in json.loads(out.read_text())["results"]}
    assert [k for k, x in results.items() if x["ok"] is False] == []
    throughput = results["1a. llama bf16 eager, document"]["detail"]
    for what in ("tokens/s", "MFU", "peak memory", "data wait"):  # what it prints on a GPU
        assert what in throughput, throughput
    assert results["2. resume bit-identical"]["ok"] and results["3. fp16 GradScaler + guards"]["ok"] is None
