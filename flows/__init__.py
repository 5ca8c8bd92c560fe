"""The line's Prefect flows, where the repository's layout names them. They live in
shardline.orchestration.flows, installed with the package (so a deployment's module entrypoint and
a work pool's worker find them wherever the project is, and a wheel claims no name but
`shardline`); this folder, which is not installed, only points there:

    from flows import pipeline, retrain, run_flow
"""

from shardline.orchestration.flows.pipeline import pipeline, retrain
from shardline.orchestration.flows.stage_flows import run_flow

__all__ = ["pipeline", "retrain", "run_flow"]
