"""The loss at a large vocabulary: the chunked cross-entropy (shardline.model.loss) against the
loss the models computed before it, one training step's head + loss, forward and backward.

    python -m bench.loss [--vocab 131072] [--tokens 8192] [--d-model 128] [--bf16] [--repeats 3]

A 128k vocabulary at 8k tokens per micro-batch: hidden states [tokens, d_model] in fp32 (the
final norm's output), the head's weight, seeded targets; in fp32, as training runs on a CPU
(--bf16: under bf16 autocast, as on a GPU; a CPU without AMX or AVX-512 BF16 emulates those
matmuls, ~10x slower). "before": `F.cross_entropy(F.linear(h, w).float(), t)`, the loss the
models computed: the full logits (in bf16, plus their fp32 copy), log-softmax's output and their
gradient; "chunked": `chunked_cross_entropy` with the rows the budget gives. A small d_model
keeps the matmuls short, which leaves the softmax's share of the step at its largest: the side
the chunked loss changes. Each side runs in a fresh process per repeat (the order alternating):
its peak is the process's peak RSS during the step above what it held before it, its time the
faster of 2 steps after that one. The peak must be <= 0.5x the old one's and the speed >= 0.95x,
at the worst repeat; the chunked loss must equal the old one within 1e-3 relative.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.measure import status_kb
from bench.verdict import Targets, in_order

REPO = Path(__file__).resolve().parents[1]
SIDES = ("before", "chunked")


def probe(side: str, vocab: int, tokens: int, d_model: int, bf16: bool) -> dict:
    """One side in this process: added peak RSS of its first step, then the faster of 2 more."""
    import torch
    from torch.nn import functional as F

    from shardline.model.loss import chunk_rows, chunked_cross_entropy

    g = torch.Generator().manual_seed(0)
    h = torch.randn(tokens, d_model, generator=g).requires_grad_()
    w = (torch.randn(vocab, d_model, generator=g) * d_model ** -0.5).requires_grad_()
    t = torch.randint(0, vocab, (tokens,), generator=g)
    rows = chunk_rows(h, vocab)

    def step() -> float:
        h.grad = w.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if side == "before":
                loss = F.cross_entropy(F.linear(h, w).float(), t)
            else:
                loss = chunked_cross_entropy(h, w, t, rows)
        loss.backward()
        return loss.item()

    held = status_kb("VmHWM")
    value = step()
    peak_mb = (status_kb("VmHWM") - held) / 1024
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {"peak_mb": peak_mb, "s": min(times), "loss": value, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=131072)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--bf16", action="store_true", help="under bf16 autocast (slow without AMX/AVX-512 BF16)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--probe", choices=SIDES, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    shape = (args.vocab, args.tokens, args.d_model)
    if args.probe:
        print(json.dumps(probe(args.probe, *shape, args.bf16)))
        return 0
    print(f"head + loss, forward and backward, {'bf16 autocast' if args.bf16 else 'fp32'}: vocab {args.vocab:,}, "
          f"{args.tokens:,} tokens, d_model {args.d_model}; logits {args.vocab * args.tokens * (2 if args.bf16 else 4) / 2**30:.1f} "
          "GiB", flush=True)
    runs: dict[str, list[dict]] = {s: [] for s in SIDES}
    for r in range(args.repeats):
        for side in in_order(SIDES, r):
            out = subprocess.run([sys.executable, "-m", "bench.loss", "--probe", side, "--vocab", str(args.vocab),
                                  "--tokens", str(args.tokens), "--d-model", str(args.d_model),
                                  *(["--bf16"] if args.bf16 else [])],
                                 cwd=REPO, capture_output=True, text=True, check=True).stdout
            runs[side].append(json.loads(out.strip().splitlines()[-1]))
        b, c = runs["before"][-1], runs["chunked"][-1]
        print(f"repeat {r + 1}: before {b['peak_mb']:,.0f} MB peak, {b['s']:.3f} s; chunked ({c['rows']} rows a chunk) "
              f"{c['peak_mb']:,.0f} MB, {c['s']:.3f} s; loss {b['loss']:.6f} vs {c['loss']:.6f}", flush=True)
    peaks = [c["peak_mb"] / b["peak_mb"] for b, c in zip(runs["before"], runs["chunked"])]
    speeds = [b["s"] / c["s"] for b, c in zip(runs["before"], runs["chunked"])]
    diffs = [abs(c["loss"] - b["loss"]) / abs(b["loss"]) * 1e6 for b, c in zip(runs["before"], runs["chunked"])]
    targets = Targets()
    targets.check("peak memory chunked / before, highest", max(peaks), "<=", 0.5, "x", repeats=peaks)
    targets.check("speed chunked / before, lowest", min(speeds), ">=", 0.95, "x", repeats=speeds)
    targets.check("loss chunked vs before, relative difference in ppm, largest", max(diffs), "<=", 1000, repeats=diffs)
    targets.exit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
