"""Prefect flows and the `shardline` command: compose the engine, DVC and Prefect."""
