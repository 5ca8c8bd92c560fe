"""Checkpoint files: round trip in a fresh process, validity rules, retention, derived LR."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from shardline.training import rng
from shardline.core import fsio
from shardline.core.errors import BadInput
from shardline.core.filenames import MANIFEST, TRAIN_STATE
from shardline.training import checkpoint, sharded
from shardline.training.dist import Dist
from shardline.training.checkpointer import Checkpointer
from shardline.training.state import ModelState, OptimizerState, TrainState
from shardline.core.config import Train
from shardline.model import ModelConfig, build
from shardline.training.optimizer import configure_optimizer
from shardline.training.schedule import lr_at
from harness.projects import lineage_of
from tests.conftest import env_for


def trained_state(steps: int = 3):
    rng.seed_all(0)
    model = build(ModelConfig("gpt2", vocab_size=64, seq_len=8, n_layer=1, n_head=2, d_model=16, dropout=0.1))
    opt = configure_optimizer(model, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), device_type="cpu")
    for _ in range(steps):
        x = torch.randint(0, 64, (2, 8))
        _, loss = model(x, x)
        loss.backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def sharded_at_step_3(tmp_path):
    """A trained model's sharded checkpoint (one process), with what wrote it."""
    model, opt = trained_state()
    dist = Dist(Train(), torch.device("cpu"))
    saving = Checkpointer(Train(checkpoint_format="sharded"), dist, tmp_path / "ck", {
        "model": ModelState(model, dist), "optimizer": OptimizerState(model, opt, dist), "rng": rng.RNG(),
        "train": TrainState(step=3)}, lineage_of(tmp_path))
    path = saving.save(3, None, then=lambda _: None)
    saving.wait()
    return model, opt, dist, saving, path


def test_round_trip_in_a_fresh_process(tmp_path):
    model, opt = trained_state()
    rng.seed_all(42)
    torch.rand(3)
    state = rng.capture()
    path = checkpoint.save(tmp_path, 3, {"model.pt": model.state_dict(), "optimizer.pt": opt.state_dict(),
                                         "rng.pt": state}, {"step": 3, "loader": {"blocks_consumed": 9}},
                           lineage_of(tmp_path))
    expect_next = torch.rand(3)
    code = f"""
import torch, json
from shardline.training import rng
from shardline.training import checkpoint
from shardline.model import ModelConfig, build
from shardline.training.optimizer import configure_optimizer
t, state, manifest = checkpoint.load({str(path)!r})
model = build(ModelConfig("gpt2", vocab_size=64, seq_len=8, n_layer=1, n_head=2, d_model=16, dropout=0.1))
opt = configure_optimizer(model, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), device_type="cpu")
model.load_state_dict(t["model.pt"]); opt.load_state_dict(t["optimizer.pt"]); rng.restore(t["rng.pt"])
checkpoint.save({str(tmp_path / 'again')!r}, 3, {{"model.pt": model.state_dict(), "optimizer.pt": opt.state_dict()}},
                state, manifest.lineage)
print(json.dumps(torch.rand(3).tolist()))
"""
    r = subprocess.run([sys.executable, "-c", code], env=env_for(), capture_output=True, text=True, check=True)
    assert json.loads(r.stdout) == expect_next.tolist()  # RNG restored exactly
    again = json.loads((tmp_path / "again" / "step-000000003" / "manifest.json").read_text())["files"]
    first = json.loads((path / "manifest.json").read_text())["files"]
    for name in ("model.pt", "optimizer.pt", "train_state.json"):
        assert again[name]["sha256"] == first[name]["sha256"], name  # the restored state is the saved state


def test_validity_and_reasons(tmp_path):
    model, _ = trained_state(1)
    lin = lineage_of(tmp_path)
    for step in (2, 4, 6):
        checkpoint.save(tmp_path, step, {"model.pt": model.state_dict()}, {"step": step}, lin)
    (tmp_path / "step-000000006" / "manifest.json").write_text("{not json")
    st = tmp_path / "step-000000004" / "train_state.json"
    st.write_bytes(st.read_bytes().replace(b"4", b"5"))  # same size, other bytes
    logs = []
    assert checkpoint.latest_valid(tmp_path, logs.append).name == "step-000000002"
    assert "step-000000006: manifest.json unreadable" in logs[0]
    assert "step-000000004: train_state.json sha256 differs" in logs[1]
    (tmp_path / "step-000000002" / "model.pt").unlink()
    assert checkpoint.verify(tmp_path / "step-000000002") == (False, "model.pt missing")


