"""Downstream tasks: lm-evaluation-harness on a model's Hugging Face export, in this process.

Contract:
- `Tasks.open(specs, root, field)`: a spec is an lm-eval task name (or group, or tag) or the path
  of a task YAML (ending .yaml or .yml; relative to `root`). Each is checked, and its data loaded
  once, before anything is scored: a name lm-eval does not know (with the nearest it does), a
  YAML that is not there or not a task, or data lm-eval cannot load, is a BadInput of one line
  naming the spec and `field` (formatted with its index i: "eval.tasks[{i}]"). Without lm-eval,
  transformers or accelerate it is one line naming the extra to install (the `tasks` extra). A
  YAML is read from its own path (an `include:` in it is found beside it), never by scanning its
  folder; lm-eval's index of its own tasks (~10 s to build) is built only when a name is given.
- `Tasks.score(model_dir, device, limit, batch_size)` runs `lm_eval.simple_evaluate` on an HFLM
  around `AutoModelForCausalLM.from_pretrained(model_dir)` (dtype as its config.json says; the
  tokenizer from the same directory), lm-eval's defaults otherwise (seeds, no few-shot unless
  the task sets it), and returns task_results.numbers. On the same directory these are the
  numbers of lm-eval's own command (tests/integration/test_tasks.py). No data is fetched unless
  a task's own loading does so (HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1 forbid it). lm-eval
  seeds python's, numpy's and torch's generators: every one is put back as it was
  (shardline.training.rng), and torch's deterministic-algorithms setting too, so scoring moves
  nothing a training run draws from.
- In training, `Downstream.for_training(params, layout, session)` opens eval.tasks before the
  first step (rank 0). `at(step, target, ev)`, called with the held-out eval of a step, adds
  "tasks" (their numbers) and "tasks_s" (what they cost) to it at the checkpoints eval.tasks_every
  names and at the last step: the model as it is now goes through shardline.model.hf_dir into a
  temporary directory under .shardline/tmp/ (every rank joins the gather of a sharded model;
  rank 0 writes and scores, on the training device). Without a held-out eval at that step (eval.every 0, no held-out
  block) nothing runs: task results travel with it, into the step's record, eval.json and the
  checkpoint's manifest.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import tempfile
import time
from pathlib import Path
from typing import Sequence

import torch

from shardline.core import extras
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.filenames import TASK_YAML
from shardline.model import build, hf_dir
from shardline.training import rng, task_results
from shardline.training.state import ModelState


def _need_lm_eval(field: str) -> None:
    """lm_eval and what its HFLM imports are installed, or one line naming the extra."""
    for module in (*extras.TASKS, "lm_eval.models.huggingface"):
        extras.need(module, field)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


class Tasks:
    """Checked task specs and lm-eval's task manager for them (see the contract)."""

    def __init__(self, specs: list[str], manager, names: list[str]):
        self.specs, self.manager, self.names = specs, manager, names

    @classmethod
    def open(cls, specs: Sequence[str], root: Path, field: str) -> "Tasks":
        paths = [Path(root) / s if str(s).endswith(TASK_YAML) else None for s in specs]  # an absolute one stays
        for i, (spec, path) in enumerate(zip(specs, paths)):  # before lm-eval's seconds of imports
            if path is not None and not path.is_file():
                raise BadInput(f"{field.format(i=i)}: {spec}: no such task YAML ({path}); give the path of an lm-eval "
                               "task file, relative to the project root, or an lm-eval task name")
        _need_lm_eval(field.split("[")[0])
        from lm_eval.tasks import TaskManager

        manager = TaskManager(include_defaults=None in paths)
        resolved, names = [], []
        for i, (spec, path) in enumerate(zip(specs, paths)):
            where = field.format(i=i)
            if path is not None:
                spec = str(path)
            elif spec not in manager.all_tasks:
                near = difflib.get_close_matches(spec, manager.all_tasks, n=3)
                raise BadInput(f"{where}: {spec!r} is not an lm-eval task" + (f" (did you mean {', '.join(near)}?)"
                               if near else "") + "; 'lm_eval ls tasks' lists them, or give a task YAML path")
            try:  # builds the task, which loads its data: a task that cannot run is refused now, not mid-run
                with _untouched():
                    loaded = manager.load([spec])
            except Exception as e:  # lm-eval's and datasets' own errors, of many kinds: one line naming the spec
                raise BadInput(f"{where}: {spec}: lm-eval cannot load this task ({_first_line(e)}); check the task "
                               "and that its data is here (offline: in the Hugging Face cache)") from e
            resolved.append(spec)
            names += [n for n in loaded["tasks"] if n not in names]
        return cls(resolved, manager, names)

    def score(self, model_dir: Path, device: torch.device | str, limit: int | None = None,
              batch_size: int = 1) -> dict[str, dict[str, float]]:
        import transformers
        from lm_eval import simple_evaluate
        from lm_eval.models.huggingface import HFLM

        with _untouched():
            model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto").to(device)
            lm = HFLM(pretrained=model, tokenizer=str(model_dir), batch_size=batch_size)
            results = simple_evaluate(model=lm, tasks=list(self.specs), task_manager=self.manager, limit=limit,
                                      log_samples=False)
        return task_results.numbers(results)


