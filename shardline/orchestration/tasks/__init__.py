"""Prefect tasks and their helpers: thin adapters over the engine, which knows nothing of them.

- `options`: the task options every task run gets (retries of transient faults only, no caching).
- `mappers`: `part_mapper`, a stage's parts as one task run each.
- `progress`: `progress_sink`, a stage's progress as a Prefect progress artifact.
- `runners`: where params.yaml's `parts` section runs a stage's parts (the engine's Mapper for
  processes and Dask; Prefect's task runner for Ray), and a check of its workers.
- `invoke`: the one `RunContext` of a stage run, and the call of its engine entry point with it.

The flows that compose them are in shardline.orchestration.flows; where a stage runs is decided
in shardline.orchestration.flows.dispatch.
"""
