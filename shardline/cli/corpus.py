"""The commands on the data: `shardline explain` (why clean dropped or kept a document) and
`push-shards` (publish data/shards at an fsspec URL for loader.shards_uri).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from shardline.cli import log
from shardline.core import retry, shardformat
from shardline import paramsfile
from shardline.core.errors import BadInput
from shardline.core.layout import Layout


def cmd_explain(args: argparse.Namespace) -> int:
    layout = Layout.at(args.root)
    if (args.doc_id is None) == (args.step is None):
        raise BadInput("explain: give a document id or --step N (one of them)")
    if args.step is not None:  # the run's own loader settings come from its checkpoint: params.yaml only without one
        from shardline.results import steps

        r = steps.Steps(layout, lambda: paramsfile.load(Path(args.root, args.params))).saw(args.step)
        print(json.dumps(r, indent=2) if args.json else steps.render(r))
        return 0
    from shardline.data.clean.stage import explain

    params = paramsfile.load(Path(args.root, args.params))  # a lookup: no rule runs, so no extra is needed
    e = explain.explain(params, layout, args.doc_id, args.source)
    print(json.dumps(e, indent=2) if args.json else explain.render(e))
    return 0


def cmd_push_shards(args: argparse.Namespace) -> int:
    from shardline.stream import remote

    layout = Layout.at(args.root)
    params = paramsfile.load(Path(layout.root, args.params))
    names = [n for s in params.sources for n in (s.name, f"{s.name}/val")]  # the held-out shards too
    for name in names:  # all there before anything is sent: never half a line published
        shardformat.read_index(layout.shards / name, "; build the shards first ('dvc repro shard'), then push them",
                               show=layout.rel)
    sent = remote.upload_shards(layout.shards, args.uri, names, log=log, policy=retry.of(params.store, "store"),
                                receipts=layout.push_receipts)
    log(f"push-shards: {sent} file(s) sent; set loader.shards_uri: {args.uri} to stream them")
    return 0