def test_malicious_pickle_is_not_executed(tmp_path):
    class Boom:
        def __reduce__(self):
            return (exec, (f"open({str(tmp_path / 'pwned')!r}, 'w').write('x')",))

    path = checkpoint.save(tmp_path, 1, {"model.pt": {"w": Boom()}}, {"step": 1}, lineage_of(tmp_path))
    with pytest.raises(Exception, match="(?i)weights_only|unsupported|global"):
        checkpoint.load(path)
    assert not (tmp_path / "pwned").exists()


def test_a_sharded_checkpoint_in_one_process_round_trips_is_kept_whole_and_never_runs_code(tmp_path):
    model, opt, dist, saving, path = sharded_at_step_3(tmp_path)
    manifest = json.loads((path / MANIFEST).read_text())
    assert checkpoint.verify(path) == (True, "ok") and manifest["format"] == "sharded"
    assert manifest["ranks"] == [["dcp/.metadata", "dcp/__0_0.distcp"]]
    assert sorted(manifest["files"]) == ["dcp/.metadata", "dcp/__0_0.distcp", "rng.pt", TRAIN_STATE]
    other, other_opt = trained_state(steps=1)
    saving.load(path, {"model": ModelState(other, dist), "optimizer": OptimizerState(other, other_opt, dist)})
    for k, v in model.state_dict().items():
        assert torch.equal(other.state_dict()[k], v), k
    for a, b in zip(opt.state_dict()["state"].values(), other_opt.state_dict()["state"].values()):
        assert all(torch.equal(a[k], b[k]) for k in ("step", "exp_avg", "exp_avg_sq"))
    assert all(torch.equal(sharded.full_state(path)[k], v) for k, v in model.state_dict().items())
    kept = checkpoint.keep(path, tmp_path / "kept")  # hard links, dcp/ included, manifest last
    assert checkpoint.verify(kept) == (True, "ok")
    assert (kept / "dcp/__0_0.distcp").stat().st_ino == (path / "dcp/__0_0.distcp").stat().st_ino

    class Boom:
        def __reduce__(self):
            return (exec, (f"open({str(tmp_path / 'pwned')!r}, 'w').write('x')",))

    import pickle

    good = (path / "dcp/.metadata").read_bytes()
    (path / "dcp/.metadata").write_bytes(pickle.dumps(Boom()))
    with pytest.raises(BadInput, match=r"dcp/\.metadata: not DCP metadata .* refers to builtins\.exec"):
        sharded.full_state(path)

    def short(text: str) -> bytes:  # SHORT_BINUNICODE
        return b"\x8c" + bytes([len(text)]) + text.encode()

    # a dotted name under an allowed module: pickle would resolve it to os.system
    dotted = (b"\x80\x04" + short("torch.distributed.checkpoint.filesystem") + short("os.system") + b"\x93"
              + short(f"touch {tmp_path / 'pwned'}") + b"\x85R.")
    (path / "dcp/.metadata").write_bytes(dotted)
    with pytest.raises(BadInput, match=r"refers to torch\.distributed\.checkpoint\.filesystem\.os\.system"):
        sharded.full_state(path)
    # an entry declared as bytes: DCP would torch.load it with weights_only=False
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    md = pickle.loads(good)
    md.state_dict_metadata["model.lm_head.weight"] = BytesStorageMetadata()
    (path / "dcp/.metadata").write_bytes(pickle.dumps(md))
    with pytest.raises(BadInput, match=r"'model\.lm_head\.weight' is not a tensor"):
        sharded.full_state(path)
    m = json.loads((path / MANIFEST).read_text())  # a manifest that vouches for it, as a forger's would
    m["files"]["dcp/.metadata"] = {"bytes": (path / "dcp/.metadata").stat().st_size,
                                   "sha256": fsio.sha256_file(path / "dcp/.metadata")}
    (path / MANIFEST).write_text(json.dumps(m))
    ok, why = checkpoint.verify(path)
    assert not ok and "'model.lm_head.weight' is not a tensor" in why
    assert not (tmp_path / "pwned").exists()


