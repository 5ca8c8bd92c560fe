"""The lineage's code state (training/lineage.py, git_state) on a real git repo: `dirty` only when a
tracked file that is code changed. params.yaml (recorded by value) and data/ (the line's outputs)
are the engine's own; the orchestrator's bookkeeping (DVC: dvc.lock, *.dvc, .dvc/, .gitignore)
is what it hands in. A fresh clone's first `dvc repro` rewrites dvc.lock, and `dvc exp run -S`
params.yaml: neither is a code change."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shardline import dvcrepo
from shardline.training.lineage import git_state

TRACKED = {"model.py": "x = 1\n", "params.yaml": "train: {steps: 4}\n", "dvc.lock": "schema: '2.0'\n",
           "data/.gitignore": "/shards\n", "data/metrics/.gitignore": "/train.csv\n", "extra.dvc": "outs: []\n",
           ".dvc/config": "[core]\n", ".gitignore": "/.venv/\n", "sub/pkg/util.py": "y = 2\n"}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    """A committed project: code, params, DVC's bookkeeping and ignore lists."""
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@example.com")
    git(tmp_path, "config", "user.name", "test")
    for name, text in TRACKED.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "project")
    return tmp_path


def test_a_clean_checkout_is_not_dirty_and_names_its_commit(repo):
    assert git_state(repo, dvcrepo.NOT_CODE) == {"commit": git(repo, "rev-parse", "HEAD"), "dirty": False}


def test_what_a_repro_or_an_experiment_rewrites_is_not_code(repo):
    for name in ("dvc.lock", "params.yaml", "data/.gitignore", "data/metrics/.gitignore", "extra.dvc", ".dvc/config",
                 ".gitignore"):
        (repo / name).write_text(TRACKED[name] + "# rewritten\n")
    (repo / "data/new.dvc").write_text("outs: []\n")
    git(repo, "add", "data/new.dvc")  # staged too
    assert git_state(repo, dvcrepo.NOT_CODE)["dirty"] is False


@pytest.mark.parametrize("change", ["edit", "staged", "deleted", "nested"])
def test_a_changed_code_file_is_dirty(repo, change):
    (repo / "dvc.lock").write_text("rewritten\n")  # beside it, as in a real run
    if change == "edit":
        (repo / "model.py").write_text("x = 2\n")
    elif change == "staged":
        (repo / "model.py").write_text("x = 2\n")
        git(repo, "add", "model.py")
    elif change == "deleted":
        (repo / "model.py").unlink()
    else:
        (repo / "sub/pkg/util.py").write_text("y = 3\n")
    assert git_state(repo, dvcrepo.NOT_CODE)["dirty"] is True


def test_the_engine_alone_knows_only_its_own_files(repo):
    """Without the orchestrator's list, params.yaml and data/ are still not code; dvc.lock is."""
    (repo / "params.yaml").write_text("train: {steps: 8}\n")
    (repo / "data/.gitignore").write_text("/shards\n/clean\n")
    assert git_state(repo)["dirty"] is False
    (repo / "dvc.lock").write_text("rewritten\n")
    assert git_state(repo)["dirty"] is True


def test_a_project_in_a_subfolder_of_its_repo_judges_its_own_paths(repo):
    """The patterns are the project root's: its data/ and params.yaml, wherever git's top is."""
    project = repo / "sub"
    (project / "data").mkdir()
    (project / "data/x.txt").write_text("a\n")
    (project / "params.yaml").write_text("a: 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a sub-project")
    (project / "data/x.txt").write_text("b\n")
    (project / "params.yaml").write_text("a: 2\n")
    assert git_state(project, dvcrepo.NOT_CODE)["dirty"] is False
    (repo / "model.py").write_text("x = 2\n")  # code elsewhere in the repo is still code
    assert git_state(project, dvcrepo.NOT_CODE)["dirty"] is True


def test_outside_git_nothing_is_claimed(tmp_path):
    assert git_state(tmp_path, dvcrepo.NOT_CODE) == {"commit": None, "dirty": None}
