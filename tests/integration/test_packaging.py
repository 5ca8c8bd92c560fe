"""What `pip install .` puts into site-packages: one top-level package, `shardline`. The command,
the DVC adapter and the Prefect flows and tasks are inside it (`pip install .` used to add `cli`,
`tasks`, `flows` and `dvcrepo` too, names other projects own: installing one of them broke the
other). The repository's flows/ and tasks/ stay, as re-exports, and are not installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_one_top_level_package_and_its_command(tmp_path):
    src = tmp_path / "src"  # a copy: building in the checkout would leave build/ and egg-info in it
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("shardline", "flows", "tasks"):  # flows/ and tasks/ beside it, as in the checkout
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                        "--no-index", "-q", "-w", str(tmp_path / "dist")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = (tmp_path / "dist").glob("shardline-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = z.read(f"{info}/entry_points.txt").decode()
        top_level = z.read(f"{info}/top_level.txt").decode().split()
    assert {n.split("/")[0] for n in names} == {"shardline", info}
    assert top_level == ["shardline"]
    assert "shardline = shardline.cli.main:main" in entry_points
    for module in ("cli/main.py", "dvcrepo/experiments.py", "orchestration/flows/pipeline.py",
                   "orchestration/tasks/runners.py"):
        assert f"shardline/{module}" in names


def test_the_repositorys_flows_and_tasks_are_the_installed_ones():
    import flows
    import tasks
    from shardline.orchestration.flows import pipeline, stage_flows
    from shardline.orchestration.tasks import invoke, mappers, runners

    assert (flows.pipeline, flows.retrain, flows.run_flow) == (pipeline.pipeline, pipeline.retrain, stage_flows.run_flow)
    assert (tasks.invoke, tasks.run_context, tasks.part_mapper, tasks.mapper) == \
        (invoke.invoke, invoke.run_context, mappers.part_mapper, runners.mapper)
