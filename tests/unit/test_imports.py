"""The import graph of the tree: layers import one way (down), and no modules import each other
in a circle, counting imports inside functions too (docs/architecture.md, "Layers")."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Top to bottom: a module may import its own layer or any below it, never one above.
LAYERS = ("flows tasks", "shardline.cli", "shardline.orchestration.flows", "shardline.orchestration.tasks",
          "shardline.dvcrepo", "shardline.stages", "shardline.results", "shardline.training", "shardline.stream",
          "shardline.paramsfile", "shardline.model shardline.data", "shardline.context shardline.registry",
          "shardline.core")
RANK = {prefix: i for i, layer in enumerate(LAYERS) for prefix in layer.split()}
# No exceptions: params.yaml's clean section is its rules' settings, assembled beside the rules
# (data/clean/stage/settings.py), and the loader that completes Params with it (shardline/paramsfile.py)
# sits above both; the stages' groups (shardline/registry.py) are handed to core, never imported by it.
UPWARD: set[tuple[str, str]] = set()


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _rank(module: str) -> int | None:
    hits = [p for p in RANK if module == p or module.startswith(p + ".")]
    return RANK[max(hits, key=len)] if hits else None


def graph() -> dict[str, set[str]]:
    files = {_module(p): p for top in ("flows", "tasks", "shardline")
             for p in (REPO / top).rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            edges[mod] |= {n for n in names if n in files and n != mod}
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:  # Tarjan: strongly connected components of more than one module
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _package_of(module: str, edges) -> bool:
    return any(other.startswith(module + ".") for other in edges)


def test_no_import_runs_up_a_layer():
    edges = graph()
    up = [f"{a} -> {b}" for a, targets in edges.items() for b in sorted(targets)
          if _rank(a) is not None and _rank(b) is not None and _rank(b) < _rank(a) and (a, b) not in UPWARD]
    assert not up, "imports from a lower layer to a higher one:\n" + "\n".join(up)


def test_no_import_circles():
    edges = graph()
    # a package's own __init__ naming its modules is not a circle of code
    plain = {a: {b for b in t if not (_package_of(a, edges) and b.startswith(a + "."))} for a, t in edges.items()}
    assert not _circles(plain), f"import circles: {_circles(plain)}"


def test_the_checks_see_a_planted_circle_and_an_upward_import():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _rank("shardline.core.config") > _rank("shardline.data.clean.stage.settings") > _rank("shardline.cli.main")
    assert _rank("shardline.core.extras") > _rank("shardline.registry") > _rank("shardline.paramsfile")


def test_core_imports_nothing_above_it():
    """The ground floor stands on nothing: a core module imports only core modules and the package's
    root (its __version__; shardline/__init__.py imports nothing), and no exception is named for it."""
    edges = graph()
    up = [f"{a} -> {b}" for a, targets in edges.items() if a.startswith("shardline.core.") or a == "shardline.core"
          for b in sorted(targets) if not (b in ("shardline", "shardline.core") or b.startswith("shardline.core."))]
    assert not up, "core imports from above it:\n" + "\n".join(up)


def test_the_engine_imports_neither_prefect_nor_dvc():
    """The engine is every module of the package but the orchestrators beside it (the command, the
    Prefect flows and tasks, the DVC adapter), which hand it what they know (RunContext)."""
    adapters = ("shardline.cli", "shardline.orchestration", "shardline.dvcrepo")
    found = []
    for path in sorted((REPO / "shardline").rglob("*.py")):
        mod = _module(path)
        if mod == "shardline" or any(mod == a or mod.startswith(a + ".") for a in adapters):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            found += [f"{mod}: {n}" for n in names if n.split(".")[0] in ("prefect", "prefect_ray", "dvc")]
    assert not found, "the engine imports an orchestrator:\n" + "\n".join(found)


def test_the_clean_rooms_import_one_way():
    """Inside the clean stage (docs/architecture.md, the folder map): stage/ uses rules/, rules/ use
    kernels/; a kernel knows no rule and no part, a rule no part (verdict.py sits below them all)."""
    edges = graph()
    below = {"shardline.data.clean.kernels": ("rules", "stage"), "shardline.data.clean.rules": ("stage",),
             "shardline.data.clean.verdict": ("kernels", "rules", "stage")}
    up = [f"{a} -> {b}" for a, targets in edges.items() for room, higher in below.items()
          if a == room or a.startswith(room + ".")
          for b in sorted(targets) if any(b.startswith(f"shardline.data.clean.{h}") for h in higher)]
    assert not up, "a clean room imports one above it:\n" + "\n".join(up)
