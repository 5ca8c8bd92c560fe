"""A stage's progress as one Prefect progress artifact per stage run (the flow run's UI page).

Contract: `progress_sink(stage)` is a `shardline.core.progress.Sink`; it calls the API only when
the whole percent changes, and at most once a second (100% always gets through).
"""

from __future__ import annotations

import time

from prefect.artifacts import create_progress_artifact, update_progress_artifact

from shardline.core.progress import Sink


def progress_sink(stage: str) -> Sink:
    """A `shardline.core.progress.Sink` that keeps one Prefect progress artifact per stage run."""
    made: dict = {"at": 0.0}

    def sink(name: str, fraction: float, line: str) -> None:
        # every API call costs a round trip: a whole percent more, and at most one a second
        pct, now = float(int(100 * fraction)), time.monotonic()
        if made.get("pct") == pct or (pct < 100 and now - made["at"] < 1.0 and "id" in made):
            return
        made["pct"], made["at"] = pct, now
        if "id" not in made:
            made["id"] = create_progress_artifact(progress=pct, key=f"{stage}-progress", description=line)
        else:
            update_progress_artifact(artifact_id=made["id"], progress=pct, description=line)

    return sink
