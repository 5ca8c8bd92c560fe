"""The README, run as a test (issue 50): a new user's first hour, from README.md itself.

Its main command (the install must be exactly `pip install -e .` after the pinned torch; the venv
and the installs are left out, this test runs in the environment they made), then each next step
it shows, in order, in a fresh clone of HEAD; each must print what the README's "prints" block
says (`…`: a figure of the run). Beside them: a default run warns nothing and its last line of
ours says where the card and the plot are; the experiment leaves the main run restorable and
`dvc exp show` shows both runs with numbers in 120 columns; `dvc exp run -S` leaves params.yaml's
comments, and their figures are the run's. The default line twice (the main run and the
experiment): about 7 minutes on 2 cores, the longest test file (tests/conftest.py, LONGEST_FIRST).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, env_for, run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
README = REPO / "README.md"
INSTALL = ["python3 -m venv .venv", ". .venv/bin/activate", "pip install torch==2.13.0", "pip install -e ."]
WIDTH = 120  # a terminal's columns that `dvc exp show` must fit
CELL = r"(?:\S| (?=\S))+"  # what `…` stands for: a figure, or a table cell (no two spaces in a row)
PYTHON = (3, 11, 7)  # params.yaml's figures are of this Python's standard library (as test_pinned_line's pins)


def block(marker: str) -> list[str]:
    """The lines of the fenced block right after README.md's `<!-- readme-test: <marker>` comment
    (or `<!-- test-command`, the block .ci/run runs)."""
    lines = README.read_text().splitlines()
    tag = "<!-- test-command" if marker == "test-command" else f"<!-- readme-test: {marker}"
    start = next((i for i, ln in enumerate(lines) if ln.startswith(tag)), None)
    assert start is not None and lines[start + 1].startswith("```"), f"README.md: no block marked {marker!r}"
    end = next(i for i in range(start + 2, len(lines)) if lines[i].startswith("```"))
    return lines[start + 2:end]


def commands(marker: str) -> list[str]:
    """A block's commands, without their comments."""
    return [re.sub(r"\s+#.*$", "", ln).strip() for ln in block(marker) if ln.strip()]


def prints() -> dict[str, list[str]]:
    """The README's "prints" block: command -> the lines it says that command prints."""
    said: dict[str, list[str]] = {}
    for ln in block("prints"):
        if ln.startswith("$ "):
            said[ln[2:]] = []
        else:
            said[list(said)[-1]].append(ln)
    return said


def pattern(line: str) -> re.Pattern:
    """A README line as a whole-line pattern: its cells (split at two spaces or more) apart by any
    such run, `…` one cell or figure."""
    cells = re.split(r"\s{2,}", line.strip())
    return re.compile(r"\s*" + r"\s{2,}".join(CELL.join(map(re.escape, c.split("…"))) for c in cells) + r"\s*")


def shows(expected: list[str], output: str) -> None:
    """Every expected line is a whole line of `output`, in order."""
    lines, i = output.splitlines(), 0
    for want in expected:
        while i < len(lines) and not pattern(want).fullmatch(lines[i]):
            i += 1
        assert i < len(lines), f"the README says it prints\n  {want}\nbut it printed:\n{output}"
        i += 1


def sh(cmd: str, root: Path, env: dict) -> str:
    """`cmd` as a user's shell runs it; stdout and stderr as one terminal shows them, in order."""
    r = subprocess.run(["bash", "-c", cmd], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=1200)
    assert r.returncode == 0, f"{cmd} failed ({r.returncode}):\n{r.stdout}"
    return r.stdout


def manifests(root: Path) -> dict[str, bytes]:
    return {m.parent.name: m.read_bytes() for m in (root / "data/checkpoints").glob("step-*/manifest.json")}


@dataclass
class Flow:
    root: Path
    out: dict[str, str]  # command -> what it printed
    main_run: dict[str, bytes]  # the first dvc repro's checkpoints (manifests)
    restored: dict[str, bytes]  # the same after the experiment, from HEAD's record by `dvc checkout`
    params_diff: str  # `git diff params.yaml` after the experiment
    card: str  # the main run's evidence card
    rows: list[dict]  # the main run's train.jsonl


