"""bench/ by concern (issue 42, point 10): no benchmark module grows past 320 lines, and the ways of
measuring that several benchmarks share (a process's wall/CPU/peak RSS through wait4, its tree's PSS,
this process's VmHWM and its reset, cProfile) are written once, in bench/measure.py."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
LIMIT = 320
MEASURE = BENCH / "measure.py"
# what only bench/measure.py may call or name: the shared measuring helpers wrap each of these
ONLY_IN_MEASURE = {"wait4", "memory_full_info", "Profile", "/proc/self/status", "/proc/self/clear_refs"}


def test_no_bench_module_passes_320_lines():
    long = {str(p.relative_to(BENCH.parent)): n for p in sorted(BENCH.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > LIMIT}
    assert not long, f"bench modules over {LIMIT} lines (split them by concern): {long}"


def _measuring(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in ONLY_IN_MEASURE:
            found.append(f"{path.name}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in ONLY_IN_MEASURE:
            found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    return found


def test_the_shared_measuring_lives_in_bench_measure():
    found = [hit for p in sorted(BENCH.rglob("*.py")) if p != MEASURE for hit in _measuring(p)]
    assert not found, "measuring written again outside bench/measure.py (use its helpers):\n" + "\n".join(found)


def test_the_checks_see_a_long_module_and_a_second_wait4(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('import os\n_, status, ru = os.wait4(1, 0)\nopen("/proc/self/status")\n' + "x = 1\n" * LIMIT)
    assert len(planted.read_text().splitlines()) > LIMIT
    assert _measuring(planted) == ["planted.py:2: .wait4", "planted.py:3: '/proc/self/status'"]
    assert _measuring(MEASURE)  # the helpers themselves are where these names live
