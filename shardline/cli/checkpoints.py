"""The commands on checkpoints: `shardline checkpoints`, `lineage`, `eval`, `export`, `sample`.

Contract: a CHECKPOINT argument is a step-NNNNNNNNN directory, its name under data/checkpoints, or
`latest` (the newest valid one); an invalid one is refused with why, one that does not exist with
the names that do, each with the command that lists them. When params.yaml sets
train.checkpoint_uri, names and `latest` are the store's, each read from a verified copy under
.shardline/fetched/ (shardline.training.storage.fetch), and `checkpoints` lists the store. Each
command reads only, but for
`eval --tasks`, which keeps its results in data/metrics (shardline.results.judge_tasks); the engine's
results/ and training/ modules do the work, imported (torch with them) only once the checkpoint
is found, so a mistyped one is refused at once.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from shardline.cli import log
from shardline import paramsfile
from shardline.core.errors import ShardlineError
from shardline.core.layout import Layout
from shardline.core.filenames import step_dirs

CHECKPOINT_HELP = "a step-NNNNNNNNN directory (or its name, or 'latest')"


def _store(layout: Layout, args: argparse.Namespace) -> str | None:
    """train.checkpoint_uri, when params.yaml sets one: the checkpoints are in that store, read
    under the store section's retry policy (a bucketio.URL carries it)."""
    path = Path(layout.root, args.params)
    params = paramsfile.load(path) if path.exists() else None
    if params is None or not params.train.checkpoint_uri:
        return None
    from shardline.core import retry, stores
    from shardline.training import bucketio

    url = bucketio.URL(params.train.checkpoint_uri, retry.of(params.store, "store"))
    stores.check_bucket(url, "train.checkpoint_uri", url.policy)  # else "no checkpoints" of a bucket not there
    return url


def _from_store(layout: Layout, name: str, uri: str) -> Path:
    from shardline.training import bucket, storage

    if name == "latest":
        url = bucket.latest_valid(uri, log)
        if url is None:
            raise ShardlineError(f"latest: no valid checkpoint under train.checkpoint_uri {uri}; train one, or "
                                 "'shardline checkpoints' lists what is there")
    else:
        there = bucket.step_dirs(uri)
        url = next((u for u in there if u.name == Path(name).name), None)
        if url is None:
            raise ShardlineError(f"{name}: no such checkpoint (under train.checkpoint_uri {uri}: "
                                 f"{'... ' if len(there) > 5 else ''}{', '.join(u.name for u in there[-5:]) or 'none'})"
                                 "; 'shardline checkpoints' lists them")
    return storage.fetch(url, layout.fetched)


def _checkpoint(layout: Layout, name: str, args: argparse.Namespace) -> Path:
    from shardline.training import checkpoint

    uri = _store(layout, args)
    if uri and not Path(name).exists():  # a folder given by its path is read where it is
        return _from_store(layout, name, uri)
    if name == "latest":
        path = checkpoint.latest_valid(layout.checkpoints, log)
        if path is None:
            raise ShardlineError(f"latest: no valid checkpoint under {layout.rel(layout.checkpoints)}; train one "
                                 "('dvc repro train'), or 'shardline checkpoints' lists what is there")
    else:
        path = Path(name) if Path(name).exists() else layout.checkpoints / name
    if not path.exists():  # not a torn write: nothing there at all
        there = [p.name for p in step_dirs(layout.checkpoints)]
        raise ShardlineError(f"{name}: no such checkpoint (under {layout.rel(layout.checkpoints)}: "
                             f"{'... ' if len(there) > 5 else ''}{', '.join(there[-5:]) or 'none'}); "
                             "'shardline checkpoints' lists them")
    ok, why = checkpoint.verify(path)
    if not ok:
        raise ShardlineError(f"{path}: not a valid checkpoint ({why}); 'shardline checkpoints' lists them")
    return path


def cmd_checkpoints(args: argparse.Namespace) -> int:
    from shardline.training import checkpoint

    layout = Layout.at(args.root)
    uri = _store(layout, args)
    if uri:
        from shardline.training import bucket

        rows = bucket.entries(uri)
    else:
        rows = checkpoint.entries(layout.checkpoints)
    if not rows:
        print(f"no checkpoints under {uri or layout.checkpoints}")
    for e in rows:
        print(f"{e.path.name}  {'valid  ' if e.valid else 'INVALID'}  {e.why}")
    for path in checkpoint.tidy_kept(layout.kept, layout.checkpoints, None, log=lambda _: None):
        ok, why = checkpoint.verify(path)
        print(f"{layout.rel(path)}  {'valid  ' if ok else 'INVALID'}  kept: the only copy (restore: "
              f"cp -al {layout.rel(path)} data/checkpoints/)")
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from shardline.training import checkpoint, lineage

    path = _checkpoint(Layout.at(args.root), args.checkpoint, args)
    manifest = checkpoint.read_manifest(path)
    if args.json:  # sorted, as manifest.json holds it: the order it has always printed in
        print(json.dumps(manifest.lineage.to_json(), indent=2, sort_keys=True))
    else:
        print(lineage.describe(manifest))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    layout = Layout.at(args.root)
    if args.tasks:
        return _eval_tasks(args, layout)
    params = paramsfile.load(Path(layout.root, args.params))
    path = _checkpoint(layout, args.checkpoint, args)  # refused in a blink: before torch is imported

    from shardline.results import judge

    result = judge.judge(path, params, layout)
    print(json.dumps(result, indent=2) if args.json else judge.describe(result, params.eval.resolution))
    return 0


