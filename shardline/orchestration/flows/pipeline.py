"""The end-to-end pipeline flow and the scheduled retrain flow, over the dvc.yaml DAG.

Design ("run in-process, then record with DVC's commit"): for each stage in
the order DVC's graph gives, one Prefect task run asks DVC whether the stage is up to date;
if not, it runs the stage (shardline.orchestration.flows.dispatch: in-process, its parts on the pool or Dask cluster
params.yaml's `parts` names, or as its stage flow on Ray) and `dvc commit`s it, which writes the dvc.lock entry `dvc repro`
would write. The stage task is defined here, beside the flow that composes it, because it may
start a stage flow. Both paths skip up-to-date stages and record the same deps,
params and data outputs. DVC's repo lock (a file lock, released if this process dies) is held
across each stage, so a concurrent `dvc repro` waits instead of racing.

Failures: a stage task retries only transient faults (shardline.core.errors.is_transient) with
exponential backoff and jitter; anything else fails the run at once with "stage <name>
failed: <cause and remedy>" as the flow-run state message. A re-run resumes at the failed
stage (DVC skips the finished ones) and inside it (parts, checkpoints on disk).
"""

from __future__ import annotations

import base64
import mimetypes
import os
import re
import subprocess
import time
from pathlib import Path
from uuid import UUID

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from shardline import dvcrepo
from shardline.orchestration.flows.dispatch import dispatch
from shardline import registry
from shardline.core import chaos, plugins
from shardline import paramsfile
from shardline.core.errors import DownloadError, ShardlineError
from shardline.core.layout import Layout
from shardline.core.markup import text
from shardline.core.stores import aws_env
from shardline.orchestration.tasks.invoke import run_log
from shardline.orchestration.tasks.options import options
from shardline.orchestration.tasks.progress import progress_sink


class StageFailed(ShardlineError):
    """A stage of the line failed; the message names the stage, the cause and the remedy."""


def run_and_record(name: str, root: str, params_file: str, force: bool = False) -> str:
    """Run one dvc.yaml stage unless DVC says it is up to date; record it in dvc.lock (the body of
    the line's stage-<name> task)."""
    logger = get_run_logger()
    layout = Layout.at(root)
    t0 = time.perf_counter()
    with dvcrepo.open_repo(layout.root) as repo, dvcrepo.locked(repo):
        if not force and dvcrepo.is_up_to_date(repo, name):
            logger.info(f"{name}: up to date, skipped")
            return "skipped"
        params = paramsfile.load(layout.root / params_file)
        dispatch(name, layout, params_file, params, log=run_log(logger), progress=progress_sink(name),
                 run_id=str(flow_run.id), recorded=True)  # recorded: dvc commit follows
        dvcrepo.commit(repo, name)
    took = f"ran in {time.perf_counter() - t0:.1f}s"
    logger.info(f"{name}: {took}, recorded in dvc.lock")
    return took


def _stage_task(name: str, params_file: str, root: str):
    params = paramsfile.load(Path(root, params_file))
    return task(run_and_record, **options(params, f"stage-{name}"), task_run_name=f"stage-{name}")


def _run_line(root: str, params_file: str, force: tuple[str, ...] = ()) -> dict:
    report: dict = {}
    with dvcrepo.open_repo(root) as repo:
        order = dvcrepo.stage_order(repo)
        dvcrepo.ignore_outputs(repo)  # those a failed `dvc repro` took out of .gitignore
    for name in order:
        try:
            registry.check(name, "dvc.yaml stage")
        except plugins.PluginError as e:
            raise StageFailed(str(e)) from None
        try:
            report[name] = _stage_task(name, params_file, root)(name, root, params_file, force=name in force)
        except Exception as e:
            raise StageFailed(f"stage {name} failed: {e}") from e
        chaos.point("pipeline.between", group=True)  # under `shardline serve`, the runner dies too
    card = Layout.at(root).evidence
    if card.exists():
        publish_card(card, _run_notes(report))
    return report


def publish_card(card: Path, notes: str = "") -> UUID:
    """The evidence card as the `evidence-card` markdown artifact, `notes` after it, its images
    inside it (`embed_images`)."""
    return create_markdown_artifact(embed_images(card.read_text(), card.parent) + notes, key="evidence-card",
                                    description="Shardline evidence card")


# ![alt](target) on a line of its own, as the card writes its plot: never one quoted inside a line (a
# file name in a code span), which would have a plot's bytes inlined there
IMAGE_LINK = re.compile(r"^(!\[[^\]]*\]\()([^)\s]+)(\))$", re.M)