@contextlib.contextmanager
def _untouched():
    """lm-eval at work with every random generator of the process put back as it was afterwards
    (it seeds them, and loading a task's data may draw), torch's deterministic mode warning
    instead of failing on an op without a deterministic kernel, and its INFO and WARNING lines
    (seeds, an already built model, `limit` is for testing) off: the caller says what ran."""
    state = rng.capture()
    deterministic = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    logger = logging.getLogger("lm_eval")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        if deterministic[0]:
            torch.use_deterministic_algorithms(True, warn_only=True)
        yield
    finally:
        logger.setLevel(level)
        torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
        rng.restore(state)


def describe(results: dict[str, dict[str, float]]) -> str:
    """One line per task: its metrics (stderrs and counts aside)."""
    def shown(metric: str) -> bool:
        return metric not in ("samples", "step") and "_stderr" not in metric

    return "\n".join(f"{task}: " + ", ".join(f"{m} {v:.4f}" for m, v in metrics.items() if shown(m))
                     + (f" ({metrics['samples']} examples)" if "samples" in metrics else "")
                     for task, metrics in results.items())


class Downstream:
    """eval.tasks in a training run (see the contract); `at` changes nothing when there are none."""

    def __init__(self, params, layout: Layout, session, tasks: Tasks | None):
        self.params, self.layout, self.session, self.tasks = params, layout, session, tasks
        self.on = tasks is not None or (session is not None and session.dist.rank != 0)

    @classmethod
    def for_training(cls, params, layout: Layout, session) -> "Downstream":
        ev, log = params.eval, session.ctx.log
        if not ev.tasks or session.state.step >= session.target:  # none, or no step to judge
            return cls(params, layout, None, None)
        if session.held is None:
            log("train: eval.tasks not run in this run: their results join the held-out eval, which is off")
            return cls(params, layout, None, None)
        if session.dist.rank != 0:
            return cls(params, layout, session, None)
        tasks = Tasks.open(ev.tasks, layout.root, "eval.tasks[{i}]")
        nth = "every checkpoint" if ev.tasks_every == 1 else f"one checkpoint in {ev.tasks_every}"
        log(f"train: downstream tasks {', '.join(tasks.names)} at {nth} and the last step"
            + (f", {ev.tasks_limit} examples each" if ev.tasks_limit else ""))
        return cls(params, layout, session, tasks)

    def due(self, step: int, target: int) -> bool:
        every, ck = self.params.eval.tasks_every, self.params.train.checkpoint_every
        return step == target or (step % ck == 0 and (step // ck) % every == 0)

    def at(self, step: int, target: int, ev: dict | None) -> dict | None:
        if not self.on or ev is None or not self.due(step, target):
            return ev
        t0, s = time.perf_counter(), self.session
        weights = ModelState(s.model, s.dist).full_state_dict()  # under fsdp a gather every rank joins
        if s.dist.rank != 0:
            return ev
        tok = self.params.tokenizer
        self.layout.scratch.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="tasks-", dir=self.layout.scratch) as tmp:
            with torch.random.fork_rng(devices=[]):  # building draws an init that the weights replace
                model = build(s.model.cfg)
            model.load_state_dict(weights)
            hf_dir.write(Path(tmp), model, self.layout.tokenizer_json, tok.eos_token, tok.bos_token,
                         {"step": str(step)})
            del model, weights
            results = self.tasks.score(Path(tmp), s.device, self.params.eval.tasks_limit,
                                       self.params.eval.tasks_batch_size)
        spent = time.perf_counter() - t0
        s.ctx.log(f"step {step}: tasks ({spent:.1f}s): " + describe(results).replace("\n", "; "))
        return {**ev, "tasks": results, "tasks_s": spent}
