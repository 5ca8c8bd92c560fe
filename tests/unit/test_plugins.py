"""Plug-ins through entry points (shardline.core.plugins): found from an installed distribution's
metadata alone, loaded on demand, named with their distribution in every line about them; an
unknown name in params.yaml or on the command line is one line listing what is known."""

from __future__ import annotations

import pytest

from harness.plugins import write_dist
from shardline import registry, stages
from shardline.core import plugins
from shardline import paramsfile
from shardline.core.errors import ConfigError

MODULE = '''
def run(params, layout, ctx):
    ctx.log("hello from a plug-in stage")


def build(cfg):
    raise RuntimeError("not a network")
'''


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A distribution on sys.path with a stage, an architecture, a tracker and a broken stage."""
    write_dist(tmp_path, "shardline-demo", {"shardline_demo.py": MODULE, "shardline_broken.py": "import nowhere\n"},
               {"shardline.stages": {"hello": "shardline_demo:run", "broken": "shardline_broken:run"},
                "shardline.architectures": {"demo_net": "shardline_demo:build"},
                "shardline.trackers": {"demo_tracker": "shardline_demo:build"},
                "console_scripts": {"not-ours": "shardline_demo:run"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins._found.cache_clear()
    yield
    plugins._found.cache_clear()  # the next test sees sys.path without it


def test_names_come_from_the_metadata_and_load_imports_on_demand(installed):
    assert plugins.names("stages") == ("broken", "hello") and plugins.names("rules") == ()
    assert plugins.origin("stages", "hello") == "shardline-demo 0.1.0"
    assert stages.run_of("hello").__name__ == "run"
    assert registry.is_plugin("hello") and not registry.is_plugin("clean")
    registry.check("hello")


def test_a_plugin_that_cannot_load_is_one_line_naming_its_distribution(installed):
    with pytest.raises(plugins.PluginError) as e:
        stages.run_of("broken")
    assert str(e.value) == ("plug-in 'broken' (stages, shardline_broken:run, from shardline-demo 0.1.0) cannot be "
                            "loaded: ModuleNotFoundError: No module named 'nowhere'")


def test_an_unknown_name_lists_the_builtin_and_the_plugin_ones(installed):
    with pytest.raises(plugins.PluginError) as e:
        registry.check("helo")
    assert str(e.value) == ("stage: 'helo' is no stage (did you mean 'hello'?); known stages: download, clean, "
                            "tokenize, shard, train, report (built in); broken (plug-in of shardline-demo 0.1.0), "
                            "hello (plug-in of shardline-demo 0.1.0)")
    raw = {"sources": [{"name": "a", "uri": "x", "format": "txt"}]}
    ok = paramsfile.parse({**raw, "model": {"arch": "demo_net"}, "log": {"backends": ["demo_tracker", "tensorboard"]}})
    assert ok.model.arch == "demo_net" and ok.log.backends == ("demo_tracker", "tensorboard")
    with pytest.raises(ConfigError) as e:
        paramsfile.parse({**raw, "model": {"arch": "demo", "bias": True}})
    assert "model.arch: 'demo' is no architecture (did you mean 'demo_net'?); known architectures: gpt2, llama " \
           "(built in); demo_net (plug-in of shardline-demo 0.1.0)" in str(e.value)


def test_a_plugin_architecture_takes_the_fields_every_architecture_has(installed):
    raw = {"sources": [{"name": "a", "uri": "x", "format": "txt"}]}
    with pytest.raises(ConfigError) as e:
        paramsfile.parse({**raw, "model": {"arch": "demo_net", "n_kv_head": 2, "bias": True}})
    assert "model.n_kv_head: applies to arch llama only, this model is demo_net; remove it" in str(e.value)
    assert "model.bias: applies to arch gpt2 only, this model is demo_net; remove it" in str(e.value)
    from shardline.core.sections_model import identity_of

    assert identity_of({"arch": "demo_net", "n_layer": 3}) == {
        "arch": "demo_net", "n_layer": 3, "n_head": 4, "d_model": 128, "dropout": 0.1, "norm_eps": 1e-5,
        "tie_embeddings": True}


def test_no_metadata_is_read_while_every_name_is_built_in(monkeypatch):
    paramsfile.schema()  # the clean section: its rules are listed once, when it is first made
    monkeypatch.setattr(plugins, "_found", None)  # from here any lookup would fail: none is made
    raw = {"sources": [{"name": "a", "uri": "x", "format": "txt"}], "model": {"arch": "llama"},
           "log": {"backends": ["tensorboard"]}}
    assert paramsfile.parse(raw).model.arch == "llama"
    assert stages.run_of("shard").__module__ == "shardline.data.shard"
    registry.check("report")
