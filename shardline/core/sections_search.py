"""params.yaml's `mix_search` section: how `shardline mix-search` looks for a better data mix.

It drives no stage (no dvc.yaml stage names it): the search queues proxy runs, each an ordinary
experiment of the line with `mix`, `model` and `train` set from here, so changing this section
changes which proxies a search asks for (their names carry a digest of it), never what the line
itself trains. `problems(params)` holds the checks that need the rest of params.yaml (the
sources, the model and train sections the overrides apply to); `Params` calls it. The search
itself: shardline.results.mixsearch.
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from shardline.core.section_base import _Section
from shardline.core.sections_model import Model
from shardline.core.sections_run import Train

MIN_WEIGHT = 0.01  # a source's default lower bound: the line refuses a weight of 0 (mix.<source>: must be > 0)


class Bound(_Section):
    min: float = Field(MIN_WEIGHT, gt=0, le=1)
    """The least weight this source may get, in a proxy's mix and in the recommendation (after
    normalising: weights are shares of 1)."""
    max: float = Field(1.0, gt=0, le=1)
    """The most weight it may get."""

    @model_validator(mode="after")
    def _ordered(self) -> "Bound":
        if self.min > self.max:
            raise ValueError(f"min {self.min} > max {self.max}; make min <= max")
        return self


class MixSearch(_Section):
    runs: int = Field(8, ge=2, le=1000)
    """How many proxy runs (DVC experiments) each round draws. The laws fitted have a few
    coefficients per source (not a learned regressor): tens of runs pin them down."""
    rounds: int = Field(1, ge=1, le=100)
    """Rounds of proxies: the first draws `runs` mixes around the line's `mix:`; each later one
    draws `runs` more around the law's best mix so far. Every fit uses the runs of every round
    so far: more rounds, more evidence near the best region."""
    narrow: float = Field(2.0, ge=1)
    """Each round's Dirichlet is this much more concentrated than the last's (round r:
    concentration x narrow^r), so later rounds look closer to the best region."""
    widen: float = Field(0.0, ge=0)
    """Where the optimiser may look: 0, only the convex hull of the proxies' mixes (where the fit
    has evidence); w > 0, that hull scaled by 1 + w about the proxies' mean mix (within the
    bounds), a trust region the report names as such."""
    seed: int = 0
    """Seeds the draw of the proxies' mixes and the optimiser's candidates: the same seed and
    settings give the same mixes, the same experiment names and the same recommendation."""
    concentration: float = Field(8.0, gt=0)
    """The Dirichlet the mixes are drawn from is centred on the line's `mix:` with
    alpha = concentration x mix: higher stays closer to it (a weight w varies by about
    sqrt(w(1-w)/(concentration+1)))."""
    bounds: dict[str, Bound] = {}
    """Per source, {min, max} weight for the proxies and the recommendation; an unlisted source
    gets {min: 0.01, max: 1}. The minimums must sum to <= 1 and the maximums to >= 1."""
    target: Literal["loss", "sources", "bpb"] = "loss"
    """What the recommended mix minimises: `loss`, the held-out loss per source weighted by the
    line's current `mix:` (a fixed weighting, so a proxy cannot win by its own weights);
    `sources`, the (weighted) mean held-out loss of `target_sources` only; `bpb`, as `loss` in bits per byte."""
    target_sources: dict[str, float] = {}
    """With target: sources, the sources whose held-out loss counts: a list (equal weights, e.g.
    the ones you care about, not a noisy one you keep for coverage) or {source: weight} (e.g.
    {code: 0.7, prose: 0.3} for a target set drawn 70/30 from them; weights are normalised)."""
    model: dict[str, Any] = {"n_layer": 1}
    """Keys of the `model:` section set for every proxy (a small model); the rest is the line's."""
    train: dict[str, Any] = {"steps": 40, "warmup_steps": 4, "checkpoint_every": 40}
    """Keys of the `train:` section set for every proxy (few steps); the rest is the line's.
    Every proxy trains from scratch (each is a new experiment)."""
    candidates: int = Field(20000, ge=100, le=10_000_000)
    """How many mixes the optimiser scores (a seeded sample of the proxies' region, see `widen`,
    plus the proxies' own mixes): the best predicted one is the law's best mix."""
    validate_best: bool = False
    """Also run the law's best mix as one more proxy and report its measured target beside its
    prediction and the best proxy's (`shardline mix-search --validate` does too)."""
    workers: int = Field(1, ge=1, le=64)
    """DVC queue workers running proxies at once (`dvc queue start -j`); each trains on
    `train.threads` threads."""

    @field_validator("target_sources", mode="before")
    @classmethod
    def _listed(cls, v):
        """A list of sources is equal weights."""
        return {n: 1.0 for n in v} if isinstance(v, (list, tuple)) else v


def bounds_of(section: MixSearch, names: list[str]) -> tuple[list[float], list[float]]:
    """(mins, maxs) in source order, defaults for the unlisted."""
    b = [section.bounds.get(n, Bound()) for n in names]
    return [x.min for x in b], [x.max for x in b]


def problems(params) -> list[str]:
    """What is wrong with `params.mix_search` given the rest of params.yaml, one line each."""
    s, names = params.mix_search, [x.name for x in params.sources]
    out = [f"mix_search.bounds.{k}: unknown source{_near(k, names)}; bounds are per source of `sources`"
           for k in s.bounds if k not in names]
    out += [f"mix_search.target_sources: unknown source {k!r}{_near(k, names)}" for k in s.target_sources
            if k not in names]
    out += [f"mix_search.target_sources.{k}: weight {w:g} must be > 0; leave the source out instead"
            for k, w in s.target_sources.items() if not w > 0]
    if s.target == "sources" and not s.target_sources:
        out.append("mix_search.target_sources: required with target: sources; list the sources whose loss counts")
    if not out:
        lo, hi = bounds_of(s, names)
        if sum(lo) > 1 + 1e-9:
            out.append(f"mix_search.bounds: the minimums sum to {sum(lo):g} > 1, so no mix satisfies them; lower them")
        elif sum(hi) < 1 - 1e-9:
            out.append(f"mix_search.bounds: the maximums sum to {sum(hi):g} < 1, so no mix satisfies them; raise them")
        elif len(names) > 1 and sum(a < b - 1e-12 for a, b in zip(lo, hi)) < 2:
            out.append("mix_search.bounds: they fix every weight but at most one (min = max), so every proxy would "
                       "train the same mix; free at least two sources' weights")
    for key, cls in (("model", Model), ("train", Train)):
        try:
            cls.model_validate({**getattr(params, key).model_dump(), **getattr(s, key)})
        except ValidationError as e:
            out += [f"mix_search.{key}.{'.'.join(map(str, err['loc']))}: "
                    + (f"unknown key{_near(str(err['loc'][-1]), cls.model_fields)}" if err["type"] == "extra_forbidden"
                       else err["msg"].lower()) for err in e.errors()]
    return out


def _near(key: str, options) -> str:
    """The did-you-mean of an unknown name, as config words it for every other section."""
    close = difflib.get_close_matches(key, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
