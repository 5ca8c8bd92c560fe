"""A run's identity, and what training does when it changes.

Contract:
- A run's identity is what shapes the model: the data version (content hash of the training
  shards and the tokenizer), the mix, the model (the fields of its architecture, as resolved:
  `shardline.core.sections_model.identity_of`), the weights it started from (train.init_from's
  sha256s), the loader seed and batch geometry, and the train settings in SHAPING
  (train.attention among them). Not `train.steps` (raising it continues the run), nor settings
  that only say how to run it (checkpoints, retention, processes, threads, timeouts).
- `saved` derives a checkpoint's identity from what it already records (the loader state and
  the lineage's params): nothing extra is stored.
- When the newest checkpoint's identity differs from this run's, `decide` says what happens:
  continue (`train.allow_data_change`; the change goes into the lineage; never across a model
  change), start fresh (`train.fresh_on_data_change`, or the orchestrator says this run is a new
  experiment), or refuse, naming every change and every way out.
- `set_aside` clears the way for a fresh start without losing anything: a checkpoint the
  orchestrator says is recoverable elsewhere (recorded by a commit or experiment, its files in
  DVC's cache) is removed, manifest first; any other
  is moved under data/checkpoints/archive/<identity>/, with the run's rollback ledger. Only the newest checkpoints are ever
  resumed from, so the archive is out of resume's way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from shardline.core import fsio
from shardline.training import checkpoint
from shardline.core.config import Params, Train
from shardline.core.sections_model import identity_of
from shardline.core.errors import BadInput
from shardline.core.filenames import ARCHIVE, ROLLBACKS, STEP_DIRS
from shardline.training.records import Lineage

SHAPING = ("grad_accum", "lr", "min_lr", "warmup_steps", "schedule", "decay_fraction", "weight_decay", "beta1",
           "beta2", "grad_clip", "precision", "seed", "attention")
# how far to train, and how to run and keep it: a change continues the same run
RUNNING = ("steps", "compile", "deterministic", "device", "threads", "nproc_per_node", "checkpoint_every",
           "keep_last", "keep_every", "allow_data_change", "fresh_on_data_change", "slow_step_factor", "strategy", "checkpoint_format",
           "checkpoint_uri",  # where checkpoints are kept: the same run, on a filesystem or a bucket
           "dist_timeout_s", "spike_factor", "spike_patience", "spike_window", "max_skipped", "max_rollbacks",
           # recompute changes memory, not one bit of what is computed; init_from's identity is its weights' sha256
           "activation_checkpointing", "init_from",
           "profile")  # watching a step changes no bit of it
Log = Callable[[str], None]


# Settings added after runs existed, at the value those runs had: left out of an identity that holds
# them at it, so those runs keep their identity and tag (and their kept checkpoints).
IMPLIED = {"train.schedule": "cosine", "train.attention": "causal"}


def _shaping(train: dict) -> dict:
    # a setting added since a checkpoint was saved held its default then
    out = {f"train.{k}": train.get(k, Train.model_fields[k].default) for k in SHAPING}
    if out["train.schedule"] == "cosine":
        del out["train.decay_fraction"]  # only wsd reads it
    return {k: v for k, v in out.items() if k not in IMPLIED or IMPLIED[k] != v}


def _init(weights: dict | None) -> dict:
    return {"init": weights} if weights else {}  # absent without init_from: older runs keep their identity


def current(params: Params, loader_state: dict, model: dict | None = None, init=None) -> dict:
    """This run's identity; `model` is the model section as built (train.init_from's shape), `init`
    the imported directory (shardline.model.hf.Imported), whose weights' sha256 are part of it."""
    return {"data_version": loader_state["data_version"], "mix": loader_state["mix"],
            "loader.seed": loader_state["seed"], "loader.global_batch": loader_state["global_batch"],
            "seq_len": loader_state["seq_len"], "model": identity_of(model or params.section("model")),
            **_shaping(params.section("train")), **_init(init.files if init else None)}


def saved(state: dict, lineage: Lineage) -> dict:
    """The identity a checkpoint was saved with: its train state and its manifest's lineage."""
    ld, params, init = state["loader"], lineage.params, lineage.init
    return {"data_version": ld["data_version"], "mix": ld["mix"], "loader.seed": ld["seed"],
            "loader.global_batch": ld["global_batch"], "seq_len": ld["seq_len"], "model": identity_of(params["model"]),
            **_shaping(params["train"]), **_init(init.weights_sha256 if init else None)}


def diff(old: dict, new: dict) -> list[str]:
    def at(ident: dict, k: str):
        return ident.get(k, IMPLIED.get(k))

    return [f"{k}: saved {at(old, k)!r}, now {at(new, k)!r}" for k in {**old, **new} if at(old, k) != at(new, k)]


def tag(ident: dict) -> str:
    return fsio.stable_hash(ident)[:12]


def decide(changes: list[str], where: str, *, allow: bool, fresh: bool) -> str:
    """'resume', 'continue' (allowed change), 'fresh', or raise BadInput naming the changes."""
    if not changes:
        return "resume"
    if fresh:
        return "fresh"
    model_changed = any(c.startswith(("model:", "seq_len:", "init:")) for c in changes)
    if allow and not model_changed:
        return "continue"
    what = "\n  ".join(changes)
    ways = ("run it as an experiment, `dvc exp run` (a new model; these checkpoints stay restorable), or set "
            "train.fresh_on_data_change: true (those no commit records move to data/checkpoints/archive/)")
    cont = ("" if model_changed else "; to continue this model on the new settings, set "
            "train.allow_data_change: true (recorded in the lineage)")
    raise BadInput(f"train: this run's identity differs from {where}'s:\n  {what}\nTo train a new model for these "
                   f"settings, {ways}{cont}; or restore what it was trained with ('git checkout' + 'dvc checkout').")


def set_aside(root: Path, old: dict, recoverable: Callable[[Path], bool] | None, log: Log) -> None:
    """Clear data/checkpoints for a fresh start (see the module contract)."""
    removed, moved = [], []
    dest = root / ARCHIVE / tag(old)
    paths = [e.path for e in checkpoint.entries(root)] + sorted(root.glob(f"{ARCHIVE}/*/{STEP_DIRS}"))
    elsewhere = {p: recoverable is not None and recoverable(p) for p in paths}
    ledger = root / ROLLBACKS  # the old run's rollbacks go first, then its checkpoints: a kill in
    if ledger.exists():           # between must not leave them to the new run
        if any(not elsewhere[p] and p.parent == root for p in paths):
            dest.mkdir(parents=True, exist_ok=True)
            ledger.rename(dest / ROLLBACKS)
        else:
            ledger.unlink()
    for path in paths:
        if elsewhere[path]:
            checkpoint.remove(path)
            removed.append(path.name)
        elif path.parent == root:
            dest.mkdir(parents=True, exist_ok=True)
            target = dest / path.name
            n = 1
            while target.exists():
                target, n = dest / f"{path.name}.{n}", n + 1
            path.rename(target)
            moved.append(path.name)
    if dest.exists():
        fsio.fsync_dir(dest)
    fsio.fsync_dir(root)
    for d in root.glob(f"{ARCHIVE}/*"):
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    if removed:
        log(f"train: removed {', '.join(removed)}: restorable ('dvc checkout' of the commit or experiment "
            "that recorded them)")
    if moved:
        log(f"train: {', '.join(moved)} moved to {dest} (kept: no commit or experiment records them)")
