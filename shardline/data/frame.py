"""The frame every parted data stage runs in (docs/architecture.md, "The stage frame").

A stage plans its `Part`s (what each reads, its key, where its done-marker goes) and does one
part's work (`do(part) -> (files written, tallies)`); the frame owns the rest, the same way for
every stage:
- skip-if-done: a part is done iff its marker, `<marker>.json`, holds the part's key and each
  file it lists is on disk at the recorded size. Checked in the driver, so workers only get
  work, and a stage with nothing to do starts no pool.
- promotion: `do` writes each file with `fsio.atomic_writer`; the marker is written after them
  (chaos point `<stage>.part` sits between), so a kill leaves a part done or not, never half.
- sweeping: `sweep` removes temps a killed writer left and every file under a stage's folder
  that the current plan does not produce.
- stats: a part's tallies live in its marker, so a skipped part gives them back without being
  redone; `run` returns every part's marker, and the stage sums them into its stats file.
- progress: parts done of all, MB/s and ETA (`shardline.core.progress`).
- groups: parts that name the same `group` run in plan order as one task of the mapper (the
  spans of one compressed file: its stream is decoded once, front to back).
A marker is {key, files: {name: bytes}, stats}; names are relative to the marker's folder.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from shardline.core import chaos, fsio
from shardline.core.parallel import Mapper
from shardline.core.progress import Progress, Sink
from shardline.data import staging as st
from shardline.data.staging import Staging

Do = Callable[["Part"], "tuple[list[Path], dict]"]


@dataclass(frozen=True)
class Part:
    stage: str   # the stage's name: chaos points and units
    name: str    # e.g. code/part-00003: progress, task-run names, chaos units
    key: str     # hash of everything the part's files depend on
    marker: str  # its done-marker's path
    size: int    # input bytes, for progress
    work: Any    # what `do` needs; picklable (parts may run in other processes or on a cluster)
    group: str | None = None  # parts of one group run in order in one task


def finished(part: Part) -> dict | None:
    """The part's marker when the part is done with its current key, else None."""
    try:
        marker = fsio.read_json(part.marker)
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("key") != part.key:
        return None
    where = Path(part.marker).parent
    for name, size in marker.get("files", {}).items():
        f = where / name
        if not f.is_file() or f.stat().st_size != size:
            return None
    return marker


def _one(part: Part, do: Do) -> dict:
    files, stats = do(part)
    chaos.point(f"{part.stage}.part")  # its files are durable, its marker is not: the part is not done
    where = Path(part.marker).parent
    marker = {"key": part.key, "files": {str(Path(f).relative_to(where)): Path(f).stat().st_size for f in files},
              "stats": stats}
    fsio.write_json(part.marker, marker)
    chaos.done(part.stage, part.name)
    return marker


@dataclass(frozen=True)
class Task:
    """What one mapper call does: a part, or a group's parts in order. `name` and `size` are what
    mappers know items by (task-run names, whether a process pool pays)."""

    parts: tuple[Part, ...]

    @property
    def name(self) -> str:
        return self.parts[0].name + (f" (+{len(self.parts) - 1} of its group)" if len(self.parts) > 1 else "")

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)


def _many(task: Task, do: Do) -> list[dict]:
    return [_one(part, do) for part in task.parts]


@dataclass(frozen=True)
class Staged:
    """A task whose parts run on a worker that shares only the store: with what each part reads."""

    task: Task
    needs: tuple  # per part: [(path on the driver, byte span or None)]

    @property
    def name(self) -> str:
        return self.task.name

    @property
    def size(self) -> int:
        return self.task.size


def _many_staged(item: Staged, worker) -> list[dict]:
    return [worker(part, need) for part, need in zip(item.task.parts, item.needs)]


def run(stage: str, parts: Sequence[Part], do: Do, mapper: Mapper, log: Callable[[str], None],
        sink: Sink | None = None, staging: "Staging | None" = None,
        inputs: "Callable[[Part], list] | None" = None) -> tuple[list[dict], int]:
    """Every part's marker, in part order, and how many were already done. With `staging`, parts
    run on workers that share only its store (shardline.data.staging); `inputs(part)` says what
    each reads: [(path, byte span or None)]."""
    progress = Progress(stage, len(parts), sum(p.size for p in parts), log, sink=sink)
    markers: list[dict | None] = [None] * len(parts)
    tasks: list[list[int]] = []
    where: dict[str, list[int]] = {}
    record = staging and st.Record(staging)
    for i, part in enumerate(parts):
        markers[i] = finished(part)
        if markers[i] is None and staging is not None and (m := st.finished_in_store(staging, part)) is not None:
            markers[i] = st.take(staging, part, m, record)  # a worker finished it; the driver did not take it
        if markers[i] is not None:
            progress.advance(part.size, skipped=True)
        elif part.group is not None and part.group in where:
            where[part.group].append(i)
        else:
            tasks.append([i])
            if part.group is not None:
                where[part.group] = tasks[-1]

    items = [Task(tuple(parts[i] for i in t)) for t in tasks]
    fn: Callable = functools.partial(_many, do=do)
    if staging is not None and tasks:
        needs = {i: inputs(parts[i]) for t in tasks for i in t}  # type: ignore[misc]
        st.put_inputs(staging, [f for need in needs.values() for f, _ in need], record)
        record.save()
        fn = functools.partial(_many_staged, worker=st.Worker(staging, do))
        items = [Staged(task, tuple(needs[i] for i in t)) for task, t in zip(items, tasks)]

    def on_done(j: int, got: list) -> None:  # progress, and the driver takes staged parts as they finish
        for i, marker in zip(tasks[j], got):
            if staging is not None:
                st.take(staging, parts[i], marker, record)
            progress.advance(parts[i].size)

    done = mapper(fn, items, on_done=on_done)
    if staging is not None:
        record.save()
    for task, got in zip(tasks, done):
        for i, marker in zip(task, got):
            markers[i] = marker
    return markers, len(parts) - sum(map(len, tasks))  # type: ignore[return-value]


def sweep(root: Path, keep: Iterable[Path]) -> None:
    """Remove what a stage's current plan does not produce under `root` (temps included)."""
    fsio.remove_temps(root)
    fsio.prune(root, set(keep))

