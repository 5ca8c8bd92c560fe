"""What other distributions add to Shardline, found through their Python entry points
(`importlib.metadata`), the plug-in convention of pytest, DVC and lm-eval.

Contract: a distribution lists its plug-ins under these groups of its entry points (pyproject.toml's
`[project.entry-points."shardline.rules"]`, which pip writes into its `.dist-info/entry_points.txt`);
each entry's name is the name params.yaml or dvc.yaml uses, its object what docs/extending.md says:
- "shardline.rules": a `RuleEntry` (shardline.data.clean.verdict) whose key is the name;
- "shardline.architectures": a callable `ModelConfig -> nn.Module` (a shardline.model.common.CausalLM);
- "shardline.trackers": a callable `(directory, run_name, log section) -> tracker`;
- "shardline.stages": `run(params, layout, ctx)`, ctx a shardline.context.RunContext.
`names(group)` lists a group's plug-ins without importing any of them (the installed metadata,
read once per process and only when asked: a name that is built in asks nothing). `load(group,
name)` imports one; one that fails to import, or whose object is of the wrong kind (a string, a
number or an `nn.Module` instance where a callable belongs), is a `PluginError` naming its
distribution, the object it found and what the group takes; a rule's entry is checked by the
rules' registry (it knows RuleEntry). `versions(group, used)` is the distribution and release of
each plug-in `used` names: what the lineage records. `used_by(params)` is, per stage, the plug-ins
it runs with their releases: what the `plugins` stage writes for DVC (data/plugins/<stage>.json,
deps of those stages; stages.json: the plug-in stages'), so that upgrading a plug-in re-runs the
stages it affects under `dvc repro`. `unknown(name, group, builtin)` is the one line for a name
nothing knows: a did-you-mean, and every name the setting may take, built-in and plug-in (`known`).
"""

from __future__ import annotations

import difflib
import functools
from typing import Any, Callable, Iterable

from shardline.core.errors import ConfigError

GROUPS = ("rules", "architectures", "trackers", "stages")


class PluginError(ConfigError):
    """A plug-in that cannot be used: one line naming it, its distribution and what to do."""


@functools.cache
def _found() -> dict[str, dict[str, Any]]:
    import importlib.metadata  # ~50 ms with its imports: paid only by a process that asks

    every = importlib.metadata.entry_points()  # one read of every distribution's entry_points.txt
    out: dict[str, dict[str, Any]] = {g: {} for g in GROUPS}
    for group in GROUPS:
        for ep in every.select(group=f"shardline.{group}"):
            out[group].setdefault(ep.name, ep)  # the first on sys.path wins, as an import does
    return out


def names(group: str) -> tuple[str, ...]:
    """The plug-ins of `group` ("rules", "architectures", "trackers", "stages"), sorted."""
    return tuple(sorted(_found()[group]))


