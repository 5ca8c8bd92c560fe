"""Shardline's engine: every stage of the line (download, clean, tokenize, shard, train, report),
the loader, the models, and what uses a trained checkpoint. `registry` names the stages' entry
points; `context.RunContext` is what an orchestrator tells a run.

The engine (every subpackage but the three below) imports neither Prefect nor DVC and never calls
back up: the `shardline` command (shardline.cli), the Prefect flows and tasks
(shardline.orchestration) and the DVC adapter (shardline.dvcrepo) drive it (docs/architecture.md,
"Layers"). They are part of the one installed package, so a wheel claims no other name.
"""

from __future__ import annotations

__version__ = "0.1.0"


def fingerprint() -> str:
    """sha256 of the engine's source files. Cluster workers must report the same value as the
    driver: a worker running other engine code would write other bytes into the same parts."""
    import hashlib
    from pathlib import Path

    h = hashlib.sha256()
    for p in sorted(Path(__file__).parent.rglob("*.py")):
        h.update(p.relative_to(Path(__file__).parent).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]
