"""GPU readiness: the code paths a CPU never runs, in one script of at most 8 minutes on one CUDA device.

    python -m bench.gpu [--minutes 8] [--out FILE] [--dry-run]

Builds real shards through the engine stages (the shipped sources: the Python standard library and
the pydoc topics; vocab 16384, seq_len 1024), then trains with the real trainer
(`shardline.training.train.run`), each run fresh, and checks:

  0. document attention on CUDA is exact: a llama (fp32, eval) scores three documents packed in
     one block as it scores each alone (FlexAttention's block mask, compiled), and as the CPU's
     SDPA mask scores the block; max abs logit differences <= 1e-4.
  1. throughput: a ~124M-parameter llama (12 layers, 12 heads, d_model 768, SwiGLU 3072, tied
     embeddings), bf16, torch.compile per block, global batch 32 x 1024 tokens, with document
     attention (FlexAttention, block mask) and with causal (SDPA): tokens/s and MFU (the trainer's
     own train.jsonl, median over the steps after compilation), peak memory
     (torch.cuda.max_memory_allocated) and data wait (the share of step time spent waiting for the
     loader), with train.deterministic off (the checks below keep it on). Fails below 40% MFU on
     an H100/H200-class device (dense bf16 peak 989 TFLOP/s).
  2. resume on the same GPU: 16 steps straight vs a run SIGKILLed after step 12 (a real kill, in a
     process of its own) and resumed from its newest checkpoint (bf16, document attention,
     train.deterministic): the losses must be bit-identical.
  3. fp16 with GradScaler and the guards: a planted inf gradient (SHARDLINE_FAULTS
     train.inf_grad@3) is GradScaler's overflow: the step is not recorded as a guard skip, no
     rollback happens, and the scaler's scale backs off.
  4. sharded checkpoints on CUDA: check 2 with train.checkpoint_format sharded: the manifest says
     sharded, and the resumed losses equal the straight run's.

Prints a table (and writes it as JSON with --out); exits 1 when a check fails. Without a CUDA device it
says so and exits 0 (nothing was measured). --dry-run runs the same
script on the CPU with a tiny model, the prose source alone and the resume checks at half their
steps (8 straight, killed after 6), fp16 and FlexAttention (CUDA's) skipped and said so, to test the
script itself where no GPU is. One GPU runs one process: NCCL and multi-GPU FSDP are not
exercised here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

from shardline import paramsfile
from shardline.core.layout import Layout
from shardline.training import checkpoint

REPO = Path(__file__).resolve().parents[1]
LLAMA_124M = {"arch": "llama", "n_layer": 12, "n_head": 12, "d_model": 768, "ffn_hidden": 3072, "dropout": 0.0,
              "rope_theta": 10000.0, "tie_embeddings": True}
TINY = {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 64, "ffn_hidden": 128, "dropout": 0.0}
MFU_GOAL = 0.40


class Bench:
    def __init__(self, args):
        self.args, self.t0, self.results = args, time.monotonic(), []
        self.cuda = torch.cuda.is_available() and not args.dry_run
        # the resume checks' steps straight, the step killed after, checkpoint_every: the dry run tests
        # the script, not a device, in half the steps (a bf16 step of its tiny model is ~0.15 s on a CPU)
        self.straight, self.kill_at, self.every = (8, 6, 4) if args.dry_run else (16, 12, 8)
        self.tmp = tempfile.TemporaryDirectory(prefix="bench-gpu-")
        self.layout = Layout.at(Path(self.tmp.name) / "project")

    def left_s(self) -> float:
        return self.args.minutes * 60 - (time.monotonic() - self.t0)

    def raw(self, steps: int, **train) -> dict:
        raw = yaml.safe_load((REPO / "params.yaml").read_text())
        dry = self.args.dry_run
        if dry:  # the shipped prose alone (~0.5 MB; the standard library's code is ~11 MB): shards in ~1 s
            raw["sources"] = [s for s in raw["sources"] if s["uri"] == "builtin://pydoc-topics"]
            raw["mix"] = {s["name"]: 1.0 for s in raw["sources"]}
        raw["tokenizer"] = {**raw["tokenizer"], "vocab_size": 2048 if dry else 16384}
        raw["shard"] = {"seq_len": 64 if dry else 1024, "target_mb": 4}
        raw["loader"] = {**raw["loader"], "global_batch": 8 if dry else 32}
        raw["model"] = TINY if dry else LLAMA_124M
        raw["eval"] = {**raw["eval"], "every": 0}
        raw["train"] = {**raw["train"], "steps": steps, "checkpoint_every": self.every, "keep_last": 4,
                        "warmup_steps": 4, "device": "cpu" if dry else "cuda", "precision": "bf16",
                        "attention": "document", "compile": False, "nproc_per_node": 1, **train}
        return raw

    def data(self) -> None:
        from shardline.data import download, shard, tokenize
        from shardline.data.clean.stage import run as clean

        params = paramsfile.parse(self.raw(1))
        t = time.monotonic()
        for stage in (download, clean, tokenize, shard):
            stage.run(params, self.layout, log=lambda _: None)
        print(f"shards built in {time.monotonic() - t:.0f}s at {self.layout.shards}", flush=True)

    def train(self, steps: int, fresh: bool = True, faults: str | None = None, **train) -> list[dict]:
        from shardline.context import RunContext
        from shardline.training import train as T

        if fresh:
            for d in (self.layout.checkpoints, self.layout.metrics):
                shutil.rmtree(d, ignore_errors=True)
        (self.layout.root / "params.yaml").write_text(yaml.safe_dump(self.raw(steps, **train)))
        params = paramsfile.load(self.layout.root / "params.yaml")
        if faults:
            os.environ["SHARDLINE_FAULTS"] = faults
        try:
            T.run(params, self.layout, RunContext(log=lambda m: print(f"    {m}", flush=True) if "error" in m else None))
        finally:
            os.environ.pop("SHARDLINE_FAULTS", None)
        return [json.loads(ln) for ln in self.layout.train_log.read_text().splitlines() if ln]

    def check(self, name: str, needs_s: float, fn) -> None:
        if self.left_s() < needs_s:
            self.results.append({"check": name, "ok": None, "detail": f"skipped: {self.left_s():.0f}s left of "
                                 f"--minutes {self.args.minutes}, it needs ~{needs_s:.0f}s"})
        else:
            t = time.monotonic()
            try:
                ok, detail = fn()
            except Exception as e:  # a check that cannot run is a failed check, said in one line
                ok, detail = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            self.results.append({"check": name, "ok": ok, "detail": detail, "seconds": round(time.monotonic() - t)})
        r = self.results[-1]
        print(f"{name:34} {'PASS' if r['ok'] else 'SKIP' if r['ok'] is None else 'FAIL'}  {r['detail']}", flush=True)

    # ---- the checks

    def throughput(self, attention: str):
        steps = 8 if self.args.dry_run else 40
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        rows = self.train(steps, attention=attention, compile=self.cuda or self.args.compile, deterministic=False)
        steady = rows[len(rows) // 4:]  # after compilation and warm-up
        if not steady:
            return False, "no steps recorded"
        tps = statistics.median(r["tokens_per_s"] for r in steady)
        mfu = statistics.median(r["mfu"] for r in steady)
        wait = 100 * sum(r["data_wait_s"] for r in steady) / sum(r["step_s"] for r in steady)
        peak = torch.cuda.max_memory_allocated() / 2**30 if self.cuda else float("nan")
        ok = all(map(lambda r: r["loss"] == r["loss"], rows)) and (mfu >= MFU_GOAL or not self.cuda)
        return ok, (f"{tps:,.0f} tokens/s, MFU {100 * mfu:.1f}% (goal {100 * MFU_GOAL:.0f}%), peak memory "
                    f"{peak:.1f} GiB, data wait {wait:.2f}% of step time, {rows[-1]['step_s'] * 1e3:.0f} ms/step, "
                    f"{len(rows)} steps")

    def stage(self, chaos: str | None = None) -> subprocess.CompletedProcess:
        """`shardline stage train` in a process of its own (a kill takes only it)."""
        env = {**os.environ, **({"SHARDLINE_CHAOS": chaos} if chaos else {})}
        return subprocess.run([str(Path(sys.executable).with_name("shardline")), "--root", str(self.layout.root),
                               "stage", "train"], env=env, capture_output=True, text=True)

    def resume(self, **train):
        straight = [r["loss"] for r in self.train(self.straight, **train)]
        for d in (self.layout.checkpoints, self.layout.metrics):
            shutil.rmtree(d, ignore_errors=True)
        killed = self.stage(chaos=f"train.step@{self.kill_at}:rank0")
        if killed.returncode != -signal.SIGKILL:
            return False, (f"the run meant to be killed at step {self.kill_at} ended with {killed.returncode}: "
                           f"{killed.stderr[-300:]}")
        again = self.stage()
        if again.returncode:
            return False, f"the resume failed ({again.returncode}): {again.stderr.strip().splitlines()[-1]}"
        where = next((ln.split("resuming from ")[1].split(" ")[0] for ln in again.stderr.splitlines()
                      if "resuming from " in ln), None)
        resumed = [json.loads(ln)["loss"] for ln in self.layout.train_log.read_text().splitlines() if ln]
        same = straight == resumed and where is not None
        diff = max((abs(a - b) for a, b in zip(straight, resumed)), default=float("nan"))
        return same, (f"{self.straight} straight vs killed after step {self.kill_at}, resumed from "
                      f"{where or 'nothing (no checkpoint)'}: "
                      f"{'bit-identical' if straight == resumed else f'differ, max {diff:.3g}'}")

    def newest(self) -> Path:
        found = sorted(self.layout.checkpoints.glob("step-*"))
        if not found:
            raise RuntimeError(f"no checkpoint under {self.layout.checkpoints}")
        return found[-1]

    def sharded(self):
        ok, detail = self.resume(checkpoint_format="sharded")
        fmt = checkpoint.read_manifest(self.newest()).format
        return ok and fmt == "sharded", f"format {fmt}; {detail}"

    def exact(self):
        from shardline.model import ModelConfig, build

        dev = torch.device("cuda" if self.cuda else "cpu")
        torch.manual_seed(0)
        cfg = ModelConfig("llama", vocab_size=1000, seq_len=512, n_layer=2, n_head=4, n_kv_head=2, d_model=256,
                          ffn_hidden=512, attention="document", eos_id=0)
        cpu = build(cfg).eval()
        model = build(cfg).to(dev).eval()
        model.load_state_dict(cpu.state_dict())
        g = torch.Generator().manual_seed(1)
        docs = [torch.randint(1, 1000, (n,), generator=g) for n in (200, 150, 160)]
        block = torch.cat([docs[0], torch.tensor([0]), docs[1], torch.tensor([0]), docs[2]])[None]
        spans = [(0, 201), (201, 352), (352, 512)]
        with torch.no_grad():
            packed = model(block.to(dev))[0][0].float().cpu()
            alone = max((packed[a:b] - model(block[:, a:b].to(dev))[0][0].float().cpu()).abs().max().item()
                        for a, b in spans)
            vs_cpu = (packed - cpu(block)[0][0]).abs().max().item()
        kernel = "FlexAttention" if self.cuda else "SDPA mask"
        return alone <= 1e-4 and vs_cpu <= 1e-4, (f"{kernel}: packed vs alone max {alone:.2g}, vs the CPU's SDPA "
                                                   f"mask max {vs_cpu:.2g} (fp32; bound 1e-4)")

    def fp16(self):
        if not self.cuda:
            return None, "fp16 needs CUDA (train.precision fp16 is refused on CPU)"
        rows = self.train(6, precision="fp16", faults="train.inf_grad@3")
        scaler = torch.load(self.newest() / "scaler.pt", weights_only=True)
        flagged = [r["step"] for r in rows if r.get("guard")]
        ok = not flagged and scaler["scale"] < 65536.0 and all(r["loss"] == r["loss"] for r in rows)
        return ok, (f"planted inf gradient at step 3: guard flags {flagged or 'none'}, scaler scale "
                    f"{scaler['scale']:g} (from 65536), losses finite")

    def run(self) -> int:
        dev = torch.cuda.get_device_name() if self.cuda else "CPU (dry run)"
        print(f"bench.gpu on {dev}, torch {torch.__version__}, budget {self.args.minutes} min", flush=True)
        self.data()
        big = 0 if self.args.dry_run else 1
        self.check("0. document attention exact", 30 * big, self.exact)
        how = "compiled" if self.cuda or self.args.compile else "eager"
        self.check(f"1a. llama bf16 {how}, document", 150 * big, lambda: self.throughput("document"))
        self.check(f"1b. llama bf16 {how}, causal", 120 * big, lambda: self.throughput("causal"))
        self.check("2. resume bit-identical", 60 * big, lambda: self.resume())
        self.check("3. fp16 GradScaler + guards", 30 * big, self.fp16)
        self.check("4. sharded checkpoint on CUDA", 60 * big, self.sharded)
        failed = [r["check"] for r in self.results if r["ok"] is False]
        out = {"device": dev, "torch": torch.__version__, "results": self.results,
               "minutes": round((time.monotonic() - self.t0) / 60, 1)}
        if self.args.out:
            Path(self.args.out).write_text(json.dumps(out, indent=2))
        print(f"\nsummary: {len(self.results) - len(failed)} of {len(self.results)} checks passed or skipped in "
              f"{out['minutes']} min" + (f"; written to {self.args.out}" if self.args.out else "")
              + (f"; FAILED: {', '.join(failed)}" if failed else ""))
        self.tmp.cleanup()
        return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=8.0, help="time budget; checks that no longer fit are skipped")
    ap.add_argument("--out", help="also write the results as JSON to this file")
    ap.add_argument("--dry-run", action="store_true", help="the same script on the CPU, tiny model (tests the script)")
    ap.add_argument("--compile", action="store_true", help="--dry-run: compile on the CPU too (slow)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available() and not args.dry_run:
        # not a miss: nothing was measured (python -m bench runs it on every machine)
        print("summary: not run here: this machine has no CUDA device (torch.cuda.is_available() is False); "
              "--dry-run runs the script on the CPU")
        return 0
    return Bench(args).run()


if __name__ == "__main__":
    sys.exit(main())