def origin(group: str, name: str) -> str:
    """'<distribution> <version>' of a plug-in."""
    dist = getattr(_found()[group][name], "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "an unnamed distribution"


# what each group's entry point must name, as the one line says it (docs/extending.md)
TAKES = {"architectures": "a callable ModelConfig -> CausalLM (a CausalLM subclass, or a function making one)",
         "trackers": "a callable (directory, run_name, log) -> tracker (a class, or a function making one)",
         "stages": "a function run(params, layout, ctx)"}


def where(group: str, name: str) -> str:
    """'plug-in NAME (GROUP, module:attr, from DIST VERSION)': how every line names a plug-in."""
    return f"plug-in {name!r} ({group}, {_found()[group][name].value}, from {origin(group, name)})"


def load(group: str, name: str) -> Any:
    """The object plug-in `name` of `group` names (its module imported), checked to be of its kind."""
    try:
        ep = _found()[group][name]
    except KeyError:
        raise PluginError(f"no plug-in {name!r} among the {group} ({known(group, ())})") from None
    try:
        obj = ep.load()
    except Exception as e:  # its code, not ours: whatever it raises is its distribution's to fix
        raise PluginError(f"{where(group, name)} cannot be loaded: {type(e).__name__}: {e}") from None
    if group in TAKES and (not callable(obj) or _is_module_instance(obj)):
        raise PluginError(f"{where(group, name)} names {kind_of(obj)}; its entry point must name {TAKES[group]}")
    return obj


def _is_module_instance(obj: Any) -> bool:
    # an nn.Module instance is callable (its forward), but a model built once cannot be built per run
    return any(c.__module__ == "torch.nn.modules.module" and c.__name__ == "Module" for c in type(obj).__mro__)


def kind_of(obj: Any) -> str:
    """What an object is, as the one line about a plug-in of the wrong kind says it."""
    return f"a {type(obj).__name__} instance" if _is_module_instance(obj) else f"a {type(obj).__name__} ({obj!r:.40})"


def versions(group: str, used: Iterable[str]) -> dict[str, str]:
    """{name: '<distribution> <version>'} for each name in `used` that is a plug-in of `group` (no
    metadata is read for none)."""
    used = set(used)
    return {} if not used else {n: origin(group, n) for n in sorted(used) if n in _found()[group]}


def known(group: str, builtin: Iterable[str]) -> str:
    """'known <group>: a, b (built in); c (plug-in of dist 1.0)': every name a setting may take."""
    plug = [f"{n} (plug-in of {origin(group, n)})" for n in names(group)]
    return f"known {group}: " + "; ".join(filter(None, (", ".join(builtin) + " (built in)" if builtin else "",
                                                        ", ".join(plug))))


def unknown(name: str, group: str, builtin: Iterable[str]) -> str:
    """The line for a name no built-in and no plug-in of `group` has: a did-you-mean, then `known`."""
    builtin = tuple(builtin)
    close = difflib.get_close_matches(name, [*builtin, *names(group)], n=1)
    return (f"{name!r} is no {group.removesuffix('s')}" + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; {known(group, builtin)}")


def used_by(arch: str | None) -> dict[str, dict[str, str]]:
    """{stage: {plug-in: '<distribution> <version>'}} for the stages whose outputs a plug-in decides:
    clean, every installed rule (one may be on by default, and a part's key holds only the rules
    it ran, so a release of one it did not run re-cleans nothing); train, the architecture `arch`
    when it is a plug-in's; and under "stages" every plug-in stage (each one's dvc.yaml entry
    takes data/plugins/stages.json as a dep)."""
    return {"clean": versions("rules", names("rules")),
            "train": versions("architectures", {arch} & set(names("architectures"))),
            "stages": versions("stages", names("stages"))}


def record(layout: Any, arch: str | None, log: Callable[[str], None] = print) -> None:
    """data/plugins/<stage>.json (`used_by`), each written atomically: the same bytes while no
    release changed, so DVC re-runs only the stages whose plug-ins' releases did."""
    from shardline.core import fsio

    for stage, used in used_by(arch).items():
        fsio.write_json(layout.plugins_used(stage), used)
        log(f"plugins: {stage}: " + (", ".join(f"{n} ({v})" for n, v in used.items()) or "none"))


if __name__ == "__main__":  # dvc.yaml's plugins stage: runs on every repro, so it reads params.yaml's
    import sys              # model.arch without validating the file (~0.3 s, not the CLI's ~1.5 s)
    from pathlib import Path

    from shardline.core import yamlfile
    from shardline.core.filenames import PARAMS
    from shardline.core.layout import Layout

    root = Path.cwd()
    raw = yamlfile.load((root / PARAMS).read_text()) if (root / PARAMS).exists() else {}
    model = raw.get("model") if isinstance(raw, dict) else None
    record(Layout.at(root), model.get("arch") if isinstance(model, dict) else None, lambda line: print(line,
                                                                                                       file=sys.stderr))
