"""The commands that run the line: `shardline stage`, `pipeline`, `serve`, `deploy`, `worker`.

Contract: `stage NAME` runs one dvc.yaml stage through shardline.orchestration.flows.dispatch (in-process, or its parts on
the task runner params.yaml's `parts` names) with what this process knows: --run-id and
--shards-md5 (torchrun's ranks get them from the process that launched them), and whether
`dvc repro` runs it. The Prefect commands import Prefect only when they run.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from shardline import registry
from shardline.cli import log
from shardline.orchestration.flows.dispatch import dispatch
from shardline.core import chaos
from shardline import paramsfile
from shardline.core.layout import Layout


def cmd_stage(args: argparse.Namespace) -> int:
    registry.check(args.name)  # one line naming every stage, before params.yaml is read
    layout = Layout.at(args.root)
    params = paramsfile.load(Path(layout.root, args.params))
    t0 = time.perf_counter()
    # `dvc repro` runs this as a stage's command; torchrun's ranks (LOCAL_RANK) inherit DVC_STAGE
    # from the process that launched them, which alone is dvc's command
    under_dvc = bool(os.environ.get("DVC_STAGE")) and "LOCAL_RANK" not in os.environ
    if under_dvc:
        from shardline import dvcrepo

        with dvcrepo.open_repo(layout.root) as repo:
            dvcrepo.ignore_outputs(repo)  # those an earlier failed `dvc repro` took out of .gitignore
    dispatch(args.name, layout, args.params, params, log=log, run_id=args.run_id, shards_md5=args.shards_md5)
    done = f"{args.name}: done in {time.perf_counter() - t0:.1f}s"
    if args.name == "report":  # the line's last stage: its last line says where to look next
        done += f"; the evidence card is {layout.rel(layout.evidence)}" + (
            f", its plot {layout.rel(layout.plot)}" if layout.plot.exists() else "")
    log(done)
    if under_dvc:
        chaos.point("dvc.record", group=True)  # the stage done, dvc not yet told: dvc dies with it
    return 0


def cmd_pipeline(args: argparse.Namespace) -> int:
    from shardline.orchestration.flows.pipeline import pipeline

    report = pipeline(root=args.root, params_file=args.params)
    print(json.dumps(report, indent=2))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import contextlib
    import urllib.request

    from shardline.orchestration.flows.server import local_server, server_env

    layout = Layout.at(args.root)
    home = layout.prefect_home
    os.environ.update(server_env(home, args.port))  # before prefect reads its settings
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{args.port}/api/health", timeout=1)
        server = contextlib.nullcontext()  # a server is already up on that port: use it
        log(f"serve: using the Prefect server already on 127.0.0.1:{args.port}")
    except OSError:
        server = local_server(home, args.port, ui=True)  # the UI, where a person reads the evidence card
        log(f"serve: starting a Prefect server on 127.0.0.1:{args.port} (state in {home}); "
            f"UI: http://127.0.0.1:{args.port}")
    with server:
        from shardline.orchestration.flows.deploy import serve_line

        log(f"serve: export PREFECT_API_URL=http://127.0.0.1:{args.port}/api, then "
            "prefect deployment run 'shardline-pipeline/line'")
        serve_line(layout.root, args.params)
    return 0


def cmd_pool(args: argparse.Namespace) -> int:
    from shardline.orchestration.flows import deploy

    if args.command == "deploy":
        deploy.deploy_to_pool(Layout.at(args.root).root, args.params)
    else:
        deploy.start_worker(args.pool)  # returns only by raising: it execs the worker
    return 0
