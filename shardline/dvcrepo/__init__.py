"""The DVC adapter: DVC as the one declaration of the DAG: stage order, up-to-date checks, lock
records, and what DVC knows that a run records (the shards' md5, the checkpoints its cache holds).
The `shardline` command, the flows and shardline.orchestration.tasks.invoke use it; the engine never does.

The pipeline never keeps its own list of stages: `stage_order` reads dvc.yaml through DVC's
Python API (the same graph `dvc repro` walks). After the pipeline runs a stage in-process it
records it with `commit`, which writes the same dvc.lock entry `dvc repro` would (deps,
params and outs hashed by DVC itself) and saves the outputs to the DVC cache.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from shardline.core import chaos
from shardline.core.errors import ConfigError

# What DVC itself writes into the git work tree as it runs and records: its lock file (every
# `dvc repro` and `dvc exp run` rewrites it), the pointer files of `dvc add`, its own folder
# (config, `dvc remote add`), and the .gitignore beside each output. None of it is code, so the
# lineage's `dirty` must not count it (RunContext.not_code; git pathspec globs from the root).
NOT_CODE = ("dvc.lock", "**/*.dvc", ".dvc/**", "**/.gitignore")


@contextlib.contextmanager
def open_repo(root: str | Path) -> Iterator["object"]:
    """DVC's repo at `root`; dvc.yaml or dvc.lock that DVC cannot read (a key given twice, broken
    YAML, a field its schema refuses) is one ConfigError naming the file, the line and the fault."""
    from dvc.repo import Repo
    from dvc.utils.strictyaml import YAMLSyntaxError, YAMLValidationError

    repo = Repo(str(root))
    try:
        yield repo
    except (YAMLSyntaxError, YAMLValidationError) as e:
        raise ConfigError(_yaml_line(e, root)) from None
    finally:
        repo.close()


def _yaml_line(e: Exception, root: str | Path) -> str:
    """DVC's (ruamel's) account of a YAML file it refused, as one line: file (from the project
    root; DVC names it from the working directory), line, problem."""
    cause, path = e.__cause__, Path.cwd() / getattr(e, "path", "dvc.yaml")
    with contextlib.suppress(ValueError):
        path = path.resolve().relative_to(Path(root).resolve())
    mark = getattr(cause, "problem_mark", None)
    problem = getattr(cause, "problem", None) or str(e).splitlines()[0]
    where = f"line {mark.line + 1}: " if mark is not None else ""
    return f"{path}: {where}{problem}; fix it (DVC refuses the file as it is)"


def stage_order(repo) -> list[str]:
    """Stage names with every stage after the stages it depends on (ties: dvc.yaml order)."""
    import networkx as nx

    graph = repo.index.graph  # edges point from a stage to the stages producing its deps
    position = {s.addressing: i for i, s in enumerate(repo.index.stages)}
    order = nx.lexicographical_topological_sort(graph.reverse(copy=True), key=lambda s: f"{position[s.addressing]:06d}")
    return [s.addressing for s in order]


def locked(repo):
    """DVC's re-entrant repo lock (the one `dvc repro` takes), held across a whole stage."""
    from dvc.repo import lock_repo

    return lock_repo(repo)


def out_hash(root: str | Path, out: str) -> str | None:
    """The md5 dvc.lock records for output `out` (None before the first `dvc repro` records it):
    what the train stage puts in every checkpoint's lineage for data/shards."""
    import yaml

    lock = Path(root) / "dvc.lock"
    if not lock.exists():
        return None
    for stage in (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).values():
        for o in stage.get("outs", []):
            if o.get("path") == out:
                return o.get("md5")
    return None


def shards_md5(layout) -> str | None:
    return out_hash(layout.root, layout.rel(layout.shards))


def is_up_to_date(repo, name: str) -> bool:
    return not repo.status(targets=[name])


def commit(repo, name: str) -> None:
    """What `dvc commit --force <name>` does, in its two steps: the outputs into DVC's cache,
    then the dvc.lock entry (a kill between them, chaos point pipeline.commit, leaves the stage
    not recorded: the next run redoes it, finding every part done)."""
    for info in repo.stage.collect_granular(name):
        info.stage.save()
        info.stage.commit(filter_info=info.filter_info)
        chaos.point("pipeline.commit")
        info.stage.dvcfile.dump_stages([info.stage], update_pipeline=False)