def _eval_tasks(args: argparse.Namespace, layout: Layout) -> int:
    specs = [t.strip() for group in args.tasks for t in group.split(",") if t.strip()]
    for flag, n in (("--limit", args.limit), ("--batch-size", args.batch_size)):
        if n is not None and n < 1:
            raise ShardlineError(f"{flag}: {n}; give a whole number >= 1")
    if not specs:
        raise ShardlineError("--tasks: no task named; give lm-eval task names or task YAML paths, comma-separated")
    path = _checkpoint(layout, args.checkpoint, args)

    from shardline.results.judge_tasks import judge_tasks
    from shardline.training.downstream import describe

    r = judge_tasks(path, layout, specs, limit=args.limit, batch_size=args.batch_size)
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"{r['checkpoint']} (step {r['step']}) on {len(r['tasks'])} task(s)"
              + (f", {args.limit} examples each at most" if args.limit else ""))
        print(describe(r["tasks"]))
    log(f"eval: kept in {r['kept']}; eval.json shows them" if r["kept"] else f"eval: not kept in eval.json: {r['why']}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    layout = Layout.at(args.root)
    path = _checkpoint(layout, args.checkpoint, args)

    from shardline.results import export

    out = export.export(path, Path(args.out_dir), layout, force=args.force)
    log(f"export: {path.name} -> {out} (transformers: AutoModelForCausalLM / AutoTokenizer.from_pretrained)")
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    layout = Layout.at(args.root)
    path = _checkpoint(layout, args.checkpoint, args)

    from shardline.results import sample

    settings = sample.Settings(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                               seed=args.seed)
    r = sample.sample(path, layout, args.prompt, settings)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    log(f"sample: {r['checkpoint']}: {len(r['prompt_ids'])} prompt ids + {len(r['ids'])} new (stopped at "
        f"{r['stopped']}{', context cropped to the last seq_len ids' if r['cropped'] else ''})")
    print(r["text"])
    return 0


def _run(layout: Layout, name: str, args: argparse.Namespace):
    """A diff's side: a checkpoint of this work tree (step-N, a path, `latest`), else a git revision
    or a DVC experiment, read from DVC's cache without a checkout (shardline.dvcrepo.revisions)."""
    from shardline.results import runs

    if name == "latest" or Path(name).exists() or (layout.checkpoints / name).exists() or name.startswith("step-"):
        return runs.Run.open(name, layout, _checkpoint(layout, name, args))
    from shardline.dvcrepo import revisions

    view, commit, missing = revisions.view(layout.root, name)
    if missing:
        log(f"diff: {name} ({commit[:12]}): {len(missing)} file(s) of its outputs are not in DVC's cache "
            f"(e.g. {missing[0]}; 'dvc pull' fetches them): what needs them is not compared")
    return runs.latest(f"{name} ({commit[:8]})" if not commit.startswith(name) else commit[:8], view)


def _others(layout: Layout, *runs) -> list:
    """(name, manifest) of the other runs the repo records (branches, experiments), read from DVC's
    cache: where the replicates that measure the seeds' noise are found. None outside a git repo."""
    from shardline.dvcrepo import revisions

    if not (layout.root / ".git").exists() or not (layout.root / ".dvc").exists():
        return []
    skip = {r.layout.root.name for r in runs if r.layout.root.parent == layout.views}  # the views' commits
    found = revisions.others(layout.root, skip)
    got = revisions.manifests(layout.root, [c for _, c in found])
    return [(name, got[c]) for name, c in found if got.get(c) is not None]


def cmd_diff(args: argparse.Namespace) -> int:
    layout = Layout.at(args.root)
    path = Path(layout.root, args.params)
    params = paramsfile.load(path) if path.exists() else None
    a, b = _run(layout, args.a, args), _run(layout, args.b, args)

    from shardline.results import diff

    c = diff.compare(a, b, params.eval.doc_bytes if params else 4096, layout, _others(layout, a, b))
    print(json.dumps(c, indent=2, default=str) if args.json else diff.render(c))
    return 0