@pytest.fixture(scope="module")
def flow(tmp_path_factory) -> Flow:
    root = tmp_path_factory.mktemp("readme") / "shardline"
    head = run(["git", "rev-parse", "HEAD"], REPO).stdout.strip()
    run(["git", "clone", "-q", str(REPO), str(root)], REPO.parent)
    run(["git", "checkout", "-q", "-B", "main", head], root)  # HEAD, on a branch as a clone has it
    run(["git", "config", "user.email", "reader@example.com"], root)
    run(["git", "config", "user.name", "reader"], root)
    env = {**env_for(), "PYTHONUNBUFFERED": "1"}  # DVC's lines and ours in the order they were said
    main = commands("main")
    assert len(main) == 1 and main[0].split(" && ")[:len(INSTALL)] == INSTALL, main
    steps = [" && ".join(main[0].split(" && ")[len(INSTALL):])] + commands("next")
    out, main_run, card, rows = {}, {}, "", []
    for cmd in steps:
        out[cmd] = sh(cmd, root, env)
        if cmd == "dvc repro":
            main_run = manifests(root)
            card = (root / "data/reports/evidence.md").read_text()
            rows = [json.loads(ln) for ln in (root / "data/metrics/train.jsonl").read_text().splitlines()]
    params_diff = run(["git", "diff", "params.yaml"], root).stdout
    # restorable, as the experiment said: HEAD's record brings the main run's checkpoints back
    run(["git", "checkout", "HEAD", "--", "dvc.lock", "params.yaml"], root)
    sh("dvc checkout data/checkpoints", root, env)
    return Flow(root, out, main_run, manifests(root), params_diff, card, rows)


def test_the_main_command_installs_the_line_alone_and_the_test_command_dev():
    """`[dev]` was the main command's install: a browser engine, lm-eval, W&B, MLflow, moto (330
    packages, 3.5 GB); the line needs the package alone. The tests keep their own command."""
    assert commands("main")[0].split(" && ")[:len(INSTALL)] == INSTALL
    assert "pip install -e '.[dev]' && pytest" in commands("test-command")[0]


def test_each_command_prints_what_the_readme_says(flow):
    said = prints()
    unrun = set(said) - set(flow.out)
    assert not unrun, f"the README shows the output of commands it does not run: {unrun}"
    for cmd, lines in said.items():
        shows(lines, flow.out[cmd])


def test_a_default_run_warns_nothing_and_ends_on_where_the_card_and_the_plot_are(flow):
    """`WARNING: 'data/reports/profile' is empty.` came four times, and the run ended on DVC's
    `git add dvc.lock` advice; DVC's closing lines after ours are its lock update and `dvc push` hint."""
    repro = flow.out["dvc repro"]
    assert "WARNING" not in repro and "WARNING" not in flow.out["dvc exp run -n mix -S mix.code=0.6 -S mix.prose=0.4"]
    lines = [ln for ln in repro.splitlines() if ln.strip()]
    ours = max(i for i, ln in enumerate(lines) if ln.startswith("report: done in "))
    assert lines[ours].endswith("; the evidence card is data/reports/evidence.md, its plot data/reports/train.png")
    assert lines[ours + 1:] == ["Updating lock file 'dvc.lock'",
                                "Use `dvc push` to send your updates to remote storage."]
    assert (flow.root / "data/reports/evidence.md").is_file() and (flow.root / "data/reports/train.png").is_file()


def test_the_experiment_keeps_the_main_run_and_exp_show_fits_a_terminal_with_both(flow):
    """The README once went from `dvc repro` straight to the experiment: the main run's
    checkpoints were removed as "restorable" with nothing recording them, and `dvc exp show`'s
    baseline row was `!` everywhere; it printed 244 columns and more."""
    assert sorted(flow.main_run) == ["step-000000100", "step-000000150"]
    assert flow.restored == flow.main_run
    shown = flow.out["dvc exp show --only-changed --drop data/"]
    assert max(map(len, shown.splitlines())) <= WIDTH, shown
    rows = [re.split(r"\s{2,}", ln.strip()) for ln in shown.splitlines()]
    head = next(r for r in rows if r[0] == "Experiment")
    runs = [r for r in rows if r[0] == "main" or r[0].startswith("└──")]
    assert len(runs) == 2, shown
    for r in runs:  # the bits per byte and tokens/s of each run: numbers, not `!` or `-`
        figures = dict(zip(head, r))
        assert all(float(figures[k]) > 0 for k in ("bpb.code", "bpb.prose", "bpb_total", "tokens_per_s")), r
    assert [dict(zip(head, r))["mix.code"] for r in runs] == ["0.8", "0.6"]