def ignore_outputs(repo) -> None:
    """Put every cached dvc.yaml output in its .gitignore, as DVC does when it records one.
    DVC also takes them out again when a `dvc repro` fails: the outputs of the stages that
    repro finished before the failing one (dvc/repo/scm_context.py). The next repro skips those
    stages, so nothing would list them again, and git would offer to commit data/clean.
    Entries already listed are left alone (DVC then never removes them)."""
    for out in repo.index.outs:
        if Path(out.fspath).exists():  # as DVC: an output is listed once it is there
            out.ignore()


def in_cache(root: str | Path, out: str = "data/checkpoints"):
    """A check of whether a checkpoint directory can be restored by DVC: every file of it is in
    this repo's DVC cache *and* listed (by md5) in `out` of a dvc.lock that git holds for good (HEAD,
    a branch, a tag or a finished experiment: `dvc checkout` of it brings the file back; not DVC's
    refs of the experiment now running, `durable_ref`). Being in the cache alone is not enough:
    nothing would lead back to it, and `dvc gc` would drop it. Reads only (no repo lock: it runs
    inside `dvc repro`'s own stage commands)."""
    import hashlib

    def md5(f: Path) -> str:
        h = hashlib.md5()
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        return h.hexdigest()

    known: dict = {}

    def check(path: Path) -> bool:
        from dvc.exceptions import NotDvcRepoError
        from dvc.repo import Repo

        if "recorded" not in known:  # once per run: what git-held locks record does not change meanwhile
            try:
                repo = Repo(str(root))
            except NotDvcRepoError:  # `shardline stage train` in a plain folder: nothing is recorded
                known.update(recorded=set(), exists=lambda _: False)
            else:
                try:
                    known["recorded"] = _recorded(Path(root), out, repo.cache.local)
                    known["exists"] = repo.cache.local.exists
                finally:
                    repo.close()
        files = sorted(p for p in Path(path).rglob("*") if p.is_file())
        return bool(files) and all(h in known["recorded"] and known["exists"](h) for h in map(md5, files))

    return check


def durable_ref(ref: str) -> bool:
    """Whether git ref `ref` is a record that stays: a branch, a tag, or a finished experiment
    (refs/exps/<2 hex>/<38 hex>/<name>). Not DVC's working refs under refs/exps (exec/EXEC_MERGE,
    stash, apply, celery, temp): while `dvc exp run` runs, EXEC_MERGE and the stash hold the
    workspace's uncommitted dvc.lock, and they are gone when it ends, so what only they name is
    restorable from nothing once the experiment is done."""
    parts = ref.split("/")
    if parts[:2] == ["refs", "exps"]:
        hexdigits = set("0123456789abcdef")
        return (len(parts) == 5 and len(parts[2]) == 2 and len(parts[3]) == 38
                and set(parts[2] + parts[3]) <= hexdigits)
    return parts[:2] in (["refs", "heads"], ["refs", "tags"])


def _recorded(root: Path, out: str, odb) -> set[str]:
    """The md5 of every file that a dvc.lock of HEAD or a durable ref (`durable_ref`) records
    under `out`."""
    import json
    import subprocess

    import yaml

    def git(*args: str) -> str:
        r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return r.stdout if r.returncode == 0 else ""

    refs = git("for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags", "refs/exps")
    commits = {sha for sha, ref in (line.split(" ", 1) for line in refs.splitlines()) if durable_ref(ref)}
    commits |= set(git("rev-parse", "--verify", "-q", "HEAD").split())
    listed: set[str] = set()
    for c in sorted(commits):
        lock = yaml.safe_load(git("show", f"{c}:dvc.lock") or "{}") or {}
        for stage in (lock.get("stages") or {}).values():
            for o in stage.get("outs", []):
                obj = odb.oid_to_path(o["md5"]) if o.get("path") == out and o.get("md5", "").endswith(".dir") else None
                if obj and Path(obj).exists():
                    listed |= {e["md5"] for e in json.loads(Path(obj).read_text())}
    return listed
