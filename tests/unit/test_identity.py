"""A run's identity: what it holds, what it leaves out, and what a change of it leads to."""

from __future__ import annotations

import dataclasses

import pytest

from harness.projects import lineage_of
from shardline.core import config
from shardline import paramsfile
from shardline.training import identity
from shardline.core.errors import BadInput
from tests.conftest import small_params


def ident(**sections) -> dict:
    params = paramsfile.parse(small_params([{"name": "a", "uri": "x", "format": "txt"}], **sections))
    state = {"data_version": "v1", "mix": params.mix, "seed": params.loader.seed,
             "global_batch": params.loader.global_batch, "seq_len": params.shard.seq_len}
    return identity.current(params, state)


def test_what_shapes_the_model_is_the_identity_and_nothing_else():
    base = ident()
    for sections, key in [({"mix": {"a": 2.0}}, "mix"), ({"model": {"n_layer": 3}}, "model"),
                          ({"train": {"lr": 0.01}}, "train.lr"), ({"train": {"grad_accum": 2}}, "train.grad_accum"),
                          ({"loader": {"seed": 9}}, "loader.seed"), ({"loader": {"global_batch": 8}},
                                                                      "loader.global_batch"),
                          ({"shard": {"seq_len": 32}}, "seq_len")]:
        changes = identity.diff(base, ident(**sections))
        assert [c.split(":")[0] for c in changes] == [key], sections
    for sections in ({"train": {"steps": 99}}, {"train": {"checkpoint_every": 7, "keep_last": 5, "threads": 2}},
                     {"loader": {"num_workers": 2, "verify": "size"}}, {"eval": {"every": 3, "blocks": 8}}):
        assert identity.diff(base, ident(**sections)) == [], sections


def test_a_change_is_refused_continued_or_fresh():
    changes = identity.diff(ident(), ident(mix={"a": 2.0}))
    assert identity.decide([], "step-1", allow=False, fresh=False) == "resume"
    assert identity.decide(changes, "step-1", allow=True, fresh=False) == "continue"
    assert identity.decide(changes, "step-1", allow=False, fresh=True) == "fresh"
    with pytest.raises(BadInput) as e:
        identity.decide(changes, "step-000000008", allow=False, fresh=False)
    msg = str(e.value)
    assert "differs from step-000000008's" in msg and "mix: saved {'a': 1.0}, now {'a': 2.0}" in msg
    assert "dvc exp run" in msg and "train.fresh_on_data_change" in msg and "train.allow_data_change" in msg
    # another model cannot continue from these weights, allowed or not
    model = identity.diff(ident(), ident(model={"d_model": 64}))
    with pytest.raises(BadInput) as e:
        identity.decide(model, "step-1", allow=True, fresh=False)
    assert "allow_data_change" not in str(e.value)
    assert identity.decide(model, "step-1", allow=True, fresh=True) == "fresh"


def test_every_train_setting_is_classified():
    """A new train: field must be put on one side: shaping the model, or only running it."""
    assert sorted(identity.SHAPING + identity.RUNNING) == sorted(config.Train.model_fields)


def test_settings_added_later_keep_old_checkpoints_identity_and_tag(tmp_path):
    """A checkpoint saved before train.schedule / decay_fraction existed is the same run as a cosine
    run now (same identity, same tag: its .shardline/kept/<tag>/ copies stay its own); wsd is not,
    and decay_fraction only counts under wsd (under cosine it is refused: core/inert.py)."""
    params = paramsfile.parse(small_params([{"name": "a", "uri": "x", "format": "txt"}]))
    loader = {"data_version": "v1", "mix": params.mix, "seed": params.loader.seed,
              "global_batch": params.loader.global_batch, "seq_len": params.shard.seq_len}
    train = {k: v for k, v in params.section("train").items() if k not in ("schedule", "decay_fraction")}
    lin = dataclasses.replace(lineage_of(tmp_path), params={"model": params.section("model"), "train": train})
    old = identity.saved({"loader": loader}, lin)
    now = identity.current(params, loader)
    assert identity.diff(old, now) == [] and identity.tag(old) == identity.tag(now)
    # what tag() hashed before the fields existed: an identity without them
    assert "train.schedule" not in now and "train.decay_fraction" not in now
    wsd = ident(train={"schedule": "wsd"})
    assert sorted(identity.diff(now, wsd)) == ["train.decay_fraction: saved None, now 0.2",
                                               "train.schedule: saved 'cosine', now 'wsd'"]
    assert sorted(c.split(":")[0] for c in identity.diff(wsd, now)) == ["train.decay_fraction", "train.schedule"]
    assert identity.diff(wsd, ident(train={"schedule": "wsd", "decay_fraction": 0.5})) == [
        "train.decay_fraction: saved 0.2, now 0.5"]


def test_a_gpt2_run_from_before_llama_keeps_its_identity_and_tag(tmp_path):
    """Pinned from the code before the model section had `arch` (commit 56b5288): a params.yaml of that
    time is still gpt2 with the same identity, tag (its .shardline/kept/<tag>/ copies) and, read from
    its checkpoint's lineage, no change."""
    raw = {"sources": [{"name": "a", "uri": "x", "format": "txt"}], "mix": {"a": 1.0},
           "model": {"n_layer": 1, "n_head": 2, "d_model": 32, "dropout": 0.1}}
    params = paramsfile.parse(raw)
    assert params.model.arch == "gpt2"
    state = {"data_version": "v1", "mix": params.mix, "seed": params.loader.seed,
             "global_batch": params.loader.global_batch, "seq_len": params.shard.seq_len}
    now = identity.current(params, state)
    assert identity.tag(now) == "aa38c2fe9328"
    old_lineage = {"model": {"n_layer": 1, "n_head": 2, "d_model": 32, "dropout": 0.1, "bias": False},
                   "train": {k: v for k, v in params.section("train").items()
                             if k not in ("attention", "activation_checkpointing", "init_from")}}
    old = identity.saved({"loader": state}, dataclasses.replace(lineage_of(tmp_path), params=old_lineage))
    assert identity.diff(old, now) == [] and identity.tag(old) == "aa38c2fe9328"
    # document attention is another run: its blocks see other contexts
    doc = paramsfile.parse({**raw, "train": {"attention": "document"}})
    assert identity.diff(now, identity.current(doc, state)) == ["train.attention: saved 'causal', now 'document'"]


def test_a_llama_is_its_resolved_shape_however_it_is_spelled():
    base = ident()  # the shipped llama with the test sizes: n_head 2, n_kv_head 2, d_model 32
    assert base["model"]["n_kv_head"] == 2 and base["model"]["ffn_hidden"] == 128  # 2/3 x 4 x 32 -> 85 -> 128
    assert identity.diff(base, ident(model={"n_kv_head": None, "ffn_hidden": 128, "ffn_multiple_of": 256})) == []
    assert [c.split(":")[0] for c in identity.diff(base, ident(model={"n_kv_head": 1}))] == ["model"]
