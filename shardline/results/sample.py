"""Continue a prompt with a trained checkpoint: greedy or seeded sampling, never the global RNG.

Contract:
- `continue_ids(model, ids, settings, eos_id)` -> Continuation (the new ids, why it stopped,
  whether the context was cropped). Each step scores the whole context (no KV cache: this line's
  models are small) and picks the next id from the last position's fp32 logits.
  temperature 0: the argmax (the first of equal maxima, as transformers' greedy search takes).
  temperature > 0: logits / temperature; top_k (0: off) keeps the k largest (and any tied with
  the k-th, as transformers' TopKLogitsWarper); softmax; one draw from a torch.Generator seeded with
  `seed`. The same model, ids, settings and seed give the same ids (on the same hardware and
  torch); the global RNG is neither read nor advanced.
- It stops after `max_new_tokens` ids, or right after emitting `eos_id` (which it keeps), as
  transformers' `generate` does with the generation_config that `shardline export` writes, so
  greedy ids equal `generate(do_sample=False)` on the export while prompt + new ids fit in
  seq_len. Past seq_len the context is cropped to its last seq_len ids (positions restart at 0
  in the window, as in nanoGPT); transformers refuses to run past n_positions.
- `sample(path, layout, prompt, settings)` opens the checkpoint (`trained.load_model`; eval
  mode, torch.no_grad), encodes the prompt with the line's `Encoder` and the checkpoint's own
  tokenizer (refused when data/tokenizer/tokenizer.json is another one: `trained.tokenizer_file`),
  and decodes the new ids with special tokens skipped. The prompt starts a document as training
  documents start: after tokenizer.bos_token when the line sets one; an empty prompt without one
  starts from the EOS token, the boundary the model saw before every document but the first.
  The model runs with the attention it trained with (train.attention).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from shardline.data import tokenizer as toks
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.results.trained import bos_token, eos_token, load_model, tokenizer_file


@dataclass(frozen=True)
class Settings:
    max_new_tokens: int = 64
    temperature: float = 0.8  # nanoGPT's sample.py defaults
    top_k: int = 200       # 0: every token
    seed: int = 0

    def __post_init__(self):
        if self.max_new_tokens < 0:
            raise BadInput(f"--max-new-tokens: {self.max_new_tokens} must be >= 0")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise BadInput(f"--temperature: {self.temperature} must be a finite number >= 0 (0: greedy)")
        if self.top_k < 0:
            raise BadInput(f"--top-k: {self.top_k} must be >= 0 (0: sample from every token)")
        if not 0 <= self.seed < 2**63:
            raise BadInput(f"--seed: {self.seed} must be in [0, 2**63)")


@dataclass(frozen=True)
class Continuation:
    ids: list[int]
    stopped: str   # "eos" or "max_new_tokens"
    cropped: bool  # the context outgrew seq_len at some step and was cropped to its tail


def _pick(logits: torch.Tensor, s: Settings, gen: torch.Generator | None) -> int:
    if s.temperature == 0:
        return int(torch.argmax(logits))
    logits = logits / s.temperature
    if 0 < s.top_k < logits.numel():
        kth = torch.topk(logits, s.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return int(torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=gen))


@torch.no_grad()
def continue_ids(model: torch.nn.Module, ids: list[int], s: Settings, eos_id: int | None) -> Continuation:
    if not ids:
        raise BadInput("an empty context has nothing to continue; give at least one id")
    was = model.training
    model.eval()
    gen = None if s.temperature == 0 else torch.Generator(device="cpu").manual_seed(s.seed)
    ctx, new, cropped, n = list(ids), [], False, model.cfg.seq_len
    device = next(model.parameters()).device
    try:
        while len(new) < s.max_new_tokens:
            window = ctx[-n:]
            cropped |= len(ctx) > n
            logits, _ = model(torch.tensor([window], dtype=torch.long, device=device))
            nxt = _pick(logits[0, -1].float().cpu(), s, gen)
            ctx.append(nxt)
            new.append(nxt)
            if nxt == eos_id:
                return Continuation(new, "eos", cropped)
    finally:
        model.train(was)
    return Continuation(new, "max_new_tokens", cropped)


def sample(path: Path, layout: Layout, prompt: str, s: Settings) -> dict:
    model, _, manifest = load_model(path)
    tok_path = tokenizer_file(manifest, layout, "sample")
    tok = toks.load(tok_path)
    eos = toks.token_id(tok, eos_token(manifest))
    bos = toks.token_id(tok, bos_token(manifest)) if bos_token(manifest) else None
    # a document starts as in training: with BOS when the line puts one, else after an EOS
    ids = ([bos] if bos is not None else []) + toks.Encoder.build(tok).encode_batch([prompt])[0] or [eos]
    out = continue_ids(model, ids, s, eos)
    return {"checkpoint": Path(path).name, "step": manifest.step, "prompt": prompt, "prompt_ids": ids,
            "ids": out.ids, "text": tok.decode(out.ids, skip_special_tokens=True), "stopped": out.stopped,
            "cropped": out.cropped, "seq_len": model.cfg.seq_len, "eos_id": eos, **asdict(s)}
