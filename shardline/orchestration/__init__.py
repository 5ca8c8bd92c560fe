"""The orchestration layer: Prefect's flows (`flows`) and tasks (`tasks`), thin adapters over the
engine, which imports neither them nor Prefect. The `shardline` command (shardline.cli) and the
DVC adapter (shardline.dvcrepo) sit beside them. The repository's top-level flows/ and tasks/
only point here; they are not installed."""
