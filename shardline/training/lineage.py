"""What a checkpoint was trained on, recorded in every manifest.

Contract: `collect` gathers, as values (never only hashes): the data version (the content
hash of the shards the loader verified, the md5 the orchestrator's data versioning records for
data/shards (DVC's, from dvc.lock), and the tokenizer hash), the cleaning rules, the mix, the sources (uri + sha256
of every raw file, from the download manifests when present), the model/train/loader/shard
params (the model section as built: train.init_from's shape when there is one), the EOS and
BOS ids (the document boundaries), `init` (train.init_from's directory, architecture, the sha256
of each weight file and its held-out eval before training), the git commit and dirty flag, the
orchestrator's run id (a Prefect flow-run id), the parent checkpoint, the training guards' rollbacks so far (shardline.training.guard's ledger), and
`continued_from`: when this identity's training continued from a
checkpoint of another data version or mix, that checkpoint, what changed, its own eval and its
eval on this run's held-out set (the "before" of a before/after). `describe` renders it, with
the manifest's eval, for `shardline lineage`. The lineage is a typed record
(shardline.training.records.Lineage), and so is what `describe` reads.

Design: docs/architecture.md (Data contracts: Lineage; Layers: what orchestrators hand the engine).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


from shardline.core import fsio
from shardline.data import download, tokenizer
from shardline.data.clean.stage.summary import read as clean_stats
from shardline.training import guard
from shardline.training.steplog import equal
from shardline.core.config import Params
from shardline.core.layout import Layout
from shardline.core.filenames import PARAMS
from shardline.training.records import Code, DataVersion, Init, Lineage, Manifest, RawFile, RawSource, Run, SpecialIds


def git_state(root: Path, not_code: tuple[str, ...] = ()) -> dict:
    """The commit checked out at `root` and whether a tracked file that is code differs from it
    (staged or not; anywhere in the repo). Not code, whoever runs the line: params.yaml (the
    lineage records its sections by value) and data/ (the line's outputs, their ignore lists).
    What an orchestrator writes besides as it runs (DVC's lock file, which a fresh clone's first
    run rewrites before training starts) only the orchestrator knows: `not_code`, git pathspec
    globs from `root` (RunContext.not_code). Without them, that first run already says dirty."""
    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    layout = Layout.at(root)
    skip = (PARAMS, f"{layout.rel(layout.data)}/**", *not_code)
    commit = git("rev-parse", "HEAD")
    # ":(top)": the whole repo, as before; the exclusions are relative to root (a project may sit
    # in a subfolder of its repo)
    status = git("status", "--porcelain", "--untracked-files=no", "--", ":(top)",
                 *(f":(exclude,glob){p}" for p in skip))
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def sources(params: Params, layout: Layout) -> tuple[RawSource, ...]:
    out = []
    for s in params.sources:
        m = layout.manifest(s.name)  # the download's manifest (data/raw), not a checkpoint's
        got = download.read_manifest(layout, s.name) if m.exists() else {}
        files = got.get("files")
        dataset = None if s.dataset is None else {  # the commit it resolved to (a folder: its content hash)
            **s.dataset.model_dump(), "resolved": got.get("revision") or got.get("content")}
        out.append(RawSource(s.name, s.uri, tuple(RawFile(f["path"], f["sha256"]) for f in files) if files else None,
                             dataset, absent=frozenset() if dataset else frozenset({"dataset"})))
    return tuple(out)


def collect(params: Params, layout: Layout, shards_version: str, *, parent: str | None = None,
            run_id: str | None = None, shards_md5: str | None = None, data_change: list[str] | None = None,
            continued_from: dict | None = None, rollbacks: list[dict] | None = None, model: dict | None = None,
            init: dict | Init | None = None, not_code: tuple[str, ...] = (), vocab_size: int | None = None) -> Lineage:
    """`init`: as shardline.model's import gives it (a dict), or the record a checkpoint holds;
    `vocab_size`: the network's, as built."""
    meta = tokenizer.read_meta(layout.tokenizer_meta, layout) if layout.tokenizer_meta.exists() else {}
    sections = {k: params.section(k) for k in ("model", "train", "loader", "shard", "tokenizer")}
    return Lineage(
        data_version=DataVersion(shards_version, shards_md5, meta.get("sha256")),
        # the document boundaries the model's attention reads (train.attention document), as ids
        special_ids=SpecialIds(meta.get("eos_id"), meta.get("bos_id")),
        clean_rules=params.section("clean"),
        # what the rules read besides the raw data (URL blocklist, evaluation sets), by content hash
        clean_rule_inputs=(clean_stats(layout).get("rule_inputs") or None)
        if layout.clean_stats.exists() else None,
        source_clean_rules={s.name: s.clean for s in params.sources if s.clean},
        mix=params.mix,
        sources=sources(params, layout),
        params={**sections, "model": model or sections["model"]},  # the model as built (init_from's shape)
        code=Code(**git_state(layout.root, not_code)),  # not_code: what the orchestrator writes
        run=Run(run_id),
        parent=parent,
        data_change=tuple(data_change or ()),
        continued_from=continued_from,
        rollbacks=tuple(rollbacks or ()),
        init=Init.parse(init, "init.") if isinstance(init, dict) else init,
        heldout=heldout_of(layout),
        clean_rule_code=(clean_stats(layout).get("rule_code") or None) if layout.clean_stats.exists() else None,
        vocab_size=vocab_size, plugins=plugins_used(params))


def plugins_used(params: Params) -> dict[str, dict[str, str]] | None:
    """The plug-in architecture and trackers a run names, with their distributions and releases."""
    from shardline.core import extras, plugins
    from shardline.core.sections_model import ARCHITECTURES

    used = {"architectures": plugins.versions("architectures", {params.model.arch} - set(ARCHITECTURES)),
            "trackers": plugins.versions("trackers", set(params.log.backends) - set(extras.TRACKERS))}
    return {k: v for k, v in used.items() if v} or None


def heldout_of(layout: Layout) -> dict[str, str] | None:
    """Each source's held-out fingerprint, as the clean stage's split.json records it (None: none)."""
    split = fsio.read_json(layout.clean_split) if layout.clean_split.exists() else {}
    return {n: h["sha256"] for n, h in split["heldout"].items()} if "heldout" in split else None


def eval_line(ev: dict | None) -> str:
    if not ev:
        return "none"
    per = ", ".join(f"{n} {v['loss']:.4f} ({v['bpb']:.4f} bpb)" for n, v in ev["sources"].items())
    t = equal(ev)
    return f"loss {t['loss']:.4f}, {t['bpb']:.4f} bits/byte (sources weighted equally); {per}"


def describe(manifest: Manifest) -> str:
    lin, dv = manifest.lineage, manifest.lineage.data_version
    lines = [f"checkpoint step {manifest.step}",
             f"  data version: shards {dv.shards_sha256[:16]}  dvc md5 {dv.dvc_md5}  tokenizer "
             f"{(dv.tokenizer_sha256 or '')[:16]}",
             f"  mix: {json.dumps(lin.mix)}",
             f"  parent: {lin.parent or '(fresh start)'}",
             f"  code: git {lin.code.commit}{' (dirty)' if lin.code.dirty else ''}",
             f"  prefect flow run: {lin.run.prefect_flow_run_id}"]
    if lin.data_change:
        lines.append("  ALLOWED DATA CHANGE at this resume: " + "; ".join(lin.data_change))
    lines.append(f"  eval (held-out) at step {manifest.step}: {eval_line(manifest.eval)}")
    if lin.init:
        files = ", ".join(f"{f} {h}" for f, h in lin.init.weights_sha256.items())
        lines.append(f"  initialised from {lin.init.source} ({lin.init.architecture}); weights sha256: {files}")
        lines.append(f"    it, on the held-out set before training: {eval_line(lin.init.eval)}")
    origin = lin.continued_from
    if origin:
        lines.append(f"  continued from {origin['checkpoint']} of another data version/mix "
                     f"({'; '.join(origin['changes'])})")
        lines.append(f"    it, on today's held-out set: {eval_line(origin['eval_now'])}")
    for e in lin.rollbacks:
        lines.append(f"  {guard.describe(e)}")
    for s in lin.sources:
        where = s.uri if s.dataset is None else f"dataset {s.dataset['name']} at {s.dataset.get('resolved')}"
        lines.append(f"  source {s.name}: {where} ({len(s.files) if s.files else '?'} files)")
    lines.append("  clean rules: " + json.dumps(lin.clean_rules, sort_keys=True))
    for name, own in lin.source_clean_rules.items():
        lines.append(f"  clean rules of {name}: " + json.dumps(own, sort_keys=True))
    lines.append("  params: " + json.dumps(lin.params, sort_keys=True))
    lines.append("  versions: " + json.dumps(manifest.versions, sort_keys=True))
    return "\n".join(lines)
