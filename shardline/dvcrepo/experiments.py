"""DVC experiments as `shardline mix-search` uses them: queue one by name with `-S` settings,
start the queue's workers, ask the queue where each task stands, read finished experiments back.

Queueing and starting go through the `dvc` command itself (`dvc exp run --queue`, `dvc queue
start`), exactly as a user would type them, so each proxy is an ordinary experiment with its
lineage (docs/experiments.md). Polling asks the queue in-process (`states`): a `dvc queue status`
process per poll would cost a second of CPU each time, taken from the proxies' training.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from shardline.core.errors import BadInput

# a queue task's status, as `dvc queue status` prints it
QUEUED, RUNNING, SUCCESS, FAILED = "Queued", "Running", "Success", "Failed"


def _dvc() -> str:
    """The dvc of this environment (beside this Python), else the one on PATH."""
    here = Path(sys.executable).parent / "dvc"
    return str(here) if here.exists() else (shutil.which("dvc") or "dvc")


def _run(root: Path, *args: str) -> str:
    r = subprocess.run([_dvc(), *args], cwd=root, capture_output=True, text=True)
    if r.returncode != 0:
        err = (r.stderr.strip() or r.stdout.strip()).splitlines()
        raise BadInput(f"dvc {args[0]} {args[1]}: {err[-1] if err else f'exit {r.returncode}'}; run it by hand "
                       "to see why (a committed project after 'dvc repro' is needed: 'git commit -am trained')")
    return r.stdout


def baseline(root: Path) -> str:
    """The commit experiments are queued on (HEAD): a search's proxies are experiments of it."""
    r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    if r.returncode != 0:
        raise BadInput(f"{root}: not a git repository with a commit; experiments need one ('git init', "
                       "'dvc init', 'dvc repro', 'git add -A && git commit -m trained')")
    return r.stdout.strip()


def queue(root: Path, proxies: list[tuple[str, list[str]]], targets: list[str]) -> None:
    """For each (name, settings): what `dvc exp run --queue -n NAME -S ... TARGETS` does, all in
    one process (a `dvc` process each would spend ~2 s of CPU apiece starting up)."""
    from dvc.exceptions import DvcException

    from shardline.dvcrepo import open_repo

    with open_repo(root) as repo:
        for name, settings in proxies:
            try:
                repo.experiments.run(targets=targets, params=settings, queue=True, name=name)
            except DvcException as e:
                raise BadInput(f"dvc exp run --queue -n {name}: {e}; run it by hand to see why") from None


