"""Every subcommand of the real `shardline` parser, run on broken inputs, answers with lines, never
a traceback (issue 28).

The subcommands and their arguments come from shardline.cli.main.parser() itself, so a new subcommand is
swept without being listed here (a positional this file cannot fill fails, naming it). The broken
inputs: no params.yaml; a params.yaml that is not a mapping; an empty project (valid params, no
data/); and, in a project that trained, a checkpoint that does not exist, and an output path
that cannot be written (/sys/kernel refuses mkdir, root or not). serve, deploy, worker and
pipeline are left out: they start a Prefect server, a work pool or a worker before reading input.
Issue 44 adds params.yaml with a key given twice or a boolean for a number, and a trained project
whose every JSON, JSONL and parquet file the line wrote is cut short: each subcommand (each stage on
its own copy) answers one line naming the file and its rebuild, or makes its own bookkeeping again.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from shardline import registry
from shardline.cli.main import main, parser
from tests.conftest import BIN, run, small_params, stdlib_files, write_params
from tests.unit.test_bad_input import _fsync_fails_at  # a disk that fills partway, at its k-th fsync

SL = str(BIN / "shardline")
STARTS_SOMETHING = {"serve", "deploy", "worker", "pipeline"}
UNWRITABLE = "/sys/kernel/shardline-out"  # mkdir there: EPERM as root, EACCES otherwise; never created


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: p for name, p in sub.choices.items() if name not in STARTS_SOMETHING}


def _argvs(values: dict[str, str], taking: set[str] | None = None) -> list[list[str]]:
    """Each swept subcommand (those with a positional named in `taking`, when given) with its
    positionals filled from `values` (a `choices` positional, the stage's NAME, once per choice)."""
    out = []
    for name, p in _subcommands().items():
        argvs = [[name]]
        positionals = [a for a in p._actions if not a.option_strings and not isinstance(a, argparse._HelpAction)]
        if taking is not None and not taking & {a.dest for a in positionals}:
            continue
        for a in positionals:
            choices = registry.NAMES if (name, a.dest) == ("stage", "name") else a.choices  # plug-ins' too: any name
            if choices:
                argvs = [[*argv, c] for argv in argvs for c in choices]
            else:
                assert a.dest in values, f"shardline {name}: no broken value for its {a.dest} here; add one"
                argvs = [[*argv, values[a.dest]] for argv in argvs]
        out += argvs
    return out


def _sweep(root: Path, argvs: list[list[str]]) -> dict[str, object]:
    """Run each argv in `root` (4 at a time: most are a second of imports); argv -> result."""
    with ThreadPoolExecutor(4) as pool:
        results = pool.map(lambda argv: run([SL, *argv], root, check=False, timeout=120), argvs)
        return {" ".join(argv): r for argv, r in zip(argvs, results)}


def _no_tracebacks(results: dict) -> None:
    bad = {argv: r.stderr[-1500:] for argv, r in results.items() if "Traceback" in r.stderr + r.stdout}
    assert not bad, "tracebacks:\n" + "\n".join(f"--- shardline {a}\n{e}" for a, e in bad.items())
    failed = {argv: r for argv, r in results.items() if r.returncode}
    for argv, r in failed.items():  # a refusal is exit 2 and an `error:` line, not a crash's exit 1
        assert r.returncode == 2 and "error: " in r.stderr, f"shardline {argv}: exit {r.returncode}\n{r.stderr}"


ANY = {"checkpoint": "latest", "doc_id": "x.py:1", "out_dir": "out", "uri": "pushed", "a": "latest", "b": "latest"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A project that ran the line up to a checkpoint (download .. train), small."""
    root = tmp_path_factory.mktemp("trained")
    src = root / "in"
    src.mkdir()
    for f in stdlib_files(12):
        (src / f"{f.parent.name}_{f.name}").write_bytes(f.read_bytes())
    write_params(root, small_params([{"name": "s", "uri": str(src), "format": "txt"}]))
    for stage in ("download", "clean", "tokenize", "shard", "train"):
        run([SL, "stage", stage], root)
    return root


def test_every_subcommand_without_a_params_file(tmp_path):
    results = _sweep(tmp_path, _argvs(ANY))
    _no_tracebacks(results)
    assert "params.yaml: not found; run from the project root or pass --params" in results["params"].stderr


def test_every_subcommand_on_a_params_file_that_is_not_a_mapping(tmp_path):
    (tmp_path / "params.yaml").write_text("- a list\n- not sections\n")
    results = _sweep(tmp_path, _argvs(ANY))
    _no_tracebacks(results)
    assert "params.yaml: must be a mapping of sections, got list" in results["stage train"].stderr


def test_every_subcommand_on_an_empty_project(tmp_path):
    write_params(tmp_path, small_params([{"name": "s", "uri": str(tmp_path / "nowhere"), "format": "txt"}]))
    results = _sweep(tmp_path, _argvs(ANY))
    _no_tracebacks(results)
    assert "latest: no valid checkpoint under data/checkpoints" in results["eval latest"].stderr


def test_every_subcommand_on_a_checkpoint_that_does_not_exist_and_an_unwritable_output(trained):
    broken = {"checkpoint": "step-999", "out_dir": UNWRITABLE, "uri": UNWRITABLE}
    results = _sweep(trained, _argvs({**ANY, **broken}, taking=set(broken)))
    assert len(results) >= 5, results.keys()  # lineage, eval, export, sample, push-shards, ...
    _no_tracebacks(results)
    for cmd in ("eval", "lineage", "export", "sample"):
        err = results[f"{cmd} step-999" + (f" {UNWRITABLE}" if cmd == "export" else "")].stderr
        assert "error: step-999: no such checkpoint (under data/checkpoints: step-000000002, step-000000004); " \
               "'shardline checkpoints' lists them" in err, err
    r = run([SL, "export", "latest", UNWRITABLE], trained, check=False)
    assert r.returncode == 2 and f"error: OUT_DIR {UNWRITABLE}: " in r.stderr and "Traceback" not in r.stderr
    assert results[f"push-shards {UNWRITABLE}"].stderr.startswith(f"error: push-shards {UNWRITABLE}: ")
    assert not Path(UNWRITABLE).exists()


def test_eval_tasks_that_name_no_task_are_one_line(trained):
    pytest.importorskip("lm_eval")  # the tasks extra, in dev
    (trained / "notatask.yaml").write_text("just: a mapping\n")
    for tasks, line in (("hellaswg", "error: --tasks: 'hellaswg' is not an lm-eval task (did you mean hellaswag"),
                        ("notatask.yaml,nope.yaml", f"error: --tasks[1]: nope.yaml: no such task YAML "
                                                    f"({trained}/nope.yaml); "),  # files are looked for first
                        ("notatask.yaml", f"error: --tasks: {trained}/notatask.yaml: lm-eval cannot load this task (")):
        r = run([SL, "eval", "latest", "--tasks", tasks], trained, check=False)
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert r.returncode == 2 and "Traceback" not in r.stderr and len(errors) == 1 and line in errors[0], r.stderr
    assert not (trained / "data/metrics/tasks.json").exists()



def _in_process(root: Path, argv: list[str]) -> tuple[int | str, str]:
    """`shardline --root ROOT ARGV` in this process (imports paid once): (exit code, stderr), or
    ("traceback", its last line) when an exception escaped main, which the command would print."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return main(["--root", str(root), *argv]), err.getvalue()
    except BaseException as e:  # noqa: BLE001 - what escapes is the finding
        return "traceback", f"{type(e).__name__}: {e}"


def test_every_subcommand_on_params_with_a_key_given_twice_or_a_boolean_for_a_number(tmp_path):
    write_params(tmp_path, small_params([{"name": "s", "uri": str(tmp_path / "nowhere"), "format": "txt"}]))
    text = (tmp_path / "params.yaml").read_text()
    (tmp_path / "params.yaml").write_text(text + "train:\n  steps: 3\n")
    first = text.splitlines().index("train:") + 1
    said = f"params.yaml: line {len(text.splitlines()) + 1}: train is given twice (first at line {first})"
    argvs = [*_argvs({**ANY, "out_dir": str(tmp_path / "out")}), ["deploy"]]  # deploy reads it before any server
    results = {" ".join(a): _in_process(tmp_path, a) for a in argvs}
    assert all(rc == 2 and said in err for rc, err in results.values()), \
        {a: r for a, r in results.items() if said not in r[1]}
    (tmp_path / "params.yaml").write_text(text.replace("  steps: 4\n", "  steps: yes\n", 1))
    rc, err = _in_process(tmp_path, ["stage", "train"])
    assert rc == 2 and "train.steps: a number is wanted, got true" in err, err


WRITTEN = ("*.json", "*.jsonl", "*.parquet")


def test_every_subcommand_on_a_project_whose_written_files_are_cut_short(trained, tmp_path):
    """Every JSON, JSONL and parquet file under data/ but the checkpoints' (whose hashes make a cut
    one an invalid checkpoint: test_checkpoint) cut in half: the subcommands that only read in one
    copy, each stage in a copy of its own (stages write)."""
    def damaged(name: str) -> Path:
        root = tmp_path / name
        shutil.copytree(trained, root)
        for pattern in WRITTEN:
            for p in (root / "data").rglob(pattern):
                if "checkpoints" not in p.parts:
                    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
        return root

    root = damaged("readers")
    readers = [a for a in _argvs({**ANY, "out_dir": str(tmp_path / "exported"), "uri": str(tmp_path / "pushed")})
               if a[0] != "stage"]
    results = {" ".join(a[:2]): _in_process(root, a) for a in readers}
    results.update({f"stage {s}": _in_process(damaged(s), ["stage", s])
                    for s in ("download", "clean", "tokenize", "shard", "train", "report")})
    assert not {a: r for a, r in results.items() if r[0] not in (0, 2)}, results
    named = {a for a, (rc, err) in results.items() if rc == 2 and ("'dvc repro -f -s " in err or "'dvc checkout " in err)}
    assert {"eval latest", "sample latest", "push-shards " + str(tmp_path / "pushed"), "stage train",
            "stage report", "explain x.py:1"} <= named, {a: r for a, r in results.items() if a not in named}
    for s in ("download", "clean", "tokenize", "shard"):  # each makes its own bookkeeping again, or names what it cannot
        assert results[f"stage {s}"][0] == 0 or f"stage {s}" in named, results[f"stage {s}"]


@pytest.mark.parametrize("k", [1, 6, 13])  # 12 raw files: 2 fsyncs each (file, folder), then the manifest's
def test_download_and_report_on_a_disk_that_fills_are_one_line_and_leave_nothing_half_written(trained, tmp_path,
                                                                                             monkeypatch, k):
    root = tmp_path / "p"
    shutil.copytree(trained, root)
    manifest = (root / "data/raw/s/manifest.json").read_bytes()
    shutil.rmtree(root / "data/raw")
    monkeypatch.setattr(os, "fsync", _fsync_fails_at(k))
    rc, err = _in_process(root, ["stage", "download"])
    assert rc == 2 and "error: no space left on the device while writing data/raw/s/" in err, err
    monkeypatch.undo()
    assert not (root / "data/raw/s/manifest.json").exists()  # no manifest vouches for a partial download
    assert not [p for p in (root / "data").rglob("*") if ".tmp-" in p.name]
    assert _in_process(root, ["stage", "download"])[0] == 0 and (root / "data/raw/s/manifest.json").read_bytes() == manifest
    assert _in_process(root, ["stage", "report"])[0] == 0
    evidence = (root / "data/reports/evidence.md").read_bytes()
    (root / "data/reports/evidence.md").write_bytes(b"an older card\n")
    monkeypatch.setattr(os, "fsync", _fsync_fails_at(min(k, 3)))
    rc, err = _in_process(root, ["stage", "report"])
    assert rc == 2 and "error: no space left on the device while writing data/reports/" in err, err
    monkeypatch.undo()
    assert (root / "data/reports/evidence.md").read_bytes() in (b"an older card\n", evidence)  # old or whole
    assert not [p for p in (root / "data").rglob("*") if ".tmp-" in p.name]
