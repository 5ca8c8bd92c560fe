"""Settings that would have no effect, refused with the reason (issue 52): a field that only matters
with another set, set while that other is not. A setting that changes nothing is a mistake the
user believes is working (a mix search told to weigh `target_sources` that its target ignores, a
cache size for shards that are not streamed, a W&B mode with W&B off).

Contract: `problems(params)` lists one line per such field, `<dotted.field>: <why it does nothing>;
<what to do>`, for `Params` to refuse with its other problems (shardline.core.config). Only a value
other than the field's default counts: a params.yaml written by DVC lists every field, and a
default there says nothing. Section-level checks stay in the sections; these are the ones that
read two sections, or that a lineage's full dump must never trip (a run recorded before a check
existed still reads).
"""

from __future__ import annotations

from typing import Any

from shardline.core.section_base import _Section


def _set(section: _Section, field: str) -> bool:
    """Whether `field` holds another value than its default."""
    return getattr(section, field) != type(section).model_fields[field].get_default(call_default_factory=True)


def _each(section: _Section, name: str, fields: tuple[str, ...], why: str) -> list[str]:
    return [f"{name}.{f}: {why}" for f in fields if _set(section, f)]


def problems(params: Any) -> list[str]:
    out: list[str] = []
    s, t, e, ld, log, parts = params.mix_search, params.train, params.eval, params.loader, params.log, params.parts
    if s.target_sources and s.target != "sources":
        out.append(f"mix_search.target_sources: mix_search.target is {s.target}, which weighs every source by the "
                   "line's mix and ignores target_sources; set target: sources, or remove target_sources")
    if s.rounds == 1:
        out += _each(s, "mix_search", ("narrow",), "shapes the rounds after the first, and mix_search.rounds is 1; "
                     "raise rounds, or remove it")
    if t.schedule != "wsd":
        out += _each(t, "train", ("decay_fraction",), f"applies to schedule wsd, and train.schedule is {t.schedule}; "
                     "set schedule: wsd, or remove it")
    if t.fresh_on_data_change and t.allow_data_change:
        out.append("train.allow_data_change: train.fresh_on_data_change is true, and a fresh start wins over "
                   "continuing on changed data; set one of them")
    if not e.tasks:
        out += _each(e, "eval", ("tasks_every", "tasks_limit", "tasks_batch_size"),
                     "applies to eval.tasks, which lists none; list the tasks, or remove it (`shardline eval --tasks` "
                     "takes --limit and --batch-size)")
    if not ld.shards_uri:
        out += _each(ld, "loader", ("cache_dir", "cache_mb", "prefetch"), "applies to shards streamed from "
                     "loader.shards_uri, which is unset; set shards_uri, or remove it")
    backends = set(log.backends)
    if not backends:
        out += _each(log, "log", ("dir", "project", "run_name", "wandb_mode", "wandb_entity", "mlflow_uri", "flush_s",
                                  "close_timeout_s"), "applies to trackers, and log.backends lists none; list them, "
                     "or remove it")
    else:
        for field, wanted in (("wandb_mode", {"wandb"}), ("wandb_entity", {"wandb"}), ("mlflow_uri", {"mlflow"}),
                              ("project", {"wandb", "mlflow"})):
            if _set(log, field) and not backends & wanted:
                out.append(f"log.{field}: applies to {' and '.join(sorted(wanted))}, which log.backends does not "
                           f"list; add it, or remove {field}")
    return out + _parts(parts, params.pipeline)


def _parts(parts: _Section, pipeline: _Section) -> list[str]:
    here = parts.runner in ("threads", "processes")  # the stage's own pools, in this process
    if here:
        out = _each(parts, "parts", ("address", "connect_timeout_s"), f"applies to a cluster (runner dask or ray), "
                    f"and parts.runner is {parts.runner}; set the runner, or remove it")
        return out + _each(pipeline, "pipeline", ("stage_timeout_s",), f"bounds the parts on a cluster, and "
                           f"parts.runner is {parts.runner} (stages in this process are not bounded); remove it")
    if parts.address:
        return _each(parts, "parts", ("workers",), "sizes a local pool or cluster, and parts.address names a running "
                     "cluster, whose workers are its own; remove it")
    return []
