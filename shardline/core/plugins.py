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
name)` imports one; one that fails to import, or is not what its group takes, is a `PluginError`
naming its distribution. `unknown(name, group, builtin)` is the one line for a name nothing knows:
a did-you-mean, and every name the setting may take, built-in and plug-in (`known`).
"""

from __future__ import annotations

import difflib
import functools
from typing import Any, Iterable

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


def load(group: str, name: str) -> Any:
    """The object plug-in `name` of `group` names (its module imported)."""
    try:
        ep = _found()[group][name]
    except KeyError:
        raise PluginError(f"no plug-in {name!r} among the {group} ({known(group, ())})") from None
    try:
        return ep.load()
    except Exception as e:  # its code, not ours: whatever it raises is its distribution's to fix
        raise PluginError(f"plug-in {name!r} ({group}, {ep.value}, from {origin(group, name)}) cannot be loaded: "
                          f"{type(e).__name__}: {e}") from None


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
