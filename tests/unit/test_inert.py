"""Settings that would have no effect are refused with the reason, and a Dask or Ray address given
in another form than its client's is accepted when it can only mean one thing, or refused in one
line naming parts.address and the form wanted (issue 52, point 1; shardline/core/inert.py,
shardline/core/addresses.py). Each through `config.load`, as every command reads params.yaml."""

from __future__ import annotations

import re

import pytest

from shardline.cli.main import main
from shardline import paramsfile
from shardline.core.errors import ConfigError
from tests.conftest import small_params, write_params

SOURCES = [{"name": "code", "uri": "code", "format": "txt"}, {"name": "prose", "uri": "prose", "format": "txt"}]


def load(tmp_path, sources=SOURCES, **sections):
    write_params(tmp_path, small_params(sources, **sections))
    return paramsfile.load(tmp_path / "params.yaml")


def refused(tmp_path, **sections) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, **sections)
    return [ln.strip() for ln in str(e.value).splitlines()[1:]]


INERT = [
    ({"mix_search": {"target": "loss", "target_sources": ["code"]}},
     "mix_search.target_sources: mix_search.target is loss, which weighs every source by the line's mix and ignores "
     "target_sources; set target: sources, or remove target_sources"),
    ({"mix_search": {"target": "bpb", "target_sources": {"code": 1}}},
     "mix_search.target_sources: mix_search.target is bpb, which weighs every source by the line's mix and ignores "
     "target_sources; set target: sources, or remove target_sources"),
    ({"mix_search": {"narrow": 3.0}},
     "mix_search.narrow: shapes the rounds after the first, and mix_search.rounds is 1; raise rounds, or remove it"),
    ({"mix_search": {"bounds": {"code": {"min": 0.3, "max": 0.3}}}},
     "mix_search.bounds: they fix every weight but at most one (min = max), so every proxy would train the same mix; "
     "free at least two sources' weights"),
    ({"train": {"schedule": "cosine", "decay_fraction": 0.4}},
     "train.decay_fraction: applies to schedule wsd, and train.schedule is cosine; set schedule: wsd, or remove it"),
    ({"train": {"allow_data_change": True, "fresh_on_data_change": True}},
     "train.allow_data_change: train.fresh_on_data_change is true, and a fresh start wins over continuing on changed "
     "data; set one of them"),
    ({"eval": {"tasks_limit": 10}},
     "eval.tasks_limit: applies to eval.tasks, which lists none; list the tasks, or remove it (`shardline eval --tasks` "
     "takes --limit and --batch-size)"),
    ({"loader": {"cache_mb": 100}},
     "loader.cache_mb: applies to shards streamed from loader.shards_uri, which is unset; set shards_uri, or remove it"),
    ({"log": {"wandb_mode": "online"}},
     "log.wandb_mode: applies to trackers, and log.backends lists none; list them, or remove it"),
    ({"log": {"backends": ["tensorboard"], "mlflow_uri": "http://127.0.0.1:5000"}},
     "log.mlflow_uri: applies to mlflow, which log.backends does not list; add it, or remove mlflow_uri"),
    ({"parts": {"address": "tcp://127.0.0.1:8786"}},
     "parts.address: applies to a cluster (runner dask or ray), and parts.runner is threads; set the runner, or remove it"),
    ({"pipeline": {"stage_timeout_s": 600}},
     "pipeline.stage_timeout_s: bounds the parts on a cluster, and parts.runner is threads (stages in this process are "
     "not bounded); remove it"),
    ({"parts": {"runner": "dask", "address": "tcp://127.0.0.1:8786", "workers": 4}},
     "parts.workers: sizes a local pool or cluster, and parts.address names a running cluster, whose workers are its "
     "own; remove it"),
]


@pytest.mark.parametrize("sections, said", INERT, ids=[s.split(":")[0] for _, s in INERT])
def test_a_setting_that_would_have_no_effect_is_refused_with_the_reason(tmp_path, sections, said):
    assert refused(tmp_path, **sections) == [said]


