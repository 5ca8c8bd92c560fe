"""The `shardline` command.

  shardline stage NAME      run one data stage in-process (what dvc.yaml's cmds call)
  shardline pipeline        run the Prefect pipeline flow (needs PREFECT_API_URL or starts
                            an ephemeral server)
  shardline serve           local Prefect server on 127.0.0.1 (state in .prefect/) + a runner
                            serving the 'line' and scheduled 'retrain' deployments
  shardline deploy          the same deployments from prefect.yaml on a process work pool
                            (created if missing) of the server at PREFECT_API_URL
  shardline worker          mark a dead worker's runs Crashed, then prefect worker start --pool
  shardline params          validate params.yaml and print the resolved settings
  shardline checkpoints     list checkpoints, valid or not and why
  shardline explain DOC_ID  why the clean stage dropped a document (rule, value, limit), or where it kept it
  shardline lineage CKPT    what a checkpoint was trained on (data version, mix, rules, code) and its eval
  shardline eval CKPT       its loss and bits per byte on the current held-out shards
  shardline export CKPT OUT a Hugging Face transformers model directory (Llama or GPT-2, safetensors, tokenizer,
                            lineage.json, model card)
  shardline sample CKPT     continue --prompt TEXT (greedy with --temperature 0, or seeded sampling)
  shardline push-shards URI publish data/shards at an fsspec URL (s3://...) for loader.shards_uri

Errors from the engine are printed as one clear message (no traceback) with exit code 2;
transient failures exit 75 (EX_TEMPFAIL) so wrappers can tell them apart.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import time
from pathlib import Path

from shardline import stages
from shardline.core import chaos, config
from shardline.core.errors import ShardlineError, is_transient
from shardline.core.layout import Layout


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cmd_stage(args: argparse.Namespace) -> int:
    layout = Layout.at(args.root)
    params = config.load(Path(layout.root, args.params))
    t0 = time.perf_counter()
    # `dvc repro` runs this as a stage's command; torchrun's ranks (LOCAL_RANK) inherit DVC_STAGE
    # from the process that launched them, which alone is dvc's command
    under_dvc = bool(os.environ.get("DVC_STAGE")) and "LOCAL_RANK" not in os.environ
    if under_dvc:
        from flows import dvcrepo

        with dvcrepo.open_repo(layout.root) as repo:
            dvcrepo.ignore_outputs(repo)  # those an earlier failed `dvc repro` took out of .gitignore
    def elsewhere():
        from flows.stages import run_stage  # parts on a Prefect task runner (Dask, Ray, processes)

        return run_stage(args.name, str(layout.root), args.params, params)

    stages.run(args.name, params, layout, elsewhere, log=_log, **_train_context(args, layout))
    _log(f"{args.name}: done in {time.perf_counter() - t0:.1f}s")
    if under_dvc:
        chaos.point("dvc.record", group=True)  # the stage done, dvc not yet told: dvc dies with it
    return 0


def _train_context(args: argparse.Namespace, layout: Layout) -> dict:
    """What only the orchestrator knows, for the train stage: whether this is a new experiment
    (`dvc exp run` marks its stage commands with DVC_EXP_NAME), which checkpoints DVC's cache
    holds (so making room for a new run loses nothing), the md5 dvc.lock records for the shards
    and the run id (a Prefect flow run's, when one started this process); torchrun's ranks get
    the last two from the process that launched them (--shards-md5, --run-id)."""
    if args.name != "train":
        return {}
    from flows import dvcrepo

    return {"new_run": bool(os.environ.get("DVC_EXP_NAME")), "recoverable": dvcrepo.in_cache(layout.root),
            "recorded": bool(os.environ.get("DVC_STAGE")),  # under dvc repro: DVC commits the outputs next
            "run_id": args.run_id or os.environ.get("PREFECT__FLOW_RUN_ID"),
            "shards_md5": args.shards_md5 or dvcrepo.shards_md5(layout)}


def _checkpoint(layout: Layout, name: str) -> Path:
    from shardline.training import checkpoint

    if name == "latest":
        path = checkpoint.latest_valid(layout.checkpoints, _log)
    else:
        path = Path(name) if Path(name).exists() else layout.checkpoints / name
    ok, why = checkpoint.verify(path) if path else (False, "no valid checkpoint")
    if not ok:
        raise ShardlineError(f"{path or name}: not a valid checkpoint ({why}); 'shardline checkpoints' lists them")
    return path


def cmd_eval(args: argparse.Namespace) -> int:
    from shardline.results import judge

    layout = Layout.at(args.root)
    params = config.load(Path(layout.root, args.params))
    result = judge.judge(_checkpoint(layout, args.checkpoint), params, layout)
    print(json.dumps(result, indent=2) if args.json else judge.describe(result))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from shardline.results import export

    layout = Layout.at(args.root)
    path = _checkpoint(layout, args.checkpoint)
    out = export.export(path, Path(args.out_dir), layout, force=args.force)
    _log(f"export: {path.name} -> {out} (transformers: AutoModelForCausalLM / AutoTokenizer.from_pretrained)")
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    from shardline.results import sample

    layout = Layout.at(args.root)
    settings = sample.Settings(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                               seed=args.seed)
    r = sample.sample(_checkpoint(layout, args.checkpoint), layout, args.prompt, settings)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    _log(f"sample: {r['checkpoint']}: {len(r['prompt_ids'])} prompt ids + {len(r['ids'])} new (stopped at "
         f"{r['stopped']}{', context cropped to the last seq_len ids' if r['cropped'] else ''})")
    print(r["text"])
    return 0


def cmd_pipeline(args: argparse.Namespace) -> int:
    from flows.pipeline import pipeline

    report = pipeline(root=args.root, params_file=args.params)
    print(json.dumps(report, indent=2))
    return 0


def cmd_params(args: argparse.Namespace) -> int:
    params = config.load(Path(args.root, args.params))
    print(json.dumps(params.model_dump(mode="json"), indent=2))
    return 0


def cmd_checkpoints(args: argparse.Namespace) -> int:
    from shardline.training import checkpoint

    layout = Layout.at(args.root)
    rows = checkpoint.entries(layout.checkpoints)
    if not rows:
        print(f"no checkpoints under {layout.checkpoints}")
    for e in rows:
        print(f"{e.path.name}  {'valid  ' if e.valid else 'INVALID'}  {e.why}")
    for path in checkpoint.tidy_kept(layout.kept, layout.checkpoints, None, log=lambda _: None):
        ok, why = checkpoint.verify(path)
        print(f"{layout.rel(path)}  {'valid  ' if ok else 'INVALID'}  kept: the only copy (restore: "
              f"cp -al {layout.rel(path)} data/checkpoints/)")
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from shardline.training import checkpoint, lineage

    path = _checkpoint(Layout.at(args.root), args.checkpoint)
    manifest = json.loads((path / checkpoint.MANIFEST).read_text())
    print(json.dumps(manifest["lineage"], indent=2) if args.json else lineage.describe(manifest))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from shardline.data import explain

    layout = Layout.at(args.root)
    e = explain.explain(config.load(Path(args.root, args.params)), layout, args.doc_id, args.source)
    print(json.dumps(e, indent=2) if args.json else explain.render(e))
    return 0


def cmd_push_shards(args: argparse.Namespace) -> int:
    from shardline.stream import remote

    layout = Layout.at(args.root)
    params = config.load(Path(layout.root, args.params))
    names = [n for s in params.sources for n in (s.name, f"{s.name}/val")]  # the held-out shards too
    sent = remote.upload_shards(layout.shards, args.uri, names, log=_log)
    _log(f"push-shards: {sent} file(s) sent; set loader.shards_uri: {args.uri} to stream them")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import contextlib
    import os
    import urllib.request

    from flows.server import local_server, server_env

    layout = Layout.at(args.root)
    home = layout.prefect_home
    os.environ.update(server_env(home, args.port))  # before prefect reads its settings
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{args.port}/api/health", timeout=1)
        server = contextlib.nullcontext()  # a server is already up on that port: use it
        _log(f"serve: using the Prefect server already on 127.0.0.1:{args.port}")
    except OSError:
        server = local_server(home, args.port)
        _log(f"serve: starting a Prefect server on 127.0.0.1:{args.port} (state in {home})")
    with server:
        from flows.deploy import serve_line

        _log(f"serve: export PREFECT_API_URL=http://127.0.0.1:{args.port}/api, then "
             "prefect deployment run 'shardline-pipeline/line'")
        serve_line(layout.root, args.params)
    return 0


def cmd_pool(args: argparse.Namespace) -> int:
    from flows import deploy

    if args.command == "deploy":
        deploy.deploy_to_pool(Layout.at(args.root).root, args.params)
    else:
        deploy.start_worker(args.pool)  # returns only by raising: it execs the worker
    return 0


CHECKPOINT_HELP = "a step-NNNNNNNNN directory (or its name, or 'latest')"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shardline", description="Reproducible, crash-proof pretraining pipeline.")
    p.add_argument("--root", default=".", help="project root (holds params.yaml, dvc.yaml, data/)")
    p.add_argument("--params", default="params.yaml", help="params file, relative to --root")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stage", help="run one data stage in-process (dvc.yaml calls this)")
    s.add_argument("name", choices=stages.NAMES)
    s.add_argument("--run-id", help="train: the orchestrator's run id, for the lineage (default: a Prefect flow "
                   "run's, when one started this process)")
    s.add_argument("--shards-md5", help="train: the md5 the data versioning records for data/shards, for the "
                   "lineage (default: dvc.lock's)")
    s.set_defaults(fn=cmd_stage)
    sub.add_parser("pipeline", help="run the Prefect pipeline flow over the dvc.yaml DAG").set_defaults(fn=cmd_pipeline)
    sub.add_parser("params", help="validate params.yaml and print it resolved").set_defaults(fn=cmd_params)
    sub.add_parser("checkpoints", help="list checkpoints, valid or not and why").set_defaults(fn=cmd_checkpoints)
    s = sub.add_parser("serve", help="start a local Prefect server (if none) and serve the deployments")
    s.add_argument("--port", type=int, default=4200)
    s.set_defaults(fn=cmd_serve)
    sub.add_parser("deploy", help="create the work pool prefect.yaml names (process, if missing) and deploy "
                   "its deployments there").set_defaults(fn=cmd_pool)
    s = sub.add_parser("worker", help="mark runs of a dead worker Crashed, then prefect worker start --pool")
    s.add_argument("--pool", default="shardline", help="the work pool (default: shardline, as in prefect.yaml)")
    s.set_defaults(fn=cmd_pool)
    s = sub.add_parser("lineage", help="print what a checkpoint was trained on")
    s.add_argument("checkpoint", help=CHECKPOINT_HELP)
    s.add_argument("--json", action="store_true", help="the raw lineage as JSON")
    s.set_defaults(fn=cmd_lineage)
    s = sub.add_parser("explain", help="why the clean stage dropped a document, or where it kept it")
    s.add_argument("doc_id", help="a document id, <file under data/raw/<source>/files>:<line or row> (as in "
                   "data/clean/<source>/dropped/*.jsonl)")
    s.add_argument("--source", help="the source, when two have a file of that name")
    s.add_argument("--json", action="store_true", help="the verdict as JSON")
    s.set_defaults(fn=cmd_explain)
    s = sub.add_parser("eval", help="loss and bits per byte of a checkpoint on the current held-out shards")
    s.add_argument("checkpoint", help=CHECKPOINT_HELP)
    s.add_argument("--json", action="store_true", help="the full result as JSON")
    s.set_defaults(fn=cmd_eval)
    s = sub.add_parser("export", help="write a checkpoint as a Hugging Face transformers model directory",
                       description="Write OUT_DIR: model.safetensors + config.json (LlamaForCausalLM, Qwen3ForCausalLM with "
                       "qk_norm, or GPT2LMHeadModel; logits equal "
                       "ours), generation_config.json, the checkpoint's tokenizer (tokenizer.json, "
                       "tokenizer_config.json, special_tokens_map.json), lineage.json and a README.md model card. "
                       "Loads offline with AutoModelForCausalLM/AutoTokenizer.from_pretrained(OUT_DIR). Refuses an "
                       "invalid checkpoint, a data/tokenizer/tokenizer.json other than the one it trained with, and "
                       "a non-empty OUT_DIR.")
    s.add_argument("checkpoint", help=CHECKPOINT_HELP)
    s.add_argument("out_dir", metavar="OUT_DIR", help="the directory to write (written beside it, then renamed)")
    s.add_argument("--force", action="store_true", help="replace OUT_DIR when it holds a previous export")
    s.set_defaults(fn=cmd_export)
    s = sub.add_parser("sample", help="continue a prompt with a checkpoint",
                       description="Print a continuation of --prompt (encoded with the checkpoint's tokenizer, as "
                       "the training data was), on CPU. Stops at EOS or after --max-new-tokens. Past the model's "
                       "seq_len the context is cropped to its last seq_len tokens (transformers' generate refuses "
                       "there); until then greedy ids equal generate(do_sample=False) on the export. Sampling draws "
                       "from a generator seeded with --seed: the same seed gives the same text.")
    s.add_argument("checkpoint", help=CHECKPOINT_HELP)
    s.add_argument("--prompt", default="", help="the text to continue, as a document starts (after BOS when tokenizer.bos_token is set; "
                   "empty and no BOS: start at a document boundary, EOS)")
    s.add_argument("--max-new-tokens", type=int, default=64, help="at most this many new tokens (default 64)")
    s.add_argument("--temperature", type=float, default=0.8, help="0: greedy; else divides the logits (default 0.8)")
    s.add_argument("--top-k", type=int, default=200, help="sample among the K most likely tokens (default 200; 0: all)")
    s.add_argument("--seed", type=int, default=0, help="seeds the sampling generator (default 0)")
    s.add_argument("--json", action="store_true", help="the prompt and new token ids, text and settings as JSON")
    s.set_defaults(fn=cmd_sample)
    s = sub.add_parser("push-shards", help="publish data/shards at an fsspec URL for loader.shards_uri")
    s.add_argument("uri", help="e.g. s3://bucket/project/shards (credentials from the AWS_* environment)")
    s.set_defaults(fn=cmd_push_shards)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except ShardlineError as e:
        _log(f"error: {e}")
        return 75 if is_transient(e) else 2
    except BrokenPipeError:  # `shardline lineage latest | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        _log(f"error: no space left on the device while writing {e.filename or 'data/'}; free space and re-run "
             "the same command (finished parts and the last valid checkpoint are kept; nothing half-written is)")
        return 2
    except KeyboardInterrupt:
        _log("interrupted; re-run the same command to resume (finished parts are kept)")
        return 130


if __name__ == "__main__":
    sys.exit(main())
