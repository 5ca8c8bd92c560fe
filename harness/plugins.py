"""Plug-ins installed as pip installs them, without pip or an index: a folder holding the
plug-in's modules and a `<name>-<version>.dist-info/` with METADATA and entry_points.txt. Put the
folder on sys.path (PYTHONPATH, for a `shardline` command run as a subprocess) and
importlib.metadata finds its entry points, as it finds an installed distribution's.

`guide()` reads the examples of docs/extending.md, so that the tests install exactly what the
guide shows: a block after `<!-- plugin NAME file PATH -->` is a file of example NAME's
distribution, one after `<!-- plugin NAME pyproject -->` its pyproject.toml, whose
`[project.entry-points."shardline.<group>"]` tables become its entry_points.txt.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "extending.md"
_BLOCK = re.compile(r"<!-- plugin (\S+) (file (\S+)|pyproject) -->\n```\w*\n(.*?)^```", re.M | re.S)


@dataclass
class Example:
    """One example distribution of the guide."""

    name: str
    version: str = "0.1.0"
    files: dict[str, str] = field(default_factory=dict)  # path in the distribution -> text
    entry_points: dict[str, dict[str, str]] = field(default_factory=dict)  # group -> name -> "module:attr"


def guide(path: Path = GUIDE) -> dict[str, Example]:
    """The guide's examples by name, in the order it shows them (none without the guide)."""
    out: dict[str, Example] = {}
    if not path.exists():
        return out
    for name, _, file, body in _BLOCK.findall(path.read_text()):
        ex = out.setdefault(name, Example(name))
        if file:
            ex.files[file] = body
        else:
            project = tomllib.loads(body)["project"]
            ex.entry_points.update(project.get("entry-points", {}))
            ex.name, ex.version = project.get("name", name), project.get("version", ex.version)
    return out


def write_dist(root: Path, name: str, files: dict[str, str], entry_points: dict[str, dict[str, str]],
               version: str = "0.1.0") -> Path:
    """`root` holding distribution `name` as pip would install it; returns `root` (for sys.path)."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    info = root / f"{re.sub(r'[-.]+', '_', name)}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in names.items()) + "\n"
        for group, names in entry_points.items()))
    return root


def install(root: Path, example: Example) -> Path:
    """The guide's `example` written under `root` (several may share one folder, as in site-packages)."""
    return write_dist(root, example.name, example.files, example.entry_points, example.version)
