"""A revision's outputs where the engine can read them: `view(root, rev)` for `shardline diff` and the
evidence card's "what changed".

Contract: `rev` is a git revision (a commit, branch, tag, `HEAD~1`) or a DVC experiment's name
(`dvc exp show` lists them). Its dvc.lock (read from git, never checked out) names each output's
md5; `view` links every file of the outputs a comparison reads (every output under data/ but
data/raw) from this repo's DVC cache into `.shardline/views/<commit>/`, beside that revision's
params.yaml, so a Layout there reads that revision's data as a checkout would, and the work tree
is never touched. Links are hard links (the cache's files are read-only: nothing can change them
through the view), symlinks across filesystems. A view is made once per commit: its `.complete`
marker is written last, so a view cut short by a kill is made again. A file the cache does not
hold (gc'd, never pulled) is left out and named in `missing`, so the caller can say which
comparison it lacks. An unknown revision is one BadInput naming what was tried.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import yaml

from shardline.core import fsio
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.filenames import PARAMS

SKIP = ("data/raw",)  # inputs, not what a comparison reads: the sources' files are in the lineage by sha256
COMPLETE = ".complete"


def _git(root: Path, *args: str) -> str | None:
    r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def resolve(root: Path, rev: str) -> str:
    """The commit `rev` names: a git revision, else an experiment's name (refs/exps/.../<name>)."""
    commit = _git(root, "rev-parse", "--verify", "-q", f"{rev}^{{commit}}")
    if commit:
        return commit.strip()
    refs = _git(root, "for-each-ref", "refs/exps", "--format=%(refname) %(objectname)") or ""
    found = [sha for ref, sha in (line.split() for line in refs.splitlines()) if ref.rsplit("/", 1)[-1] == rev]
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise BadInput(f"{rev}: {len(found)} experiments have this name (on different baselines); give the commit "
                       "('dvc exp show --sha' lists them)")
    raise BadInput(f"{rev}: not a checkpoint (step-NNNNNNNNN, latest), a git revision or a DVC experiment of "
                   f"{root}; 'shardline checkpoints', 'git log' and 'dvc exp show' list them")


def view(root: str | Path, rev: str) -> tuple[Layout, str, list[str]]:
    """(a Layout over `rev`'s outputs, its commit, the files the cache lacked)."""
    root = Path(root)
    commit = resolve(root, rev)
    layout = Layout.at(root)
    where = layout.views / commit
    try:  # a view whose marker is damaged is made again, like one a kill cut short
        return Layout.at(where), commit, list(json.loads((where / COMPLETE).read_text())["missing"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    lock = _git(root, "show", f"{commit}:dvc.lock")
    if lock is None:
        raise BadInput(f"{rev} ({commit[:12]}): no dvc.lock in that commit: nothing was recorded there ('dvc repro' "
                       "and 'git commit' record a run)")
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    params = _git(root, "show", f"{commit}:{PARAMS}")
    if params is not None:
        (where / PARAMS).write_text(params)
    missing = _link_outputs(root, where, yaml.safe_load(lock) or {})
    fsio.write_json(where / COMPLETE, {"rev": rev, "commit": commit, "missing": missing})
    return Layout.at(where), commit, missing


def _link_outputs(root: Path, where: Path, lock: dict) -> list[str]:
    from dvc.repo import Repo

    repo = Repo(str(root))
    try:
        odb = repo.cache.local
        missing: list[str] = []
        for stage in (lock.get("stages") or {}).values():
            for out in stage.get("outs", []):
                path, md5 = out.get("path", ""), out.get("md5", "")
                if not md5 or not path.startswith("data/") or path.startswith(SKIP):
                    continue
                obj = Path(odb.oid_to_path(md5))
                if not md5.endswith(".dir"):
                    _link(obj, where / path, missing, path)
                    continue
                if not obj.exists():
                    missing.append(path)
                    continue
                for entry in json.loads(obj.read_text()):
                    _link(Path(odb.oid_to_path(entry["md5"])), where / path / entry["relpath"], missing,
                          f"{path}/{entry['relpath']}")
        return missing
    finally:
        repo.close()


def _link(src: Path, dest: Path, missing: list[str], name: str) -> None:
    if not src.exists():
        missing.append(name)
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:  # another filesystem
        os.symlink(src, dest)


def others(root: str | Path, skip: set[str]) -> list[tuple[str, str]]:
    """(name, commit) of every other recorded run: each branch head and experiment but the commits
    in `skip`, for `shardline diff` to find the runs that differ from its two only by a seed."""
    root = Path(root)
    refs = _git(root, "for-each-ref", "refs/heads", "refs/exps", "--format=%(refname) %(objectname)") or ""
    out, seen = [], set(skip)
    for ref, sha in (line.split() for line in refs.splitlines()):
        if sha not in seen:
            seen.add(sha)
            out.append((ref.rsplit("/", 1)[-1], sha))
    return out


def manifests(root: str | Path, commits: list[str]) -> dict[str, object]:
    """commit -> the newest checkpoint manifest its dvc.lock records (a Manifest), read from DVC's
    cache; None when it records none or the cache lacks it. Nothing is linked or checked out."""
    from shardline.core.errors import ShardlineError
    from shardline.core.filenames import MANIFEST, step_of
    from shardline.training.records import Manifest

    root, out = Path(root), {}
    listed = {}
    for commit in commits:
        lock = yaml.safe_load(_git(root, "show", f"{commit}:dvc.lock") or "{}") or {}
        md5 = [o["md5"] for st in (lock.get("stages") or {}).values() for o in st.get("outs", [])
               if o.get("path") == "data/checkpoints" and str(o.get("md5", "")).endswith(".dir")]
        listed[commit] = md5[0] if md5 else None
    if not any(listed.values()):
        return dict.fromkeys(commits)
    from dvc.repo import Repo

    repo = Repo(str(root))
    try:
        odb = repo.cache.local
        for commit, md5 in listed.items():
            out[commit] = None
            listing = Path(odb.oid_to_path(md5)) if md5 else None
            if listing is None or not listing.exists():
                continue
            entries = {e["relpath"]: e["md5"] for e in json.loads(listing.read_text())}
            for rel in sorted((r for r in entries if r.endswith(f"/{MANIFEST}")),
                              key=lambda r: step_of(r.split("/")[0]) or -1, reverse=True):
                path = Path(odb.oid_to_path(entries[rel]))
                try:
                    out[commit] = Manifest.from_json(json.loads(path.read_text()), f"{commit[:12]}:{rel}")
                    break
                except (OSError, ValueError, ShardlineError):  # not in the cache, or not one this release reads
                    continue
        return out
    finally:
        repo.close()
