"""Shared fixtures: small real projects in temp dirs, real corpora when present, a Prefect server.

Real text only: Python's own standard-library sources (always present) and, when the shared
corpora folder exists, the real corpora in it (tests that need them skip cleanly otherwise).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from harness.projects import (BIN, REPO, STDLIB, commit_trained, env_for, init_repo, run,  # noqa: F401 (for the tests)
                              small_params, stdlib_files, stdlib_sources, up_to_date, write_params)

CORPORA = REPO.parent / "shared" / "corpora"


def pytest_configure(config):
    from harness import faultproxy

    faultproxy.session_seed()  # one fault seed for the run, in the environment before xdist starts workers
    # Nothing may reach a hub; the HF cache lives in a throwaway folder, removed at the end.
    import tempfile

    if "HF_HOME" not in os.environ:
        os.environ["HF_HOME"] = config._shardline_hf_home = tempfile.mkdtemp(prefix="hf-home-")
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"


def pytest_report_header(config):
    from harness import faultproxy

    seed = faultproxy.session_seed()
    return f"object-store fault schedules: seed {seed} (replay: {faultproxy.SEED_VAR}={seed})"


def pytest_unconfigure(config):
    if home := getattr(config, "_shardline_hf_home", None):
        shutil.rmtree(home, ignore_errors=True)


# The longest files first (test_readme ~350 s alone, then about 380 s down to 30 s each on a worker of
# `-n 2` here, measured with --durations): the two xdist workers take whole files in this order, so the
# long ones start early and the many short ones fill in at the end instead of one long file finishing alone.
LONGEST_FIRST = ("test_readme.py",  # the README's flow: the default line twice
                 "test_mixsearch.py", "test_orchestration.py", "test_experiments.py", "test_distributed.py",
                 "test_chaos.py", "test_soak.py", "test_sharded.py", "test_train.py", "test_runners.py", "test_guard.py",
                 "test_tasks.py", "test_evaluate.py", "test_diff.py", "test_line.py", "test_workpool.py", "test_trackers.py",
                 "test_recompute.py", "test_profile.py", "test_init_from.py", "test_cli_errors.py", "test_curation.py",
                 "test_prefect_ui.py", "test_brought_tokenizers.py", "test_export.py", "test_store_faults.py",
                 "test_store_faults_data.py", "test_store_faults_train.py", "test_reference.py", "test_s3.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order stays


def corpus(name: str) -> Path:
    p = CORPORA / name
    if not p.exists():
        pytest.skip(f"real corpus {name} not present ({CORPORA})")
    return p


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    """A folder of ~40 real .py files (≈0.5 MB)."""
    d = tmp_path / "input" / "code"
    d.mkdir(parents=True)
    for f in stdlib_files(40):
        shutil.copy(f, d / f"{f.parent.name}_{f.name}")
    return d


@pytest.fixture(scope="session")
def built_once(tmp_path_factory):
    """`built_once(name, build)`: the folder `build(empty_folder)` returned, built once per worker
    process. With `--dist loadfile` a worker runs many files, and a module fixture several files
    import (test_train's `built`, ~8 s) was built again for each. What it builds is read-only to
    its users: they copy it (test_train.project) before they change anything."""
    made: dict[str, Path] = {}

    def get(name: str, build) -> Path:
        if name not in made:
            made[name] = build(tmp_path_factory.mktemp(name))
        return made[name]

    return get


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """A real Prefect server on 127.0.0.1 with its own SQLite home; yields the env to use it."""
    from shardline.orchestration.flows.server import local_server

    with local_server(tmp_path_factory.mktemp("prefect-home")) as env:
        yield {**env_for(), **env, "PREFECT_LOGGING_LEVEL": "WARNING"}


def make_project(root: Path, sources: list[dict], **sections):
    """Write params.yaml under `root`; return (Params, Layout) as the engine sees them."""
    from shardline import paramsfile
    from shardline.core.layout import Layout

    root.mkdir(parents=True, exist_ok=True)
    write_params(root, small_params(sources, **sections))
    return paramsfile.load(root / "params.yaml"), Layout.at(root)