def test_params_yaml_keeps_its_comments_and_its_figures_are_the_runs(flow):
    """`dvc exp run -S` rewrote 44 lines of params.yaml, its comments lost; and its comments gave
    file and shard counts of an older line (~670 files, ~8 shards of code)."""
    changed = [ln for ln in flow.params_diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert changed == ["-  code: 0.8", "-  prose: 0.2            # 417 blocks: upsampled, a fresh shuffle every epoch",
                       "+  code: 0.6", "+  prose: 0.4            # 417 blocks: upsampled, a fresh shuffle every epoch"]
    if sys.version_info[:3] != PYTHON:
        pytest.skip(f"params.yaml's figures are of Python {'.'.join(map(str, PYTHON))}'s standard library")
    text, root = (REPO / "params.yaml").read_text(), flow.root

    def said(regex: str) -> tuple[str, ...]:
        m = re.search(regex, text)
        assert m, f"params.yaml: no comment matching {regex!r}"
        return m.groups()

    def read(rel: str) -> dict:
        return json.loads((root / rel).read_text())

    code, prose = read("data/raw/code/manifest.json"), read("data/raw/prose/manifest.json")
    stats = read("data/clean/stats.json")["sources"]
    shards = {n: read(f"data/shards/{n}/index.json") for n in ("code", "prose")}
    n = lambda s: int(s.replace(",", ""))  # noqa: E731
    files, mb, kept = said(r"code: the standard library's \.py files, tests and pydoc_data excluded: ([\d,]+) files, "
                           r"([\d.]+) MB "
                           r"\(([\d,]+) kept for training\)")
    assert (n(files), float(mb), n(kept)) == (len(code["files"]), round(code["bytes"] / 1e6, 1),
                                              stats["code"]["docs_out"])
    topics, mb = said(r"prose: the language reference from pydoc_data: (\d+) topics in one file, ([\d.]+) MB")
    assert (n(topics), float(mb), len(prose["files"])) == (stats["prose"]["docs_in"], round(prose["bytes"] / 1e6, 1), 1)
    parts = said(r"part_mb: 2 +# (\d+) parts for the default data \(code (\d+), prose (\d+)\)")
    assert tuple(map(int, parts)) == (stats["code"]["parts"] + stats["prose"]["parts"], stats["code"]["parts"],
                                      stats["prose"]["parts"])
    blocks, tokens, mib, code_shards, prose_shards = said(
        r"target_mb: 1 +# MiB: code's ([\d,]+) blocks of 514 B \(([\d,]+) tokens\) = ([\d.]+) MiB "
        r"-> (\d+) shards; prose (\d+)")
    assert (n(blocks), n(tokens), float(mib), int(code_shards), int(prose_shards)) == (
        shards["code"]["total_blocks"], read("data/tokens/code/index.json")["tokens"],
        round(shards["code"]["total_blocks"] * 514 / 2**20, 1), len(shards["code"]["shards"]),
        len(shards["prose"]["shards"]))
    assert n(said(r"prose: 0\.2 +# ([\d,]+) blocks: upsampled")[0]) == shards["prose"]["total_blocks"]
    held = said(r"fraction: 0\.1 +# of each source's documents, by a keyed hash of their content: (\d+) code files, "
                r"(\d+) prose topics")
    assert tuple(map(int, held)) == (stats["code"]["heldout"]["docs"], stats["prose"]["heldout"]["docs"])
    val = {s: read(f"data/shards/{s}/val/index.json")["total_blocks"] for s in ("code", "prose")}
    assert tuple(map(int, said(r"blocks: 128 +# per source: code 128 of its (\d+) held-out blocks, prose all (\d+)"))) \
        == (val["code"], val["prose"])


def test_on_the_shipped_line_held_out_loss_ends_within_noise_of_training_or_the_card_says_why(flow):
    """Held-out loss ended 1.1 nats below training loss on the shipped line (codec tables were most of
    code's held-out tokens), and nothing on the card said so (issue 49, point 6d)."""
    from shardline.training import noise
    from shardline.training.steplog import own_mix

    last = [r for r in flow.rows if r.get("eval")][-1]
    held, (mean, half, _) = own_mix(last["eval"]), noise.recent_train_loss(flow.rows, last["step"])
    within = abs(mean - held["loss"]) <= math.hypot(noise.half_width(held["loss_ci"]), half)
    said = "nats below the training loss" in flow.card or "nats above the training loss" in flow.card
    assert within != said, (held, mean, half)  # within noise, or the card says why not: never both, never neither
    assert within, "the shipped line's held-out set is again unlike its training data:\n" + flow.card
