"""train.profile: a torch.profiler trace of the chosen steps, in Chrome trace format, under
data/reports/profile/, linked by the evidence card; profiling changes no bit of training."""

from __future__ import annotations

import json

from tests.conftest import run
from tests.integration.test_guard import train
from tests.integration.test_train import SL, assert_same_state, built, final_state, project  # noqa: F401 (the fixture)


def test_the_chosen_steps_are_traced_linked_and_train_the_same(built, tmp_path):
    plain = project(built, tmp_path / "plain", train={"steps": 8})
    traced = project(built, tmp_path / "traced", train={"steps": 8, "profile": {"start_step": 3, "steps": 2}})
    train(plain, plan="")
    out = train(traced, plan="")
    trace = traced / "data/reports/profile/trace-000000003-000000004.json"
    assert f"train.profile: steps 3-4 profiled: {trace.relative_to(traced)}" in out.stdout + out.stderr \
        or f"train.profile: steps 3-4 profiled: {trace}" in out.stdout + out.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e.get("name", "") for e in events}
    assert any(n.startswith("aten::") for n in names) and "Optimizer.step#AdamW.step" in names
    assert sorted(p.name for p in (traced / "data/reports/profile").iterdir()) == [".keep", trace.name]  # no temp left
    assert_same_state(final_state(plain), final_state(traced))
    run([SL, "stage", "report"], traced)
    assert f"- profiled: [{trace.name}](profile/{trace.name})" in (traced / "data/reports/evidence.md").read_text()
    # resumed past it: said once, nothing profiled again
    p = traced / "params.yaml"
    p.write_text(p.read_text().replace("steps: 8", "steps: 10"))
    again = train(traced, plan="")
    assert "train.profile: step 3 is behind where this run starts (step 9): nothing is profiled" in again.stdout + again.stderr
