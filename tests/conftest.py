"""Shared fixtures: small real projects in temp dirs, real corpora when present, a Prefect server.

Real text only: Python's own standard-library sources (always present) and, when the shared
corpora folder exists, the real corpora in it (tests that need them skip cleanly otherwise).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO.parent / "shared" / "corpora"
STDLIB = Path(sysconfig.get_paths()["stdlib"])
BIN = Path(sys.executable).parent


def pytest_configure(config):
    # Nothing may reach a hub; the HF cache lives in a throwaway folder.
    import tempfile

    os.environ.setdefault("HF_HOME", tempfile.mkdtemp(prefix="hf-home-"))
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"


# The longest files first (about 290 s down to 35 s each on a worker of `-n 2` here): the two
# xdist workers take whole files in collection order, so the long ones start early and the many
# short ones fill in at the end instead of one long file finishing alone.
LONGEST_FIRST = ("test_mixsearch.py", "test_orchestration.py", "test_experiments.py", "test_train.py",
                 "test_distributed.py", "test_chaos.py", "test_sharded.py", "test_guard.py", "test_evaluate.py",
                 "test_line.py", "test_runners.py", "test_workpool.py", "test_tasks.py", "test_export.py", "test_s3.py",
                 "test_recompute.py", "test_init_from.py", "test_brought_tokenizers.py", "test_cli_errors.py",
                 "test_pinned_line.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order stays


def corpus(name: str) -> Path:
    p = CORPORA / name
    if not p.exists():
        pytest.skip(f"real corpus {name} not present ({CORPORA})")
    return p


def stdlib_files(n: int, skip: int = 0) -> list[Path]:
    """`n` real Python source files, in a stable order."""
    files = sorted(p for p in (STDLIB / "email").rglob("*.py")) + sorted((STDLIB / "json").glob("*.py")) \
        + sorted((STDLIB / "asyncio").glob("*.py"))
    return files[skip:skip + n]


def small_params(sources: list[dict], **sections) -> dict:
    """Params sized for tests: tiny vocab and shards so a whole line takes seconds."""
    p = yaml.safe_load((REPO / "params.yaml").read_text())  # every section dvc.yaml names
    p["sources"] = sources
    p["mix"] = {s["name"]: 1.0 for s in sources}
    small = {"clean": {"part_mb": 0.05, "min_chars": 16}, "tokenizer": {"vocab_size": 512},
             "shard": {"seq_len": 64, "target_mb": 0.05}, "pipeline": {"retries": 1, "retry_delay_s": 0.1},
             "model": {"n_layer": 1, "n_head": 2, "d_model": 32}, "loader": {"global_batch": 4},
             "train": {"steps": 4, "checkpoint_every": 2, "warmup_steps": 1, "threads": 1}}
    for k, v in [*small.items(), *sections.items()]:
        p[k] = {**p.get(k, {}), **v} if isinstance(v, dict) else v
    return p


def write_params(root: Path, params: dict) -> Path:
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    """A folder of ~40 real .py files (≈0.5 MB)."""
    d = tmp_path / "input" / "code"
    d.mkdir(parents=True)
    for f in stdlib_files(40):
        shutil.copy(f, d / f"{f.parent.name}_{f.name}")
    return d


def env_for(root: Path | None = None, **extra: str) -> dict:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    env.update(extra)
    return env


def run(cmd: list[str], cwd: Path, check: bool = True, env: dict | None = None, timeout: float = 300):
    r = subprocess.run(cmd, cwd=cwd, env=env or env_for(), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def init_repo(root: Path) -> None:
    """A real git + DVC repo holding this project's dvc.yaml."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    run(["git", "init", "-q"], root)
    run(["git", "config", "user.email", "t@example.com"], root)
    run(["git", "config", "user.name", "test"], root)
    run([str(BIN / "dvc"), "init", "-q"], root)
    run([str(BIN / "dvc"), "config", "core.analytics", "false"], root)


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """A real Prefect server on 127.0.0.1 with its own SQLite home; yields the env to use it."""
    from flows.server import local_server

    with local_server(tmp_path_factory.mktemp("prefect-home")) as env:
        yield {**env_for(), **env, "PREFECT_LOGGING_LEVEL": "WARNING"}


def make_project(root: Path, sources: list[dict], **sections):
    """Write params.yaml under `root`; return (Params, Layout) as the engine sees them."""
    from shardline.core import config
    from shardline.core.layout import Layout

    root.mkdir(parents=True, exist_ok=True)
    write_params(root, small_params(sources, **sections))
    return config.load(root / "params.yaml"), Layout.at(root)
