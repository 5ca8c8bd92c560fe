"""Only `Layout` (shardline/core/layout.py: where files live) and shardline/core/filenames.py (their
names) spell a path: no other engine module holds a file name or a folder name of its own. A path literal is a string constant that names a file (ends in a
file extension, a glob included) or one joined onto a path with `/`; messages and docstrings,
which hold spaces, are not paths."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "shardline"
LAYOUT = ENGINE / "core" / "layout.py"
NAMES = ENGINE / "core" / "filenames.py"
# the orchestrators beside the engine in the package name DVC's and Prefect's own files (dvc.lock,
# prefect.yaml, the queue's worker logs) and the command's defaults: not the engine's layout
ADAPTERS = tuple(ENGINE / d for d in ("cli", "orchestration", "dvcrepo"))
FILE = re.compile(r"^[\w.*{}\[\]<>-]*\.(json|jsonl|parquet|csv|png|md|pt|bin|npy|txt|yaml|lock|part|distcp|"
                  r"safetensors|model|tmp)$")
GLOB = re.compile(r"^[\w.{}<>/*-]*\w-?\*[\w.*{}<>/-]*$")  # a name's glob: "step-*", "*/step-*"


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            ids.add(id(body[0].value))
    return ids


def _kill_points(tree: ast.AST) -> set[int]:
    """The names given to `chaos.point` (e.g. f"{stage}.part"): kill points, not paths."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "point" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "chaos":
            ids |= {id(c) for a in node.args for c in ast.walk(a) if isinstance(c, ast.Constant)}
    return ids


def path_literals(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    skip, found = _docstrings(tree) | _kill_points(tree), []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and isinstance(side.value, str):
                    found.append(f"{path.relative_to(ENGINE.parent)}:{side.lineno}: / {side.value!r}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip \
                and " " not in node.value and (FILE.match(node.value) or GLOB.match(node.value)):
            found.append(f"{path.relative_to(ENGINE.parent)}:{node.lineno}: {node.value!r}")
    return found


def test_only_layout_spells_a_path():
    found = [hit for p in sorted(ENGINE.rglob("*.py"))
             if p not in (LAYOUT, NAMES) and not any(p.is_relative_to(a) for a in ADAPTERS)
             for hit in path_literals(p)]
    assert not found, ("path literals outside shardline/core/layout.py and filenames.py (ask the Layout):\n"
                       + "\n".join(found))


def test_the_check_finds_a_planted_literal(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text('"""doc.json"""\nx = root / "archive"\ny = f"part-{i:05d}.parquet"\nz = "a message about x.json"\n'
                       'w = root.glob("*/step-*")\nv = re.compile("[0-9.]*")\n')
    global ENGINE
    old, ENGINE = ENGINE, tmp_path
    try:
        assert [h.split(": ", 1)[1] for h in path_literals(planted)] == ["/ 'archive'", "'.parquet'", "'*/step-*'"]
    finally:
        ENGINE = old
