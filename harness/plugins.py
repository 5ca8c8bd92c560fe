"""Plug-ins installed as a user installs them. `build_install` writes the guide's package (its
pyproject.toml and modules) to a folder and runs pip on it, as docs/extending.md says to: pip
builds it with the setuptools its `[build-system]` names (the one installed: no index is asked,
so no network) into a target folder. `write_dist` is the fast stand-in the unit tests use: a
folder holding the modules and a `<name>-<version>.dist-info/` with METADATA and
entry_points.txt, what pip would have written. Either folder on sys.path (PYTHONPATH, for a
`shardline` command run as a subprocess) and importlib.metadata finds its entry points, as it
finds an installed distribution's.

`guide()` reads the examples of docs/extending.md, so that the tests install exactly what the
guide shows: a block after `<!-- plugin NAME file PATH -->` is a file of example NAME's
package, one after `<!-- plugin NAME pyproject -->` its pyproject.toml.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

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
    pyproject: str = ""  # as the guide shows it


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
            ex.pyproject = body
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


def build_install(site: Path, example: Example, version: str | None = None,
                  edit: Callable[[str], str] = lambda text: text) -> Path:
    """The guide's `example` built and installed into `site` by pip, as a user's `pip install
    ./package` does (`version`: another release of it; `edit`: applied to each module, for a
    changed release). Returns `site`."""
    src = Path(tempfile.mkdtemp(prefix=f"{example.name}-", dir=site.parent))
    pyproject = example.pyproject
    if version is not None:
        pyproject = re.sub(r'^version = ".*"$', f'version = "{version}"', pyproject, flags=re.M)
    (src / "pyproject.toml").write_text(pyproject)
    for rel, text in example.files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(edit(text))
    for old in site.glob(f"{re.sub(r'[-.]+', '_', example.name)}-*.dist-info"):  # pip in a venv uninstalls the
        shutil.rmtree(old)                                                      # old release; --target does not
    # --no-build-isolation --no-index: the setuptools beside us builds it, and nothing is downloaded;
    # --no-deps: its `shardline` dependency is this checkout; --upgrade: a new release replaces the old
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-index", "--no-deps",
                    "--upgrade", "--target", str(site), str(src)], check=True, capture_output=True, text=True)
    shutil.rmtree(src)
    return site
