"""A stage run's one `RunContext`, and the call of the stage's engine entry point with it.

Contract: `run_context` is the only place a `shardline.context.RunContext` is built for a stage
run (the `shardline` command, the pipeline's stage task and the stage flows all come here). It is
given what its caller alone knows (a log, a Prefect progress sink, a mapper, the command line's
--run-id / --shards-md5, whether DVC records the outputs next) and fills in the rest from the
environment and DVC:

- run_id: the caller's, else a Prefect flow run's (PREFECT__FLOW_RUN_ID, set in a deployment's
  flow-run process); torchrun's ranks get it as --run-id from the process that launched them.
- shards_md5: the caller's, else the md5 dvc.lock records for data/shards.
- new_run, run_name: `dvc exp run` marks its stage commands with DVC_EXP_NAME, the experiment's name
  (the trackers' run name).
- recoverable: DVC's cache holds a checkpoint (dvcrepo.in_cache), so making room loses nothing.
- recorded: the caller's, else whether `dvc repro` runs this command (DVC_STAGE): DVC commits the
  outputs next.
- not_code: what DVC writes in the git work tree (dvcrepo.NOT_CODE), so the lineage's code is not
  dirty for a dvc.lock that `dvc repro` rewrote.
- parent (report): under `dvc exp run` (DVC_EXP_BASELINE_REV), the baseline commit's run, read
  from DVC's cache (shardline.dvcrepo.revisions), which the card compares this run with.

The train-only fields stay at their defaults for the other stages. Prefect-free: `shardline
stage` imports this on every run, and Prefect only when the stage's parts go to a task runner.
"""

from __future__ import annotations

import functools
import os
from typing import Callable

from shardline import registry, stages
from shardline.context import RunContext
from shardline.core.config import Params
from shardline.core.layout import Layout
from shardline.core.parallel import process_map, thread_map
from shardline.core.progress import Sink


def run_context(name: str, layout: Layout, *, log: Callable[[str], None], progress: Sink | None = None,
                mapper: Callable | None = None, run_id: str | None = None, shards_md5: str | None = None,
                recorded: bool | None = None) -> RunContext:
    """The context of one run of stage `name`; `progress` feeds a data stage's sink and train's
    on_step."""
    sink = progress if name in registry.DATA else None
    if name == "report":
        return RunContext(log=log, mapper=mapper, parent=baseline(layout, log))
    if name != "train":
        return RunContext(log=log, mapper=mapper, sink=sink)
    from shardline import dvcrepo

    on_step = (lambda s, n: progress(name, s / max(n, 1), f"step {s}/{n}")) if progress else None
    return RunContext(log=log, mapper=mapper, sink=sink, on_step=on_step,
                      run_id=run_id or os.environ.get("PREFECT__FLOW_RUN_ID"),
                      shards_md5=shards_md5 or dvcrepo.shards_md5(layout), not_code=dvcrepo.NOT_CODE,
                      new_run=bool(os.environ.get("DVC_EXP_NAME")), run_name=os.environ.get("DVC_EXP_NAME") or None,
                      recoverable=dvcrepo.in_cache(layout.root),
                      recorded=bool(os.environ.get("DVC_STAGE")) if recorded is None else recorded)


def baseline(layout: Layout, log: Callable[[str], None]):
    """Under `dvc exp run` (DVC_EXP_BASELINE_REV), the baseline commit's run, read from DVC's cache;
    None otherwise, or when the baseline recorded no checkpoint (said in one line)."""
    rev = os.environ.get("DVC_EXP_BASELINE_REV")
    if not rev:
        return None
    from shardline.core.errors import ShardlineError
    from shardline.dvcrepo import revisions
    from shardline.results import runs

    try:
        view, commit, _ = revisions.view(layout.root, rev)
        return runs.latest(f"the baseline {commit[:12]}", view)
    except ShardlineError as e:
        log(f"report: no baseline run to compare with: {e}")
        return None


def run_log(logger) -> Callable[[str], None]:
    """A stage's `log` over a Prefect run logger: a line the engine says as a warning ("warning: ...",
    damage it read past) at WARNING, so the flow run's log keeps it where a level or a UI filter
    hides INFO; every other line at INFO."""
    return lambda line: (logger.warning if line.startswith("warning: ") else logger.info)(line)


def invoke(name: str, params: Params, layout: Layout, ctx: RunContext):
    """Run stage `name` in this process with `ctx`: train and a plug-in stage take it whole; the
    others take its log, its mapper (when set; else their own pool, of `parts.workers` when that
    is set) and, the data stages, its sink."""
    run = stages.run_of(name)
    if name == "train" or name not in registry.NAMES:
        return run(params, layout, ctx)
    kw: dict = {"log": ctx.log}
    if ctx.mapper is not None:
        kw["mapper"] = ctx.mapper
    elif name in registry.PARTED and params.parts.workers:  # the engine's own pool, of parts.workers
        pool = process_map if name in registry.GIL_BOUND else thread_map
        kw["mapper"] = functools.partial(pool, workers=params.parts.workers)
    if name in registry.DATA:
        kw["sink"] = ctx.sink
    if ctx.parent is not None:
        kw["parent"] = ctx.parent
    return run(params, layout, **kw)
