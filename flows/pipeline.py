"""The end-to-end pipeline flow: every dvc.yaml stage in DVC's order, skipping what is current.

Design (DESIGN §2, option "run in-process, then record with DVC's commit"): for each stage in
the order DVC's graph gives, ask DVC whether it is up to date; if not, run its stage flow
in-process (parts become retried task runs) and `dvc commit` it, which writes the dvc.lock
entry `dvc repro` would write. Both paths therefore end in the same dvc.lock and both skip
up-to-date stages. DVC's repo lock is held for the whole stage, so a concurrent `dvc repro`
waits instead of racing; the lock is a file lock, released if this process dies.
"""

from __future__ import annotations

import time
from pathlib import Path

from prefect import flow, get_run_logger

from flows import dvcrepo
from flows.stages import FLOWS, run_stage


@flow(name="shardline-pipeline", log_prints=True)
def pipeline(root: str = ".", params_file: str = "params.yaml") -> dict:
    logger = get_run_logger()
    root = str(Path(root).resolve())
    report: dict = {}
    with dvcrepo.open_repo(root) as repo:
        for name in dvcrepo.stage_order(repo):
            t0 = time.perf_counter()
            with dvcrepo.locked(repo):
                if dvcrepo.is_up_to_date(repo, name):
                    logger.info(f"{name}: up to date, skipped")
                    report[name] = "skipped"
                    continue
                if name not in FLOWS:
                    raise RuntimeError(f"dvc.yaml stage {name!r} has no Prefect flow in flows.stages")
                run_stage(name, root, params_file)
                dvcrepo.commit(repo, name)
            report[name] = f"ran in {time.perf_counter() - t0:.1f}s"
            logger.info(f"{name}: {report[name]}, recorded in dvc.lock")
    return report


if __name__ == "__main__":
    pipeline()
