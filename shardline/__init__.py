"""Shardline engine: config, sources, cleaning, tokenizing, shard format.

The engine imports neither Prefect nor DVC; `tasks/` and `flows/` adapt it.
"""

__version__ = "0.1.0"
