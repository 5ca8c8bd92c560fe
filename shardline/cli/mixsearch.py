"""`shardline mix-search`: proxy runs over data mixes as DVC experiments, in rounds, a law fitted
to their per-source held-out loss, a recommended mix and its evidence (data/reports/mix_search.md).

The design (which mixes, round by round, what is fitted, what is recommended) is the engine's
(shardline.results.mixsearch, mixlaws, mixfit, mixrecommend, mixreport): pure functions of
params.yaml, the baseline commit and the proxies' measurements; mixrecommend.search calls back
here for each round's measurements. This command only runs the proxies: each is `dvc exp run
--queue -n <name>` of the train stage, run by the queue's workers (`dvc queue start`), so each
has its lineage and shows in `dvc exp show`.

Resume: a proxy is found by its name. One that `dvc exp show` lists with its eval is finished
and never redone; one still queued or running (its worker outlives a killed search) is waited
for; a failed one is taken off the queue and queued again; a missing one is queued. So a search
killed at any point and run again ends with the result an unkilled one gives.

Lost runs: DVC's queue loses a task now and then, in two ways seen in CI with two workers. It calls
a task a success once its worker's collect step has ended, even when that step failed (DVC logs
the error in the worker's log and goes on): the experiment never reaches the repository. And a
worker that stops because the queue was empty can receive a task as it stops: the task stays
"Running" with no worker (a killed worker leaves the same). Either proxy, a success with no
experiment ref or a "Running" one with no worker alive, seen during the search or when it resumes,
is taken off the queue and queued again (a proxy is deterministic: its result is the one it would
have had), at most REQUEUES times.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from shardline.cli import log
from shardline.dvcrepo import experiments
from shardline import paramsfile
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.filenames import EVAL_JSON
from shardline.results import mixrecommend, mixreport, mixsearch
from shardline.results.mixsearch import Proxy

TARGETS = ["train"]  # a proxy needs its held-out eval (eval.json), not the evidence card the report stage writes
STALL_POLLS = 10  # polls with nothing running before the workers are started again (a worker starts in ~2 s)
ORPHAN_POLLS = 5  # polls a task may be "Running" with no queue worker alive before it counts as lost
MISSING_POLLS = 3  # polls a task may be in no state of the queue before it counts as removed
REQUEUES = 2  # times one proxy DVC's queue lost is queued again before the search gives up
WORKER_LOGS = ".dvc/tmp/exps/celery/dvc-exp-worker-*.out"
POLL_S = 1.0  # the queue is asked in-process (~20 ms of CPU): a second's latency costs nothing


def _figures(exp: dict, metric: str, names: list[str]) -> dict[str, float] | None:
    """A finished experiment's per-source figure, None when it has no eval (it did not train)."""
    ev = next((v for k, v in exp["metrics"].items() if k.endswith(EVAL_JSON)), None)
    if not ev or not all(n in ev.get("sources", {}) for n in names):
        return None
    return {n: float(ev["sources"][n][metric]) for n in names}


