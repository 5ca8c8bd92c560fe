"""Noise: 95% intervals from a bootstrap over held-out documents, and what a difference is worth.

Contract:
- A source's held-out figures are ratios over its documents (`Docs`: per document, the summed
  next-token loss in nats, the targets scored and the UTF-8 bytes they spell): loss = sum nll /
  sum targets (per token), bits per byte = sum nll / ln 2 / sum bytes, and the per-document loss
  = the mean over documents of nll_d / targets_d (every document counts once, however long).
- `interval(docs)` resamples the documents with replacement RESAMPLES times and takes the 2.5th
  and 97.5th percentiles of each figure. The resamples come from a PCG64 generator seeded with
  SEED and drawn CHUNK rows at a time, so the same documents give the same interval on every
  run and machine. Why documents and not tokens: the tokens of one document are not independent
  draws (a codec table is thousands of easy tokens), and a new run meets new documents.
- `difference(a, b)` is paired: one resample of the documents for both runs (the same documents,
  in the same order), the interval of b - a; `within_noise` when it covers 0.
- A total under one fixed weighting (`total`: the sources weighted equally) takes its interval
  from the sources' resamples, drawn independently (a stream of the generator each), figure by figure.
- `needed(n, half, target)`: about how many documents a half-width of `target` needs: n (half /
  target)^2, since an interval narrows as 1/sqrt(n).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

SEED = 20261207
RESAMPLES = 1000
CHUNK = 50  # resamples drawn at a time: fixed, so the stream (and every interval) never depends on memory
FIGURES = ("loss", "bpb", "doc_loss")
MIN_DOCS = 10  # fewer documents than this: a bootstrap interval understates the noise; flagged as too few


@dataclass(frozen=True)
class Docs:
    """One source's held-out documents as scored: per document, nll (nats), targets, bytes, and
    which documents they are (`ids`: ordinals in the held-out stream, which pair two runs' documents)."""

    nll: np.ndarray
    targets: np.ndarray
    bytes: np.ndarray
    ids: np.ndarray | None = None

    @classmethod
    def of(cls, d: Mapping[str, Sequence[float]]) -> "Docs":
        """From the JSON form ({"doc": [...], "nll": [...], "targets": [...], "bytes": [...]}, as manifests keep it)."""
        return cls(np.asarray(d["nll"], dtype=np.float64), np.asarray(d["targets"], dtype=np.float64),
                   np.asarray(d["bytes"], dtype=np.float64),
                   np.asarray(d["doc"], dtype=np.int64) if "doc" in d else None)

    def to_json(self) -> dict:
        return {**({"doc": self.ids.tolist()} if self.ids is not None else {}), "nll": self.nll.tolist(),
                "targets": self.targets.astype(np.int64).tolist(), "bytes": self.bytes.astype(np.int64).tolist()}

    def __len__(self) -> int:
        return len(self.nll)

    def take(self, rows: np.ndarray) -> "Docs":
        return Docs(self.nll[rows], self.targets[rows], self.bytes[rows], None if self.ids is None else self.ids[rows])

    def figures(self, w: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Each figure under resample weights `w` [R, n] (counts of each document), or as scored."""
        w = np.ones((1, len(self)), dtype=np.float64) if w is None else w
        per_doc = self.nll / np.maximum(self.targets, 1)
        return {"loss": (w @ self.nll) / np.maximum(w @ self.targets, 1),
                "bpb": (w @ self.nll) / math.log(2) / np.maximum(w @ self.bytes, 1),
                "doc_loss": (w @ per_doc) / np.maximum(w.sum(axis=1), 1)}


def paired(a: Docs, b: Docs) -> tuple[Docs, Docs]:
    """The documents both scored (by `ids`; in order when neither has ids and both have as many)."""
    if a.ids is None or b.ids is None:
        if len(a) != len(b):
            raise ValueError(f"no document ids to pair {len(a)} with {len(b)} documents")
        return a, b
    both, ia, ib = np.intersect1d(a.ids, b.ids, return_indices=True)
    return a.take(ia), b.take(ib)


def _weights(n: int, stream: int = 0):
    """The RESAMPLES resamples of n documents, CHUNK at a time: counts [chunk, n] of each document.
    `stream`: independent draws for another source of a total (0: a source's own interval)."""
    rng = np.random.Generator(np.random.PCG64([SEED, stream]) if stream else np.random.PCG64(SEED))
    for start in range(0, RESAMPLES, CHUNK):
        idx = rng.integers(0, n, size=(min(CHUNK, RESAMPLES - start), n))
        yield np.stack([np.bincount(row, minlength=n) for row in idx]).astype(np.float64)


def resampled(docs: Docs, stream: int = 0) -> dict[str, np.ndarray]:
    """Each figure over the RESAMPLES resamples (float64 [RESAMPLES])."""
    if not len(docs):
        return {k: np.full(RESAMPLES, np.nan) for k in FIGURES}
    parts = [docs.figures(w) for w in _weights(len(docs), stream)]
    return {k: np.concatenate([p[k] for p in parts]) for k in FIGURES}


def _bounds(values: np.ndarray) -> list[float]:
    lo, hi = np.percentile(values, [2.5, 97.5])
    return [float(lo), float(hi)]


def interval(docs: Docs) -> dict[str, list[float]]:
    """figure -> [low, high], the 95% interval over documents."""
    return {k: _bounds(v) for k, v in resampled(docs).items()}


def total_interval(per_source: Sequence[Docs], weights: Sequence[float] | None = None) -> dict[str, list[float]]:
    """The 95% interval of a total over sources: the equal-weight one (the mean of the sources'
    figures), or one under `weights` (normalised)."""
    draws = [resampled(d, i) for i, d in enumerate(per_source)]  # each source drawn on its own
    w = np.full(len(draws), 1 / len(draws)) if weights is None else np.asarray(weights) / sum(weights)
    return {k: _bounds(np.tensordot(w, np.stack([d[k] for d in draws]), axes=1)) for k in FIGURES}


def difference(a: Docs, b: Docs, independent: bool = False) -> dict[str, dict]:
    """figure -> {a, b, change: b - a, interval of the change, within_noise, docs}. Paired over the
    documents both scored (one resample of them for both runs); `independent`: two held-out sets
    with no documents in common, each resampled on its own."""
    if not independent:
        a, b = paired(a, b)
    draws = change_draws(a, b, independent)
    fa, fb = a.figures(), b.figures()
    return {k: {"a": float(fa[k][0]), "b": float(fb[k][0]), "change": float(fb[k][0] - fa[k][0]),
                **judged(draws[k]), "docs": [len(a), len(b)] if independent else len(a)} for k in FIGURES}


def change_draws(a: Docs, b: Docs, independent: bool = False, stream: int = 0) -> dict[str, np.ndarray]:
    """Each figure's change b - a over the RESAMPLES resamples (a and b paired, unless `independent`);
    `stream`: this source's own draws, when a total adds several sources' changes."""
    if independent:
        ra, rb = resampled(a, 2 * stream), resampled(b, 2 * stream + 1)
        return {k: rb[k] - ra[k] for k in FIGURES}
    if not len(a):
        return {k: np.full(RESAMPLES, np.nan) for k in FIGURES}
    parts = [(a.figures(w), b.figures(w)) for w in _weights(len(a), stream)]
    return {k: np.concatenate([fb[k] - fa[k] for fa, fb in parts]) for k in FIGURES}


def judged(draws: np.ndarray) -> dict:
    """A change's 95% interval from its resampled values, and whether it covers 0."""
    if np.isnan(draws).all():
        return {"interval": [math.nan, math.nan], "within_noise": True}
    ci = _bounds(draws)
    return {"interval": ci, "within_noise": not (ci[0] > 0 or ci[1] < 0)}


def needed(n: int, half: float, target: float) -> int:
    """Documents for a half-width of `target`, from n documents that gave `half`."""
    if not n or not half or not math.isfinite(half):
        return MIN_DOCS
    return max(MIN_DOCS, math.ceil(n * (half / target) ** 2))


def half_width(ci: Sequence[float]) -> float:
    return (ci[1] - ci[0]) / 2


def thin(name: str, fig: Mapping, resolution: float) -> str | None:
    """One line when source `name`'s held-out figures (an eval's `sources[name]`) rest on fewer than
    MIN_DOCS documents or have a loss interval wider than +-`resolution`: how sure they are, and
    about how many documents would give +-`resolution`."""
    n, ci = fig.get("docs"), fig.get("loss_ci")
    if n is None or ci is None:
        return None
    half = half_width(ci)
    if n >= MIN_DOCS and half <= resolution:
        return None
    return (f"{name} is judged on {n} held-out document(s) ({fig.get('tokens', 0):,} tokens): its loss is known to "
            f"±{half:.3f} nats; ±{resolution:g} (eval.resolution) needs about {needed(n, half, resolution):,} documents "
            "(raise eval.fraction or eval.min_docs)")


RECENT_STEPS = 20  # the training losses a held-out loss is set beside: the steps up to its eval


def recent_train_loss(rows: Sequence[Mapping], step: int) -> tuple[float, float, int] | None:
    """(mean, 95% half-width, steps) of the training loss over the RECENT_STEPS steps up to `step`
    (train.jsonl's rows; a skipped step's loss is null)."""
    losses = np.array([r["loss"] for r in rows if step - RECENT_STEPS < r["step"] <= step and r.get("loss") is not None])
    if len(losses) < 2:
        return None
    return float(losses.mean()), float(1.96 * losses.std(ddof=1) / math.sqrt(len(losses))), len(losses)


def against_training(own_mix: Mapping, train: tuple[float, float, int] | None, repeats: str = "") -> str | None:
    """One line when the held-out loss, weighted by the run's own mix as its training batches are, is
    off the recent training loss by more than the noise of both. Below it: the held-out documents are
    easier than the training ones, and held-out figures flatter the model. Above it: the model does
    better on what it trains on than on unseen text, as when training repeats its data (`repeats`:
    which sources it went through more than once, where the caller knows)."""
    if train is None or own_mix.get("loss_ci") is None:
        return None
    mean, half, n = train
    noise = math.hypot(half_width(own_mix["loss_ci"]), half)
    gap = mean - own_mix["loss"]
    if abs(gap) <= noise:
        return None
    where = f"{abs(gap):.3f} nats {'below' if gap > 0 else 'above'} the training loss of the last {n} steps ({mean:.3f})"
    head = f"held-out loss {own_mix['loss']:.3f} (by this run's mix) is {where}, more than their noise (±{noise:.3f}): "
    if gap > 0:
        return head + ("the held-out documents are easier than the training ones, so held-out figures flatter the model; "
                       "see the per-source documents and eval.doc_bytes")
    return head + ("the model does better on text it trains on than on unseen text"
                   + (f" (training repeats {repeats})" if repeats else " (repeated training data, or an undertrained "
                      "model whose training loss still falls fast)"))
