"""Judge a saved checkpoint: its loss and bits per byte on the current held-out shards.

Contract: `judge(path, params, layout)` loads the model of a verified checkpoint
(`trained.load_model`: its shape from the tensors and the lineage), evaluates it as training does
(`shardline.training.evaluate`, eval.blocks per source, the precision and per-rank batch it was trained
with; on CPU, one process: a run trained on more ranks may differ in the last bits) on the
held-out shards of the sources params.yaml names now (from loader.shards_uri when the shards
stream, every read under params.store's retry policy), and says what it was trained on beside
what it is judged on. A checkpoint trained on another data version or mix is judged (that is how
two runs are compared on one held-out set) and flagged; one whose tokenizer differs from the
held-out shards' is refused, since its ids would mean other text.
"""

from __future__ import annotations

from pathlib import Path

import torch

from shardline.core import retry
from shardline.core.config import Params, Train
from shardline.core.errors import BadInput
from shardline.data import tokenizer
from shardline.training import lineage, noise
from shardline.training.evaluate import HeldOut, boundary_ids, evaluate
from shardline.training.steplog import equal, own_mix, read_records
from shardline.core.layout import Layout
from shardline.stream.loader import data_version, open_sources
from shardline.stream.remote import Remote
from shardline.training.session import autocast_for
from shardline.results.trained import load_model


def judge(path: Path, params: Params, layout: Layout, device: torch.device | None = None) -> dict:
    model, state, manifest = load_model(path)
    gcfg, lin = model.cfg, manifest.lineage
    names = [s.name for s in params.sources]
    meta = tokenizer.read_meta(layout.tokenizer_meta, layout) if layout.tokenizer_meta.exists() else {}
    c = params.loader  # a node that streams its shards judges on the store's held-out shards
    remote = (Remote(c.shards_uri, str(layout.under_root(c.cache_dir)), c.cache_mb, c.prefetch,
                     retry.of(params.store, "store")) if c.shards_uri else None)
    held = HeldOut.open(layout.shards, names, params.eval.blocks, layout.tokenizer_json, remote,
                        boundaries=boundary_ids(meta), eos=meta.get("eos_id"))
    if not any(len(b.ids) for b in held.blocks):
        raise BadInput(f"{layout.rel(layout.shards)}: no source has a held-out block (val/ holds fewer tokens than "
                       "one block): nothing to judge on; raise eval.fraction or eval.min_docs and re-run 'dvc repro'")
    trained_tok = lin.data_version.tokenizer_sha256
    if trained_tok != held.tokenizer_sha256:
        raise BadInput(f"{path.name} was trained with tokenizer {(trained_tok or '?')[:12]}…, but the held-out shards "
                       f"in {layout.rel(layout.shards)} are encoded with {held.tokenizer_sha256[:12]}…: its ids would "
                       "mean other text. Judge it on its own data version ('git checkout <its commit>' + "
                       "'dvc checkout'), or compare runs that share a tokenizer")
    if held.seq_len > gcfg.seq_len:
        raise BadInput(f"{path.name} has {gcfg.seq_len} positions; the held-out blocks are {held.seq_len} tokens "
                       "long (shard.seq_len): re-shard with its seq_len to judge it")
    now = data_version(open_sources(layout.shards, names, remote))
    trained = lin.data_version.shards_sha256
    device = device or torch.device("cpu")
    model.to(device)
    cfg = Train(**{k: v for k, v in lin.params["train"].items() if k in Train.model_fields})
    # the batches training scored with (one rank's share of a global batch), so a judged
    # checkpoint of this data version gives back the eval its manifest holds
    batch = state["loader"]["global_batch"] // state.get("world_size", 1)
    ev = evaluate(model, held, params.mix or {n: 1.0 for n in names}, batch=batch,
                  device=device, autocast=autocast_for(cfg, device) if cfg.precision != "fp16" or device.type == "cuda"
                  else None)
    heldout = lineage.heldout_of(layout)
    rows = read_records(layout.train_log) if layout.train_log.exists() else []
    ran = any(r["step"] == manifest.step for r in rows)  # this checkpoint's own run: its training losses are here
    return {"checkpoint": path.name, "step": manifest.step,
            "recent_train_loss": noise.recent_train_loss(rows, manifest.step) if ran else None,
            "heldout": {"recorded": lin.heldout, "now": heldout, "same": lin.heldout is not None and lin.heldout == heldout},
            "trained_on": {"data_version": trained, "mix": lin.mix},
            "judged_on": {"data_version": now, "mix": params.mix,
                          "blocks": {b.name: [len(b.ids), b.available] for b in held.blocks}},
            "same_data": trained == now, "same_mix": lin.mix == params.mix,
            "recorded": manifest.eval, **ev}