def test_the_same_settings_where_they_take_effect_and_every_default_are_accepted(tmp_path):
    load(tmp_path, mix_search={"target": "sources", "target_sources": ["code"], "rounds": 2, "narrow": 3.0},
         train={"schedule": "wsd", "decay_fraction": 0.4, "allow_data_change": True},
         eval={"tasks": ["hellaswag"], "tasks_limit": 10}, loader={"shards_uri": "file:///tmp/s", "cache_mb": 100},
         log={"backends": ["mlflow"], "mlflow_uri": "http://127.0.0.1:5000"},
         parts={"runner": "dask", "address": "tcp://127.0.0.1:8786"}, pipeline={"stage_timeout_s": 600})
    load(tmp_path)  # the shipped params.yaml's values, every default among them


@pytest.mark.parametrize("runner, given, taken", [
    ("dask", "tcp://10.0.0.5:8786", "tcp://10.0.0.5:8786"), ("dask", "10.0.0.5:8786", "tcp://10.0.0.5:8786"),
    ("dask", "tls://sched:8786", "tls://sched:8786"), ("dask", "[::1]:8786", "tcp://[::1]:8786"),
    ("ray", "ray://head:10001", "ray://head:10001"), ("ray", "auto", "auto"), ("ray", "head:6379", "head:6379")])
def test_an_address_that_means_one_scheduler_is_taken_in_its_clients_form(tmp_path, runner, given, taken):
    assert load(tmp_path, parts={"runner": runner, "address": given}).parts.address == taken


@pytest.mark.parametrize("runner, given, said", [
    ("dask", "http://10.0.0.5:8787/status", "'http://10.0.0.5:8787/status' is the Dask dashboard's page, not an address "
     "a client connects to; give the scheduler's, tcp://10.0.0.5:8786 by default (the dashboard's Info tab, or `dask "
     "scheduler`'s 'Scheduler at:' line, says which)"),
    ("dask", "tcp://10.0.0.5", "'tcp://10.0.0.5' names no port; give the scheduler's, tcp://10.0.0.5:8786 (its default)"),
    ("dask", "10.0.0.5", "'10.0.0.5' names no port; give the scheduler's, tcp://10.0.0.5:8786 (its default)"),
    ("dask", "ray://head:10001", "'ray://head:10001' is a Ray address, and parts.runner is dask; give the Dask "
     "scheduler's, tcp://HOST:8786, or set runner: ray"),
    ("dask", "grpc://head:8786", "'grpc://head:8786': grpc:// is no Dask scheduler's scheme; give tcp://HOST:8786"),
    ("ray", "tcp://head:8786", "'tcp://head:8786' is a Dask address, and parts.runner is ray; give ray://HOST:10001 "
     "or auto, or set runner: dask"),
    ("ray", "http://head:8265", "'http://head:8265' is a dashboard's page (Ray's jobs API), not an address a client "
     "connects to; give ray://head:10001 (Ray's client server), or auto on a node of the cluster"),
])
def test_an_address_in_another_form_is_one_line_naming_parts_address_and_the_form_wanted(tmp_path, runner, given, said):
    assert refused(tmp_path, parts={"runner": runner, "address": given}) == [f"parts.address: {said}"]


def test_a_mix_search_over_one_source_is_refused_before_any_proxy_runs(tmp_path, capsys):
    load(tmp_path, sources=SOURCES[:1])  # the line itself runs on one source
    assert main(["--root", str(tmp_path), "mix-search"]) == 2
    assert capsys.readouterr().err == (
        "error: mix_search: the line has one source (code), and a mix search weighs sources against each other; add "
        "a source to `sources`, or train the line as it is (dvc repro)\n")
    assert not re.search(r"mix", " ".join(p.name for p in tmp_path.rglob("*") if p.name != "params.yaml"))
