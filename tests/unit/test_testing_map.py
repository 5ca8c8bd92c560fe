"""docs/testing.md's map of what was tried ("Broken inputs and faults, by command") stays true:
every `shardline` subcommand and every stage has a row, no cell is empty (a gap is written "n/a:
why" or filled with a test), and every key a cell uses names tests that exist, as
`tests/<unit|integration>/<file>.py::<test>`."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from shardline import registry
from shardline.cli.main import parser

REPO = Path(__file__).resolve().parents[2]
HEADING = "### Broken inputs and faults, by command"
KEY = re.compile(r"\b[A-Z]\d+\b")
TEST = re.compile(r"`((?:unit|integration)/test_\w+)::(test_\w+)`")


def _section(text: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(HEADING)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    return lines[start:end]


def read_map(text: str) -> tuple[list[list[str]], dict[str, list[tuple[str, str]]]]:
    """(the table's rows, as cells; each key -> the (file, test) pairs it names)."""
    section = _section(text)
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in section if ln.startswith("|")]
    legend = {m.group(1): TEST.findall(m.group(2)) for ln in section if (m := re.match(r"- ([A-Z]\d+) (.*)", ln))}
    return rows[2:], legend  # past the header and its rule


def problems(text: str, root: Path = REPO) -> list[str]:
    rows, legend = read_map(text)
    out = []
    for row in rows:
        if len(row) != 9:
            out.append(f"{row[0]}: {len(row)} cells, not 9")
        for i, cell in enumerate(row[1:], 1):
            if not cell or not (KEY.search(cell) or cell.startswith("n/a")):
                out.append(f"{row[0]}, column {i}: empty (name a test, or say 'n/a: why')")
            out += [f"{row[0]}, column {i}: key {k} is not in the list of keys" for k in KEY.findall(cell)
                    if k not in legend]
    for key, tests in legend.items():
        if not tests:
            out.append(f"{key}: names no test")
        for file, test in tests:
            path = root / "tests" / f"{file}.py"
            if not path.is_file() or not re.search(rf"^(async )?def {test}\(", path.read_text(), re.M):
                out.append(f"{key}: {file}::{test} does not exist")
    named = {row[0].strip("`") for row in rows}
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    wanted = {f"stage {s}" for s in registry.NAMES} | (set(sub.choices) - {"stage"})
    out += [f"`{c}`: no row" for c in sorted(wanted - named)]
    return out


def test_the_map_names_every_command_and_stage_fills_every_cell_and_each_test_exists():
    assert problems((REPO / "docs" / "testing.md").read_text()) == []


def test_the_check_finds_an_empty_cell_a_missing_test_and_a_missing_row():
    text = (REPO / "docs" / "testing.md").read_text()
    rows, legend = read_map(text)
    first = next(ln for ln in _section(text) if ln.startswith("| `stage download`"))
    planted = text.replace(first, first.replace("| P0 |", "|  |", 1)) \
        .replace("::test_every_subcommand_without_a_params_file`", "::test_every_subcommand_without_a_params_fiel`") \
        .replace("| `sample` |", "| `sampel` |")
    found = problems(planted)
    assert "`stage download`, column 1: empty (name a test, or say 'n/a: why')" in found
    assert "P0: integration/test_cli_errors::test_every_subcommand_without_a_params_fiel does not exist" in found
    assert "`sample`: no row" in found


STORE_HEADING = "### Object-store faults"


def store_problems(text: str, root: Path = REPO) -> list[str]:
    """The object-store table: no empty cell, and every test a cell names is defined in one of
    tests/integration/test_store_faults*.py."""
    lines = text.splitlines()
    start = lines.index(STORE_HEADING)
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines[start:]
            if ln.startswith("|")][2:]
    defined = set()
    for f in (root / "tests" / "integration").glob("test_store_faults*.py"):
        defined |= set(re.findall(r"^(?:async )?def (test_\w+)\(", f.read_text(), re.M))
    out = []
    for row in rows:
        for i, cell in enumerate(row[1:], 1):
            named = re.findall(r"`(test_\w+)`", cell)
            if not named:
                out.append(f"{row[0]}, column {i}: empty (name a test)")
            out += [f"{row[0]}, column {i}: {t} is not in tests/integration/test_store_faults*.py"
                    for t in named if t not in defined]
    return out


def test_the_object_store_table_fills_every_cell_with_a_test_that_exists():
    text = (REPO / "docs" / "testing.md").read_text()
    assert store_problems(text) == []
    row = next(ln for ln in text.splitlines() if ln.startswith("| `shardline push-shards` |"))
    planted = text.replace(row, row.replace("`test_push_shards_killed_in_a_fault_storm_ends_as_a_fault_free_push`", "")
                           .replace("`test_push_shards_publishes_every_byte", "`test_push_shards_publishes_every_bite"))
    assert store_problems(planted) == [
        "`shardline push-shards`, column 1: test_push_shards_publishes_every_bite_through_a_fault_schedule is not in "
        "tests/integration/test_store_faults*.py",
        "`shardline push-shards`, column 4: empty (name a test)"]