def describe(result: dict, resolution: float = 0.05) -> str:
    r = result
    lines = [f"{r['checkpoint']} (step {r['step']}) judged on the held-out shards of data version "
             f"{r['judged_on']['data_version'][:12]}… ("
             + ", ".join(f"{n}: {a} of {b} blocks" for n, (a, b) in r["judged_on"]["blocks"].items()) + ")"]
    if not r["same_data"] or not r["same_mix"]:
        what = [f"data version {r['trained_on']['data_version'][:12]}…"] if not r["same_data"] else []
        what += [f"mix {r['trained_on']['mix']}"] if not r["same_mix"] else []
        lines.append(f"NOTE: trained on {' and '.join(what)}, not on what params.yaml and data/ hold now: these are "
                     "today's held-out documents, not the ones it was validated on while training")
    warn = heldout_warning(r)
    if warn:
        lines.append(warn)
    lines += table(r)
    lines += [f"WARNING: {w}" for w in flags(r, resolution, r.get("recent_train_loss"))]
    return "\n".join(lines)


def _ci(v: dict, key: str) -> str:
    ci = v.get(f"{key}_ci")
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""


def table(ev: dict) -> list[str]:
    """An eval's figures per source and in total, each with its 95% interval over documents."""
    lines = [f"{'source':12} {'docs':>5} {'tokens':>8} {'loss':>7} {'95% interval':>16} {'per doc':>8} "
             f"{'bits/byte':>9} {'95% interval':>16}"]
    for n, v in ev["sources"].items():
        lines.append(f"{n:12} {v.get('docs', ''):>5} {v['tokens']:8,} {v['loss']:7.4f} {_ci(v, 'loss'):>16} "
                     f"{v.get('doc_loss', float('nan')):8.4f} {v['bpb']:9.4f} {_ci(v, 'bpb'):>16}")
    t, own = equal(ev), own_mix(ev)
    lines.append(f"{'total':12} {'':>5} {'':>8} {t['loss']:7.4f} {_ci(t, 'loss'):>16} {'':>8} {t['bpb']:9.4f} "
                 f"{_ci(t, 'bpb'):>16}   (sources weighted equally: the total runs are compared by)")
    w = ", ".join(f"{n} {x:.2f}" for n, x in own.get("weights", {}).items())
    lines.append(f"{'own mix':12} {'':>5} {'':>8} {own['loss']:7.4f} {_ci(own, 'loss'):>16} {'':>8} {own['bpb']:9.4f} "
                 f"{_ci(own, 'bpb'):>16}   (weighted by the mix judged with: {w})")
    return lines


def flags(ev: dict, resolution: float, train: tuple[float, float, int] | None = None) -> list[str]:
    """What makes an eval's figures less than they look: a source judged on too few documents or
    with too wide an interval, a held-out set easier than the training data."""
    out = [noise.thin(n, v, resolution) for n, v in ev["sources"].items()]
    return [w for w in [*out, noise.against_training(own_mix(ev), train)] if w]


def heldout_warning(r: dict) -> str | None:
    """One line when the checkpoint's recorded eval was on another held-out set than this one."""
    h = r["heldout"]
    if h["same"]:
        return None
    step = f"{r['checkpoint']} (step {r['step']})"
    if h["recorded"] is None:
        return (f"WARNING: {step} records no held-out fingerprint (trained before held-out sets were keyed by "
                "content and fingerprinted): its recorded eval may be on other documents than this one")
    now = h["now"] or {}
    moved = sorted(n for n in set(h["recorded"]) | set(now) if h["recorded"].get(n) != now.get(n))
    return (f"WARNING: {step} recorded its eval on another held-out set than data/clean holds now "
            f"(sources {', '.join(moved)}): the two losses are not on the same documents")
