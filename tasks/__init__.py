"""The line's Prefect tasks and the runners of a stage's parts, where the repository's layout names
them. They live in shardline.orchestration.tasks, installed with the package (a wheel claims no
name but `shardline`); this folder, which is not installed, only points there:

    from tasks import invoke, run_context, part_mapper, mapper
"""

from shardline.orchestration.tasks.invoke import invoke, run_context
from shardline.orchestration.tasks.mappers import part_mapper
from shardline.orchestration.tasks.runners import mapper

__all__ = ["invoke", "mapper", "part_mapper", "run_context"]