def run_proxies(root: Path, params, proxies: list[Proxy], total: int | None = None) -> dict[str, dict[str, float]]:
    """name -> per-source figure for every proxy, running those not finished yet."""
    names, metric = mixsearch.source_names(params), mixsearch.metric(params)
    layout = Layout.at(root)
    evals = layout.rel(layout.metrics / EVAL_JSON)  # an output, not a metric (dvc.yaml): read at each proxy's revision
    total, workers = total or len(proxies), params.mix_search.workers

    def collect(pending: list[Proxy]) -> dict[str, dict[str, float]]:
        shown = experiments.finished(root, (evals,))
        return {p.name: f for p in pending if p.name in shown and (f := _figures(shown[p.name], metric, names))}

    def enqueue(pending: list[Proxy]) -> None:
        experiments.queue(root, [(p.name, mixsearch.settings(params, p)) for p in pending], TARGETS)

    have = collect(proxies)
    todo = [p for p in proxies if p.name not in have]
    if have:
        log(f"mix-search: {len(have)} proxy run(s) already finished, kept: {', '.join(sorted(have))}")
    if not todo:
        return have
    st = experiments.states(root)
    experiments.remove(root, [p.name for p in todo if st.get(p.name) == experiments.FAILED])
    # a success not in `have` is one whose experiment DVC lost: the loop queues it again, as it does one lost now
    fresh = [p for p in todo if st.get(p.name) not in (experiments.QUEUED, experiments.RUNNING, experiments.SUCCESS)]
    enqueue(fresh)
    log(f"mix-search: {len(fresh)} proxy run(s) queued, {len(todo) - len(fresh)} already in the queue")
    starting = experiments.start(root, workers)
    idle = orphaned = missing = 0
    lost = Counter()

    def again(pending: list[Proxy], why: str, running: bool = False) -> None:
        """Queue again proxies whose run DVC's queue lost, and start workers if none is left."""
        nonlocal starting
        for p in pending:
            lost[p.name] += 1
            if lost[p.name] > REQUEUES:
                raise BadInput(f"proxy run {p.name}: lost by DVC's queue {lost[p.name]} times (last: {why}); see "
                               f"{WORKER_LOGS}")
            log(f"mix-search: proxy run {p.name}: {why} (see {WORKER_LOGS}); queued again")
        if running:
            experiments.kill(root, [p.name for p in pending])
        experiments.remove(root, [p.name for p in pending])
        enqueue(pending)
        if starting.poll() is not None:
            starting = experiments.start(root, workers)

    while todo:
        time.sleep(POLL_S)
        experiments.started(starting)
        st = experiments.states(root)
        running = [p for p in todo if st.get(p.name) == experiments.RUNNING]
        # a worker leaves when the queue is empty; one leaving as `dvc queue start` looked counted as
        # running and none came: tasks queued, none running for a while, so start workers again
        idle = 0 if running else idle + 1
        if idle >= STALL_POLLS and starting.poll() is not None:
            starting = experiments.start(root, workers)
            idle = 0
        # a task a worker took and never ran to its end: a worker stopping as it received it (the
        # queue was empty a moment before), or one killed: "Running" while no worker is alive
        gone = running and starting.poll() is not None and not experiments.live_workers(root)
        orphaned = orphaned + 1 if gone else 0
        if orphaned >= ORPHAN_POLLS:
            again(running, "its queue worker stopped without running it to its end", running=True)
            orphaned = 0
            continue
        failed = [p.name for p in todo if st.get(p.name) == experiments.FAILED]
        if failed:
            raise BadInput(f"proxy run {failed[0]} failed; see 'dvc queue logs {failed[0]}', then run "
                           "'shardline mix-search' again (it queues a failed run again, keeps the finished ones)")
        ended = [p for p in todo if st.get(p.name) == experiments.SUCCESS]
        # DVC lists running tasks, then queued ones: a task a worker takes between the two reads is
        # in neither (seen with one task left), so a task counts as gone only when it stays away
        waiting = any(st.get(p.name) in (experiments.QUEUED, experiments.RUNNING) for p in todo)
        missing = 0 if ended or waiting else missing + 1
        if not ended:
            if missing >= MISSING_POLLS:
                raise BadInput(f"proxy run {todo[0].name}: no longer in the queue (removed?); run "
                               "'shardline mix-search' again to queue it")
            continue
        got = collect(ended)
        for p in ended:
            if p.name in got:
                have[p.name] = got[p.name]
                log(f"mix-search: proxy {len(have)}/{total} finished: {p.name} "
                    f"({', '.join(f'{n} {w:.3f}' for n, w in p.mix.items())}) target "
                    f"{mixsearch.target_of(params, got[p.name]):.4f}")
            elif p.name not in experiments.collected(root):  # a success comes after the collect step: lost
                again([p], "DVC's queue calls it a success but never collected its experiment")
            else:
                raise BadInput(f"proxy run {p.name}: finished without {EVAL_JSON} at its revision; check "
                               f"'dvc queue logs {p.name}'")
        todo = [p for p in todo if p.name not in have]
    return have


def cmd_mix_search(args: argparse.Namespace) -> int:
    layout = Layout.at(args.root)
    params = paramsfile.load(Path(layout.root, args.params))
    if len(params.sources) < 2:  # every proxy would train the one mix there is
        raise BadInput(f"mix_search: the line has one source ({params.sources[0].name}), and a mix search weighs "
                       "sources against each other; add a source to `sources`, or train the line as it is (dvc repro)")
    rounds = params.mix_search.rounds

    def measure(r: int, centre: dict[str, float], proxies: list[Proxy]) -> dict[str, dict[str, float]]:
        log(f"mix-search: {f'round {r + 1}/{rounds}: ' if rounds > 1 else ''}{len(proxies)} proxy runs "
            f"{proxies[0].name[:-3]}-00..{len(proxies) - 1:02d} around "
            f"{', '.join(f'{n} {w:.3f}' for n, w in centre.items())}")
        return run_proxies(layout.root, params, proxies)

    proxies, measured, drawn = mixrecommend.search(params, experiments.baseline(layout.root), measure)
    r = mixreport.result(params, proxies, measured, rounds=drawn)
    if args.validate or params.mix_search.validate_best:
        best = mixsearch.validation_proxy(proxies, r["optimum"]["mix"])
        if best.name in measured:
            log(f"mix-search: the law's best mix is proxy {best.name}'s, measured already: it is the validation")
            got = measured
        else:
            log(f"mix-search: validating the law's best mix as {best.name}")
            got = run_proxies(layout.root, params, [best])
        r = mixreport.result(params, proxies, measured, (best, got[best.name]), drawn)
    mixreport.write(r, layout)
    for line in mixreport.terminal(r):
        print(line)
    print(f"report: {layout.rel(layout.mix_search_report)}")
    return 0


def add_parser(sub) -> None:
    s = sub.add_parser("mix-search", help="proxy runs over data mixes (DVC experiments), a fitted law per source, "
                       "a recommended mix and its report (params: mix_search)")
    s.add_argument("--validate", action="store_true", help="also run the law's best mix as a proxy and print "
                   "its measured target, its prediction and the best proxy's, side by side")
    s.set_defaults(fn=cmd_mix_search)
