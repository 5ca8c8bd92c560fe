"""The `shardline` command.

  shardline stage NAME      run one stage of the line (what dvc.yaml's cmds call): in-process, or its
                            parts on the task runner params.yaml's `parts` names
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
  shardline explain --step N  the documents and token ranges of each row of training step N's batch
  shardline lineage CKPT    what a checkpoint was trained on (data version, mix, rules, code) and its eval
  shardline eval CKPT       its loss and bits per byte on the current held-out shards
  shardline diff A B        what changed between two runs (checkpoints, revisions, experiments): data, training, results
  shardline eval CKPT --tasks T   its scores on lm-eval tasks (names or task YAMLs), into eval.json
  shardline export CKPT OUT a Hugging Face transformers model directory (Llama or GPT-2, safetensors, tokenizer,
                            lineage.json, model card)
  shardline sample CKPT     continue --prompt TEXT (greedy with --temperature 0, or seeded sampling)
  shardline push-shards URI publish data/shards at an fsspec URL (s3://...) for loader.shards_uri
  shardline mix-search      proxy runs over data mixes (DVC experiments), a fitted law, a recommended mix

Errors from the engine are printed as one clear message (no traceback) with exit code 2;
transient failures exit 75 (EX_TEMPFAIL) so wrappers can tell them apart. So is any OSError
(a path that cannot be written or read: the line names it and what to do, by errno:
shardline.core.errors.os_error_line).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from pathlib import Path

from shardline.cli import log
from shardline.cli.checkpoints import (CHECKPOINT_HELP, cmd_checkpoints, cmd_diff, cmd_eval, cmd_export, cmd_lineage,
                                       cmd_sample)
from shardline.cli.corpus import cmd_explain, cmd_push_shards
from shardline.cli.line import cmd_pipeline, cmd_pool, cmd_serve, cmd_stage
from shardline.cli import mixsearch
from shardline import registry
from shardline.core import fsio
from shardline import paramsfile
from shardline.core.errors import ShardlineError, is_transient, os_error_line
from shardline.core.layout import Layout


def cmd_params(args: argparse.Namespace) -> int:
    params = paramsfile.load(Path(args.root, args.params))
    print(json.dumps(params.model_dump(mode="json"), indent=2))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shardline", description="Reproducible, crash-proof pretraining pipeline.")
    p.add_argument("--root", default=".", help="project root (holds params.yaml, dvc.yaml, data/)")
    p.add_argument("--params", default="params.yaml", help="params file, relative to --root")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stage", help="run one stage of the line (dvc.yaml calls this)")
    s.add_argument("name", metavar="NAME", help=f"{', '.join(registry.NAMES)}, or a plug-in's stage "
                   "(docs/extending.md)")
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
    s = sub.add_parser("explain", help="why the clean stage dropped a document, or where it kept it; or which "
                       "documents a training step saw (--step)")
    s.add_argument("doc_id", nargs="?", help="a document id, <file under data/raw/<source>/files>:<line or row> (as in "
                   "data/clean/<source>/dropped/*.jsonl)")
    s.add_argument("--step", type=int, metavar="N", help="instead: every row of training step N's global batch, its "
                   "source, block, and the documents (ids) and token ranges it holds")
    s.add_argument("--source", help="the source, when two have a file of that name")
    s.add_argument("--json", action="store_true", help="the verdict as JSON")
    s.set_defaults(fn=cmd_explain)
    s = sub.add_parser("diff", help="what changed between two runs: data (files, rules, the documents each rule "
                       "dropped), training settings, and held-out results with their noise",
                       description="A and B: a checkpoint (step-NNNNNNNNN, a path, or 'latest'), a git revision "
                       "(commit, branch, tag, HEAD~1) or a DVC experiment's name; a revision is read from DVC's cache "
                       "without a checkout. Results pair the same held-out documents; each change has its 95% "
                       "interval over documents and is marked 'within noise' when that covers 0.")
    s.add_argument("a", metavar="A")
    s.add_argument("b", metavar="B")
    s.add_argument("--json", action="store_true", help="every section as JSON")
    s.set_defaults(fn=cmd_diff)
    s = sub.add_parser("eval", help="loss and bits per byte of a checkpoint on the current held-out shards, or "
                       "its scores on downstream tasks (--tasks)")
    s.add_argument("checkpoint", help=CHECKPOINT_HELP)
    s.add_argument("--json", action="store_true", help="the full result as JSON")
    s.add_argument("--tasks", action="append", metavar="TASKS",
                   help="instead: run lm-evaluation-harness on the checkpoint's Hugging Face export, in this process: "
                   "lm-eval task names or task YAML paths, comma-separated (repeatable); the results go into "
                   "data/metrics/eval.json. Needs pip install 'shardline[tasks]'")
    s.add_argument("--limit", type=int, metavar="N", help="--tasks: at most N examples per task (the first ones)")
    s.add_argument("--batch-size", type=int, default=1, metavar="N", help="--tasks: lm-eval's batch size (default 1, "
                   "as lm-eval's own)")
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
    mixsearch.add_parser(sub)
    return p


def _os_line(e: OSError, layout: Layout) -> str:
    """os_error_line for an OSError no command explained; a file of data/ that is not there is
    one a stage writes and has not (yet): say so, rather than to check the path."""
    path = fsio.final_path(e.filename) if e.filename else None
    if e.errno == errno.ENOENT and path is not None and path.resolve().is_relative_to(layout.data.resolve()):
        return (f"{layout.rel(path)}: missing; run the stage that writes it first ('dvc repro', or "
                "'shardline stage NAME')")
    return os_error_line(e, layout.rel(path) if path is not None else None)  # a project's file as the user knows it


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except ShardlineError as e:
        log(f"error: {e}")
        if os.environ.get("TORCHELASTIC_ERROR_FILE"):  # a rank of torchrun's: its report quotes this line
            from shardline.training.launch import write_error

            write_error(str(e), is_transient(e))
        return 75 if is_transient(e) else 2
    except BrokenPipeError:  # `shardline lineage latest | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0
    except OSError as e:  # on a path no command wrapped in errors.on_path: the path the error names
        log(f"error: {_os_line(e, Layout.at(args.root))}")
        return 75 if is_transient(e) else 2
    except KeyboardInterrupt:
        log("interrupted; re-run the same command to resume (finished parts are kept)")
        return 130


if __name__ == "__main__":
    sys.exit(main())