def embed_images(markdown: str, folder: Path) -> str:
    """Each image `markdown` links by a relative path (the card's train.png) as a data: URI of its
    bytes. Why: the Prefect UI renders the markdown in the browser, which cannot reach a file beside
    the card, so the link shows a broken image; both of its UIs allow data:image/ URIs in an
    image's src (tests/integration/test_prefect_ui.py opens them). The card on disk keeps its
    link: a small, diffable file."""
    def embed(m: re.Match) -> str:
        path = folder / m.group(2)
        kind = mimetypes.guess_type(path.name)[0] or ""
        if ":" in m.group(2) or not kind.startswith("image/") or not path.is_file():
            return m.group(0)  # a URL (the UI reaches it itself), or nothing to embed
        return f"{m.group(1)}data:{kind};base64,{base64.b64encode(path.read_bytes()).decode()}{m.group(3)}"
    return IMAGE_LINK.sub(embed, markdown)


def _run_notes(report: dict) -> str:
    ran = [k for k, v in report.items() if v != "skipped"]
    return (f"\n## This Prefect run\n\n- flow run `{flow_run.id}`; stages run: {text(', '.join(ran) or 'none')}; "
            f"skipped (up to date): {text(', '.join(k for k in report if k not in ran) or 'none')}\n"
            "- task retries: see the stage-* task runs of this flow run\n")


@flow(name="shardline-pipeline", log_prints=True)
def pipeline(root: str = ".", params_file: str = "params.yaml") -> dict:
    """The whole line: every dvc.yaml stage, skipping what DVC says is up to date."""
    return _run_line(str(Path(root).resolve()), params_file)


@flow(name="shardline-retrain", log_prints=True)
def retrain(root: str = ".", params_file: str = "params.yaml") -> dict:
    """Re-check the sources; retrain only when the data version changed."""
    logger = get_run_logger()
    root = str(Path(root).resolve())
    params = paramsfile.load(Path(root, params_file))
    before = dvcrepo.out_hash(root, "data/raw")
    with dvcrepo.open_repo(root) as repo:
        bookkeeping = [s for s in dvcrepo.stage_order(repo) if s in registry.BOOKKEEPING]
    for name in ("download", *bookkeeping):  # what DVC cannot see changed: the sources, the plug-ins' releases
        _stage_task(name, params_file, root)(name, root, params_file, force=True)
    if dvcrepo.out_hash(root, "data/raw") == before:
        with dvcrepo.open_repo(root) as repo:  # the bookkeeping stages just ran: always changed, never pending
            pending = [s for s in dvcrepo.stage_order(repo)
                       if s not in registry.BOOKKEEPING and not dvcrepo.is_up_to_date(repo, s)]
        if not pending:
            why = f"sources unchanged (data/raw {before}): data version unchanged, nothing to train"
            logger.info(f"retrain: {why}")
            return {"retrained": False, "reason": why}
    report = _run_line(root, params_file)
    if params.retrain.git_commit:
        _git_commit(root, logger)
    if params.retrain.dvc_push:
        dvc_push(root, logger.info)
    return {"retrained": True, "stages": report}


def dvc_push(root: str, log=print) -> None:
    """`dvc push` to the project's default remote; S3 credentials come from the environment
    only (aws_env: without any, the EC2 metadata endpoint is never probed). DVC's own lines go to
    `log` (the flow-run log); a failed push is one transient DownloadError naming the remote and
    DVC's first error: the data is whole here, and a push again sends only what the remote lacks."""
    r = subprocess.run(["dvc", "push"], cwd=root, env=aws_env(dict(os.environ)), capture_output=True, text=True)
    for line in (r.stdout + r.stderr).splitlines():
        if line.strip():
            log(f"dvc push: {line.strip()}")
    if r.returncode:
        def dvc(*args: str) -> str:
            return subprocess.run(["dvc", *args], cwd=root, capture_output=True, text=True).stdout.strip()

        urls = {ln.split()[0]: ln.split()[1] for ln in dvc("remote", "list").splitlines() if len(ln.split()) > 1}
        name = dvc("remote", "default")
        first = next((ln.strip() for ln in r.stderr.splitlines() if ln.startswith("ERROR")), f"exit {r.returncode}")
        raise DownloadError(f"dvc push to {urls.get(name, name or 'the default remote')} failed: {first}; "
                            "the data is whole here: run 'dvc push' again (it sends only what the remote lacks)",
                            transient=True)


def _git_commit(root: str, logger) -> None:
    subprocess.run(["git", "add", "dvc.lock"], cwd=root, check=True)
    r = subprocess.run(["git", "commit", "-m", "retrain: new data version", "--", "dvc.lock"], cwd=root,
                       capture_output=True, text=True)
    logger.info(f"retrain: git commit of dvc.lock: {(r.stdout or r.stderr).strip().splitlines()[-1:]}")


if __name__ == "__main__":
    pipeline()
