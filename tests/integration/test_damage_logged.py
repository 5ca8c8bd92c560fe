"""Damage said out loud in Prefect too (issue 44, point 3): the clean stage run as its Prefect flow
on a source with a truncated .jsonl.gz keeps going, and the flow run's log on the server (what the
UI shows) holds the one warning line (the same `log` the terminal gets: tests/unit/test_damage_said.py)."""

from __future__ import annotations

import gzip
import json
import sys

from tests.conftest import make_project, run

FLOW = """
import asyncio
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
from prefect.logging.handlers import APILogWorker
from shardline.core import config
from shardline import paramsfile
from shardline.core.layout import Layout
from shardline.data import download
from shardline.orchestration.flows.stage_flows import FLOWS

download.run(paramsfile.load("params.yaml"), Layout.at("."), log=lambda _: None)
state = FLOWS["clean"](root=".", params_file="params.yaml", return_state=True)
APILogWorker.drain_all()  # the log lines still queued for the server

async def logs():
    async with get_client() as client:
        flt = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id]))
        return await client.read_logs(log_filter=flt)

print(state.type.value)
for entry in asyncio.run(logs()):
    print("LOGGED", entry.message)
"""


def test_a_truncated_gzip_is_one_warning_in_the_flow_runs_log(tmp_path, prefect_server):
    texts = [f"document {i}: " + " ".join(f"w{(i * 7 + j) % 501}" for j in range(60)) for i in range(2000)]
    packed = gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in texts).encode(), mtime=0)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "t.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    make_project(tmp_path, [{"name": "s", "uri": str(tmp_path / "in"), "format": "jsonl"}],
                 eval={"fraction": 0, "min_docs": 0, "every": 0}, clean={"max_bad_fraction": 0.01, "part_mb": 64})
    r = run([sys.executable, "-c", FLOW], tmp_path, env=prefect_server)
    out = r.stdout.splitlines()
    logged = [ln.removeprefix("LOGGED ") for ln in out if ln.startswith("LOGGED warning: ")]
    assert out[0] == "COMPLETED" and len(logged) == 1, r.stdout[-2000:]
    assert logged[0].startswith("warning: data/raw/s/files/t.jsonl.gz: byte ") and \
        ": gzip data damaged at byte " in logged[0] and "; kept the " in logged[0], logged