def start(root: Path, jobs: int) -> subprocess.Popen:
    """`dvc queue start -j N`, not waited for: DVC starts workers only where fewer are running,
    and to count them it asks the running ones, which answer only between tasks (a worker left
    idle by an earlier search takes the queued proxies at once): waiting would hold the search,
    its progress lines included, until the queue is empty. `started` checks the result."""
    return subprocess.Popen([_dvc(), "queue", "start", "-j", str(jobs)], cwd=root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def started(proc: subprocess.Popen | None) -> None:
    """Raise BadInput if a `start` ended in an error; nothing while it runs or once it succeeded."""
    if proc is None or proc.poll() is None or proc.returncode == 0:
        return
    err = (proc.stderr.read() if proc.stderr else "").strip().splitlines()
    raise BadInput(f"dvc queue start: {err[-1] if err else f'exit {proc.returncode}'}; run it by hand to see why")


def live_workers(root: Path) -> list[int]:
    """pids of the queue's live workers, from the record DVC keeps of each worker process
    (.dvc/tmp/exps/celery/dvc-exp-worker-N.json: its pid, and a returncode once it has exited).
    Read from disk: asking the workers themselves (`dvc queue status`) waits a second for replies."""
    out = []
    for f in (Path(root) / ".dvc/tmp/exps/celery").glob("dvc-exp-worker-*.json"):
        try:
            info = json.loads(f.read_text())
        except (OSError, ValueError):  # being written as a worker starts: read again at the next poll
            continue
        if info.get("returncode") is None and info.get("pid"):
            try:
                os.kill(int(info["pid"]), 0)
            except ProcessLookupError:
                continue
            except PermissionError:  # alive, another user's
                pass
            out.append(int(info["pid"]))
    return out


def kill(root: Path, names: list[str], tries: int = 10) -> None:
    """Make "Running" tasks that no worker runs any more failed, so that `remove` takes them:
    `dvc queue kill` stops a task's process if one is left, and marks the task failed once its
    process is gone (so it is asked again until no task of `names` is running)."""
    for _ in range(tries):
        left = [n for n in names if states(root).get(n) == RUNNING]
        if not left:
            return
        subprocess.run([_dvc(), "queue", "kill", *left], cwd=root, capture_output=True, text=True)
        time.sleep(0.5)
    raise BadInput(f"dvc queue kill {' '.join(left)}: still running after {tries} tries; stop it by hand "
                   "('dvc queue kill --force NAME', 'dvc queue remove NAME') and run 'shardline mix-search' again")


def remove(root: Path, names: list[str]) -> None:
    """Take failed tasks out of the queue, so that a new task of the same name is the only one."""
    if names:
        _run(root, "queue", "remove", *names)


def states(root: Path) -> dict[str, str]:
    """name -> the status of its newest queue task (QUEUED, RUNNING, SUCCESS, FAILED).

    What `dvc queue status` says, read without waiting: DVC's own status() finds a done task,
    then looks its result up a second time and waits for it with no timeout. A task removed
    between the two reads (`dvc queue remove` forgets its result, then drops its message; the
    search removes a lost proxy while anything else polls) is no longer done at the second read,
    and the wait never ends (CI, stop 45: a poll hung 600 s). Here a done task's outcome is read
    once, from the run file its worker wrote: a success is one with an experiment ref, as DVC
    counts it. (LocalCeleryQueue's _iter_done_tasks and _load_info: the same calls status() is
    made of, in every dvc 3 release.)"""
    from shardline.dvcrepo import open_repo

    def status():
        with open_repo(root) as repo:
            q = repo.experiments.celery_queue
            rows = [(e, RUNNING) for e in q.iter_active()] + [(e, QUEUED) for e in q.iter_queued()]
            for _, entry in q._iter_done_tasks():
                try:
                    result = q._load_info(entry.stash_rev).result
                except FileNotFoundError:  # a worker that died before writing it: a failure, as DVC says
                    result = None
                rows.append((entry, SUCCESS if result and result.exp_hash and result.ref_info else FAILED))
            when = {e.stash_rev: repo.scm.resolve_commit(e.stash_rev).commit_time for e, _ in rows}
            return sorted(rows, key=lambda r: when[r[0].stash_rev])

    return {e.name: state for e, state in _again(status) if e.name}


def _again(read, tries: int = 10):
    """read(), asked again when a queue worker removed a task's run file or temp workspace, or was
    writing its run file (DVC writes it in place), while DVC read it: with two workers, now and
    then. A moment later the task is in its next state."""
    from dvc.exceptions import NotDvcRepoError
    from dvc.utils.serialize import ParseError

    for attempt in range(tries):
        try:
            return read()
        except (FileNotFoundError, NotDvcRepoError, ParseError):
            if attempt == tries - 1:
                raise
            time.sleep(0.2)


def collected(root: Path) -> set[str]:
    """Names of the experiments whose ref DVC wrote into the repository (refs/exps/.../<name>)."""
    from dvc.repo.experiments.utils import exp_refs

    from shardline.dvcrepo import open_repo

    with open_repo(root) as repo:
        return {ref.name for ref in exp_refs(repo.scm)}


def finished(root: Path, files: tuple[str, ...] = ()) -> dict[str, dict]:
    """name -> {"rev", "params", "metrics"} for each experiment of HEAD that has ended with its
    results: its ref written (refs/exps/.../<name>, which DVC writes as an experiment ends), read
    as `dvc exp show --json` reads its successful experiments, in-process (a `dvc` process per
    finished proxy would cost more CPU than the search's own work). Only those: `dvc exp show`
    also reads each running experiment from its executor's temporary repository, which the
    worker removes as the experiment ends; a pygit2 blob read racing that removal hung a search
    for good (once in about ten runs of the mix-search tests). `files` (paths from `root`) are
    read too, at each experiment's revision, as `dvc metrics show <file>` reads a file that
    dvc.yaml does not declare a metric (eval.json: `dvc exp show` prints the headline only)."""
    from dvc.repo.experiments.collect import collect_successful
    from dvc.repo.experiments.utils import exp_refs

    from shardline.dvcrepo import open_repo

    def show():
        with open_repo(root) as repo:
            head = repo.scm.get_rev()
            ended = {ref.name: repo.scm.get_ref(str(ref)) for ref in exp_refs(repo.scm)}
            shown = [e.dumpd() for e in collect_successful(repo, [head]).get(head, [])]
            revs = [rev for rev in ended.values() if rev]
            more = repo.metrics.show(targets=[str(Path(root, f).resolve()) for f in files], revs=revs,
                                     hide_workspace=False) if files and revs else {}
            extra = {rev: {k: v.get("data") for k, v in (r.get("data") or {}).items()} for rev, r in more.items()}
            return ended, json.loads(json.dumps(shown, default=str)), json.loads(json.dumps(extra, default=str))

    ended, shown, extra = _again(show)
    out = {}
    for e in shown:
        for rev in e["revs"]:
            d = rev.get("data") or {}
            if rev.get("name") and not rev.get("error") and ended.get(rev["name"]) == rev["rev"]:
                out[rev["name"]] = {"rev": rev["rev"], "params": d.get("params", {}).get("params.yaml", {}).get("data"),
                                    "metrics": {**{k: v.get("data") for k, v in (d.get("metrics") or {}).items()},
                                                **extra.get(rev["rev"], {})}}
    return out
