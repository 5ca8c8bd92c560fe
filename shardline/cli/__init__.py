"""The `shardline` command (console script `shardline = shardline.cli.main:main`).

- `main`: the argument parser, and one clear error line (exit 2; 75 for a transient fault) for
  whatever the engine raises.
- `line`: the commands that run the line: stage (what dvc.yaml calls), pipeline, serve, deploy,
  worker. Where a stage runs is shardline.orchestration.flows.dispatch's decision, not the command's.
- `checkpoints`: the commands on checkpoints: checkpoints, lineage, eval, export, sample.
- `corpus`: the commands on the data: explain, push-shards.
- `mixsearch`: mix-search: proxy runs over data mixes as DVC experiments, then the engine's fit,
  recommended mix and report.
"""

import sys


def log(msg: str) -> None:
    """A command's status line: on stderr, so stdout holds only what a command prints as its result."""
    print(msg, file=sys.stderr, flush=True)
