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


WRONG = '''
import torch
from torch import nn

from shardline.model.common import CausalLM

NAME = "a string"
NUMBER = 3
BLOCK = nn.Linear(2, 2)


def run(params, layout, ctx):
    pass


def not_causal(cfg):
    return nn.Linear(2, 2)


class Bare(CausalLM):  # says nothing it supports, keeps no cfg
    def __init__(self, cfg):
        super().__init__()
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size)
        self.blocks = nn.ModuleList()

    def lookups(self):
        return []


class NoBlocks(CausalLM):
    def __init__(self, cfg):
        super().__init__()
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size)
'''


@pytest.fixture
def wrong_kinds(tmp_path, monkeypatch):
    """Entry points naming objects of the wrong kind, as an outside developer may write them."""
    write_dist(tmp_path, "shardline-wrong", {"shardline_wrong.py": WRONG},
               {"shardline.architectures": {"a_string": "shardline_wrong:NAME", "a_block": "shardline_wrong:BLOCK",
                                            "a_linear": "shardline_wrong:not_causal", "bare": "shardline_wrong:Bare",
                                            "no_blocks": "shardline_wrong:NoBlocks"},
                "shardline.stages": {"a_number": "shardline_wrong:NUMBER"},
                "shardline.trackers": {"a_block": "shardline_wrong:BLOCK"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins._found.cache_clear()
    yield
    plugins._found.cache_clear()


def _cfg(arch: str, attention: str = "causal"):
    from shardline.model import resolve

    return resolve(paramsfile.parse({"sources": [{"name": "a", "uri": "x", "format": "txt"}],
                                 "model": {"arch": arch, "n_layer": 1, "n_head": 1, "d_model": 8}}).section("model"),
                   vocab_size=16, seq_len=8, attention=attention, eos_id=0)


@pytest.mark.parametrize("group, name, says", [
    ("architectures", "a_string", "names a str ('a string'); its entry point must name a callable ModelConfig -> "
                                  "CausalLM (a CausalLM subclass, or a function making one)"),
    ("architectures", "a_block", "names a Linear instance; its entry point must name a callable ModelConfig -> "
                                 "CausalLM (a CausalLM subclass, or a function making one)"),
    ("stages", "a_number", "names a int (3); its entry point must name a function run(params, layout, ctx)"),
    ("trackers", "a_block", "names a Linear instance; its entry point must name a callable (directory, run_name, "
                            "log) -> tracker (a class, or a function making one)"),
])
def test_an_object_of_the_wrong_kind_is_one_line_at_load(wrong_kinds, group, name, says):
    with pytest.raises(plugins.PluginError) as e:
        plugins.load(group, name)
    value = {"a_string": "NAME", "a_block": "BLOCK", "a_number": "NUMBER"}[name]
    assert str(e.value) == f"plug-in {name!r} ({group}, shardline_wrong:{value}, from shardline-wrong 0.1.0) {says}"


def test_an_architecture_is_held_to_what_it_says_it_supports(wrong_kinds):
    from shardline.model import build

    with pytest.raises(plugins.PluginError) as e:
        build(_cfg("a_linear"))
    assert str(e.value) == ("plug-in 'a_linear' (architectures, shardline_wrong:not_causal, from shardline-wrong "
                            "0.1.0) made a Linear instance, not a shardline.model.common.CausalLM: its class must "
                            "subclass CausalLM (docs/extending.md, 'An architecture')")
    with pytest.raises(plugins.PluginError) as e:
        build(_cfg("no_blocks"))
    assert str(e.value) == ("plug-in 'no_blocks' (architectures, shardline_wrong:NoBlocks, from shardline-wrong "
                            "0.1.0): NoBlocks does not define blocks or lookups(), which every architecture has "
                            "(docs/extending.md, 'An architecture')")
    with pytest.raises(plugins.PluginError) as e:  # the record would say document attention; the model would not
        build(_cfg("bare", "document"))
    assert str(e.value) == ("plug-in 'bare' (architectures, shardline_wrong:Bare, from shardline-wrong 0.1.0): "
                            "train.attention is document, but Bare does not say it restarts attention at each "
                            "document (no `document_attention = True` on its class); set train.attention: causal in "
                            "params.yaml")
    net = build(_cfg("bare"))
    assert net.cfg == _cfg("bare") and net.num_params() == 8 * 16 + 16 and net.flops_per_token() > 0
    from shardline.core.errors import BadInput
    from shardline.model import hf

    with pytest.raises(BadInput) as e:
        hf.to_hf(net, eos_id=0)
    assert str(e.value) == ("model.arch 'bare' has no mapping to transformers (its class sets no `hf`): only gpt2 "
                            "and llama export; sample, eval and judge take any architecture")


def test_the_plugins_stage_lists_what_each_affected_stage_uses(installed, tmp_path):
    from shardline.core.layout import Layout

    stages = {"broken": "shardline-demo 0.1.0", "hello": "shardline-demo 0.1.0"}
    assert plugins.used_by("demo_net") == {"clean": {}, "train": {"demo_net": "shardline-demo 0.1.0"}, "stages": stages}
    assert plugins.used_by("llama") == {"clean": {}, "train": {}, "stages": stages}
    said: list[str] = []
    plugins.record(Layout.at(tmp_path), "demo_net", said.append)
    assert (tmp_path / "data/plugins/train.json").read_text() == '{\n  "demo_net": "shardline-demo 0.1.0"\n}\n'
    assert said == ["plugins: clean: none", "plugins: train: demo_net (shardline-demo 0.1.0)",
                    "plugins: stages: broken (shardline-demo 0.1.0), hello (shardline-demo 0.1.0)"]


BROKEN_AND_NAMELESS = {
    "shardline_rules_demo.py": '''
from dataclasses import dataclass
from pydantic import Field
from shardline.data.clean.verdict import RuleEntry


@dataclass(frozen=True)
class Shout:  # a transform with no `name` attribute: docs/extending.md does not ask for one
    def __call__(self, doc):
        return doc.text.upper()


SHOUT = RuleEntry("shout", bool, Field(False, description="upper-case every document"),
                  lambda on, _files: Shout() if on else None)
''',
    "shardline_rules_broken.py": "import nowhere_to_be_found\n"}
CHECK = '''
from shardline import paramsfile
from shardline.core import config, plugins
from shardline.data.clean.rules import registry as rules
raw = {"sources": [{"name": "a", "uri": "x", "format": "txt"}]}
p = paramsfile.parse({**raw, "clean": {"shout": True}})  # the broken one is installed but not switched on
counts = {}
kept = rules.apply(rules.build(p.clean), "Hi there, friend: a sentence long enough for every default filter.", counts)
print(kept, counts["shout"], "shout" in rules.names(p.clean), plugins.used_by(p.model.arch))
try:
    paramsfile.parse({**raw, "clean": {"broken_rule": 1}})
except config.ConfigError as e:
    print(str(e).splitlines()[-1].strip())
'''


def test_a_rule_without_a_name_runs_and_a_broken_rule_blocks_only_a_run_that_sets_it(tmp_path):
    import subprocess
    import sys

    from harness.projects import env_for

    write_dist(tmp_path, "shardline-rules-demo", BROKEN_AND_NAMELESS,
               {"shardline.rules": {"shout": "shardline_rules_demo:SHOUT", "broken_rule": "shardline_rules_broken:RULE"}})
    r = subprocess.run([sys.executable, "-c", CHECK], env=env_for(PYTHONPATH=str(tmp_path)), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "HI THERE, FRIEND: A SENTENCE LONG ENOUGH FOR EVERY DEFAULT FILTER. [0, 0] True {'clean': {'broken_rule': "
        "'shardline-rules-demo 0.1.0', 'shout': 'shardline-rules-demo 0.1.0'}, 'train': {}, 'stages': {}}",
        "clean.broken_rule: plug-in 'broken_rule' (rules, shardline_rules_broken:RULE, from shardline-rules-demo "
        "0.1.0) cannot be loaded: ModuleNotFoundError: No module named 'nowhere_to_be_found'"]


def test_dvc_yamls_plugins_command_writes_what_the_stage_writes(tmp_path):
    """dvc.yaml runs `python -m shardline.core.plugins` (cheaper than the CLI): the same files."""
    import subprocess
    import sys

    import yaml

    from harness.projects import REPO, env_for

    assert yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["plugins"]["cmd"] == \
        "python -m shardline.core.plugins"
    write_dist(tmp_path / "site", "shardline-demo", {"shardline_demo.py": MODULE},
               {"shardline.architectures": {"demo_net": "shardline_demo:build"}})
    (tmp_path / "params.yaml").write_text("model:\n  arch: demo_net\n")
    r = subprocess.run([sys.executable, "-m", "shardline.core.plugins"], cwd=tmp_path, capture_output=True, text=True,
                       env=env_for(PYTHONPATH=str(tmp_path / "site")), timeout=60)
    assert r.returncode == 0, r.stderr
    assert {f.name: f.read_text() for f in (tmp_path / "data/plugins").iterdir()} == {
        "clean.json": "{}\n", "train.json": '{\n  "demo_net": "shardline-demo 0.1.0"\n}\n', "stages.json": "{}\n"}
    assert r.stderr.splitlines() == ["plugins: clean: none", "plugins: train: demo_net (shardline-demo 0.1.0)",
                                     "plugins: stages: none"]
