"""Small real projects for tests and benchmarks alike: real text (Python's own standard-library
sources, always present), params sized to run a whole line in seconds, a real git + DVC repo,
and the subprocess runner both use. tests/conftest.py re-exports these for the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
STDLIB = Path(sysconfig.get_paths()["stdlib"])
BIN = Path(sys.executable).parent


def stdlib_files(n: int, skip: int = 0) -> list[Path]:
    """`n` real Python source files, in a stable order."""
    files = sorted(p for p in (STDLIB / "email").rglob("*.py")) + sorted((STDLIB / "json").glob("*.py")) \
        + sorted((STDLIB / "asyncio").glob("*.py"))
    return files[skip:skip + n]


def stdlib_dir(dest: Path, n: int) -> Path:
    """A folder of `n` real stdlib files (stdlib_files), named <package>_<file> so none collide."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in stdlib_files(n):
        (dest / f"{f.parent.name}_{f.name}").write_bytes(f.read_bytes())
    return dest


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


def up_to_date(status: str) -> bool:
    """`dvc status` says nothing is out of date but the plugins stage, which is always changed (DVC
    cannot see an installed release: dvc.yaml)."""
    return status.split() in (["Data", "and", "pipelines", "are", "up", "to", "date."], ["plugins:", "always", "changed"])


def init_repo(root: Path) -> None:
    """A real git + DVC repo holding this project's dvc.yaml."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    run(["git", "init", "-q"], root)
    run(["git", "config", "user.email", "t@example.com"], root)
    run(["git", "config", "user.name", "test"], root)
    run([str(BIN / "dvc"), "init", "-q"], root)
    run([str(BIN / "dvc"), "config", "core.analytics", "false"], root)


def stdlib_sources(inputs: Path) -> list[dict]:
    """Two txt sources of real Python files under `inputs`: code (12 files) and more (4 others)."""
    for name, files in (("code", stdlib_files(12)), ("more", stdlib_files(4, skip=12))):
        (inputs / name).mkdir(parents=True)
        for f in files:
            shutil.copy(f, inputs / name / f"{f.parent.name}_{f.name}")
    return [{"name": n, "uri": str(inputs / n), "format": "txt"} for n in ("code", "more")]


def commit_trained(root: Path, *targets: str) -> None:
    """A user's project after the README's first run: committed as cloned, `dvc repro [targets]`,
    committed."""
    run(["git", "add", "-A"], root)
    run(["git", "commit", "-qm", "cloned"], root)
    run([str(BIN / "dvc"), "repro", *targets], root, timeout=600)
    run(["git", "add", "-A"], root)
    run(["git", "commit", "-qm", "trained"], root)


def lineage_of(root: Path):
    """A real lineage (lineage.collect) of a small one-source project at `root` that has trained
    nothing: what a checkpoint saved outside a training run (a test's, a benchmark's) records."""
    from shardline import paramsfile
    from shardline.core.layout import Layout
    from shardline.training import lineage

    params = paramsfile.parse(small_params([{"name": "code", "uri": "code.txt", "format": "txt"}]))
    return lineage.collect(params, Layout.at(root), "0" * 64)