def test_sharded_metadata_pickled_as_python_3_11_2_does_is_read(tmp_path):
    """Python 3.11.2 (Debian 12's) pickles an enum member as builtins.getattr(enum, name): DCP's
    .metadata holds one (_MEM_FORMAT_ENCODING). The unpickler admits exactly that, nothing else."""
    import enum
    import io
    import pickle

    model, opt, dist, saving, path = sharded_at_step_3(tmp_path)

    class AsOldPython(pickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, enum.Enum):
                return getattr, (type(obj), obj.name)
            return NotImplemented

    def dumps(obj) -> bytes:
        out = io.BytesIO()
        AsOldPython(out, protocol=4).dump(obj)
        return out.getvalue()

    md = pickle.loads((path / "dcp/.metadata").read_bytes())
    (path / "dcp/.metadata").write_bytes(old := dumps(md))
    assert b"getattr" in old and sharded.metadata(path).state_dict_metadata == md.state_dict_metadata
    assert all(torch.equal(sharded.full_state(path)[k], v) for k, v in model.state_dict().items())
    nasty = b"\x80\x04\x8c\x08builtins\x8c\x07getattr\x93\x8c\x07pathlib\x8c\tPosixPath\x93\x8c\x06unlink\x86R."
    (path / "dcp/.metadata").write_bytes(nasty)
    with pytest.raises(BadInput, match=r"'PosixPath'\.'unlink', which is no enum member"):
        sharded.metadata(path)


def test_retention_keeps_last_and_every(tmp_path):
    model, _ = trained_state(1)
    lin = lineage_of(tmp_path)
    for step in range(10, 110, 10):
        checkpoint.save(tmp_path, step, {"model.pt": model.state_dict()}, {"step": step}, lin)
    removed = checkpoint.retain(tmp_path, keep_last=2, keep_every=40, log=lambda _: None)
    assert [e.step for e in checkpoint.entries(tmp_path)] == [40, 80, 90, 100]
    assert removed == [10, 20, 30, 50, 60, 70]


def test_retention_killed_midway_leaves_only_invalid_or_whole_checkpoints(tmp_path):
    model, _ = trained_state(1)
    lin = lineage_of(tmp_path)
    for step in (1, 2, 3):
        checkpoint.save(tmp_path, step, {"model.pt": model.state_dict()}, {"step": step}, lin)
    code = f"from shardline.training import checkpoint; checkpoint.retain({str(tmp_path)!r}, 1, 0, print)"
    r = subprocess.run([sys.executable, "-c", code], env=env_for(SHARDLINE_CHAOS="retention@2"))
    assert r.returncode == -9
    entries = {e.step: e.valid for e in checkpoint.entries(tmp_path)}
    assert entries == {2: True, 3: True}  # step 1 removed, killed before touching step 2
    assert checkpoint.latest_valid(tmp_path, lambda _: None).name == "step-000000003"


def test_lr_is_a_function_of_the_step():
    cfg = Train(steps=100, warmup_steps=10, lr=1.0, min_lr=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1) and lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0) and lr_at(100, cfg) == pytest.approx(0.1)
    lrs = [lr_at(s, cfg) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_wsd_holds_the_peak_then_decays_linearly_over_its_fraction():
    cfg = Train(steps=110, warmup_steps=10, lr=1.0, min_lr=0.1, schedule="wsd", decay_fraction=0.25)
    assert lr_at(0, cfg) == pytest.approx(0.1) and lr_at(9, cfg) == pytest.approx(1.0)
    assert {lr_at(s, cfg) for s in range(10, 86)} == {1.0}          # stable: 75 of the 100 steps after warmup
    assert lr_at(85, cfg) == 1.0 and lr_at(98, cfg) == pytest.approx(1.0 - 0.9 * 13 / 25)
    assert lr_at(110, cfg) == pytest.approx(0.1) and lr_at(200, cfg) == pytest.approx(0.1)
    assert lr_at(50, Train(**{**cfg.model_dump(), "schedule": "cosine"})) < 1.0  # the field decides
