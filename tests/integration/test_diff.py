"""Did the change matter? `shardline diff` and `explain --step` on planted truths (issue 49, point 6), in a
real git + DVC project: a main run, then experiments a user would run against it.

(a) one rule setting that drops a known set of documents: diff names that rule alone, the exact number
    of documents per source, and the held-out change with its interval;
(b) only the seed changed: the data section is empty and every result is within noise;
(c) for sampled steps, the tokens `explain --step` points to are the loader's, byte for byte (checked by
    encoding each named document's text again, not through the line's own encoder or token files).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import tokenizers

from tests.conftest import BIN, commit_trained, init_repo, run, small_params, stdlib_files, write_params

pytestmark = pytest.mark.slow
DVC, SL = str(BIN / "dvc"), str(BIN / "shardline")
SHORT = 400  # the planted rule change: clean.min_chars 16 -> 400


def _planted(folder: Path, files: list[Path], short: int) -> None:
    """Real stdlib files, and `short` documents of real text cut under SHORT characters (a file's opening
    lines), each a file of its own (txt_unit: file): the ones min_chars 400 drops."""
    folder.mkdir(parents=True)
    for f in files:
        (folder / f"{f.parent.name}_{f.name}").write_bytes(f.read_bytes())
    for i, f in enumerate(files[:short]):
        text = f.read_text()
        cut = text[:150 + 15 * i]
        (folder / f"short_{i:02d}.txt").write_text(cut[:cut.rfind(" ")] + "\n")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("diff") / "proj"
    inputs = root.parent / "inputs"
    _planted(inputs / "code", stdlib_files(24, skip=2), short=9)
    _planted(inputs / "notes", stdlib_files(14, skip=30), short=5)
    sources = [{"name": n, "uri": str(inputs / n), "format": "txt", "txt_unit": "file"} for n in ("code", "notes")]
    init_repo(root)
    write_params(root, small_params(sources, train={"steps": 6, "checkpoint_every": 3},
                                    eval={"every": 3, "blocks": 32, "fraction": 0.25, "doc_bytes": 1024}))
    commit_trained(root)
    for name, setting in (("rule", f"clean.min_chars={SHORT}"), ("seed", "train.seed=7")):
        run([DVC, "exp", "run", "-n", name, "-S", setting], root, timeout=600)
        run(["git", "checkout", "--", "params.yaml", "dvc.lock"], root)
        run([DVC, "checkout", "-q"], root)
    return root


def _diff(root: Path, a: str, b: str) -> dict:
    return json.loads(run([SL, "diff", a, b, "--json"], root).stdout)


def _short_docs(root: Path) -> dict[str, int]:
    """Per source, the documents the main run kept (trained or held out) shorter than SHORT characters:
    exactly what min_chars 400 must drop on top."""
    out = {}
    for src in ("code", "notes"):
        texts = [t for p in sorted((root / "data/clean" / src).glob("part-*.parquet"))
                 for t in pq.read_table(p, columns=["text"]).column(0).to_pylist()]
        out[src] = sum(len(t) < SHORT for t in texts)
    return out


def test_a_rule_change_is_named_alone_with_its_documents_and_the_held_out_change(project):
    short = _short_docs(project)
    assert short["code"] >= 9 and short["notes"] >= 5  # the planted ones at least
    d = _diff(project, "HEAD", "rule")
    for src in ("code", "notes"):
        e = d["data"]["sources"][src]
        assert e["rules"] == [{"rule": "min_chars", "what": "settings", "a": 16, "b": SHORT}]
        rules = e["documents"]["rules"]
        assert list(rules) == ["min_chars"], rules  # no other rule's documents moved
        assert (rules["min_chars"]["a_only"], rules["min_chars"]["b_only"]) == (0, short[src])
        assert all(i.startswith("short_") or i.endswith(".py:1") for i in rules["min_chars"]["b_ids"])
        assert not any(e["files"].values())
    assert d["training"]["params"] == []  # the clean section is the data's, not training's
    res = d["results"]
    assert res["paired"] and "held out in both" in res["how"]
    for src in ("code", "notes"):  # bits per byte always compare (the tokenizers may differ: trained on other text)
        c = res["sources"][src]["bpb"]
        assert c["change"] == pytest.approx(c["b"] - c["a"]) and c["interval"][0] < c["interval"][1]
        assert isinstance(c["within_noise"], bool)
    assert res["seed_spread"]["pairs"] and res["total"]["bpb"]["seed"] is not None  # HEAD and `seed` are replicates


def test_only_the_seed_changed_the_data_is_the_same_and_every_result_within_noise(project):
    d = _diff(project, "HEAD", "seed")
    assert d["data"]["changed"] is False and d["data"]["heldout"]["same"]
    assert d["training"]["params"] == [{"key": "train.seed", "a": 1337, "b": 7}]
    res = d["results"]
    assert res["paired"] and res["how"].startswith("the held-out blocks both runs' last evals scored")
    changes = [c for per in [*res["sources"].values(), res["total"]] for c in per.values()]
    assert len(changes) == 3 * 3 and all(c["within_noise"] for c in changes)
    # the seeds' noise is in the interval: the documents' alone would call these two runs different
    assert all(c["seed"] is not None and c["interval"][0] <= c["doc_interval"][0] for c in changes)


def test_explain_step_points_to_the_tokens_the_loader_fed(project):
    from shardline import paramsfile
    from shardline.core.layout import Layout
    from shardline.stream.loader import Loader

    params, layout = paramsfile.load(project / "params.yaml"), Layout.at(project)
    tok = tokenizers.Tokenizer.from_file(str(layout.tokenizer_json))
    eos = tok.token_to_id("<|endoftext|>")
    texts = {i: t for src in ("code", "notes") for p in sorted((layout.clean / src).glob("part-*.parquet"))
             for i, t in zip(*pq.read_table(p, columns=["id", "text"]).to_pydict().values())}
    loader = Loader.from_params(params, layout)
    g = params.loader.global_batch
    for step in (1, 4, params.train.steps):
        r = json.loads(run([SL, "explain", "--step", str(step), "--json"], project).stdout)
        fed = loader.reader.read(loader.reader.order.blocks((step - 1) * g, g))  # no rollback: position (step-1) x g
        assert len(r["rows"]) == g
        for row, block in zip(r["rows"], fed):
            pieces = []
            for d in row["docs"]:
                ids = tok.encode(texts[d["id"]], add_special_tokens=False).ids + [eos]
                assert d["of"] == len(ids)
                pieces += ids[d["tokens"][0]:d["tokens"][1]]
            assert np.array_equal(np.array(pieces), block), (step, row)


def test_a_diff_of_two_checkpoints_of_one_run_needs_no_model(project, tmp_path):
    shutil.copytree(project, tmp_path / "p", symlinks=True, ignore=shutil.ignore_patterns(".shardline"))
    d = _diff(tmp_path / "p", "step-000000003", "latest")
    assert d["data"]["changed"] is False and d["training"]["params"] == []
    assert d["results"]["how"].startswith("the held-out blocks both runs' last evals scored")
    assert not (tmp_path / "p" / ".shardline" / "judged").exists()  # paired from the manifests: nothing judged


def test_a_damaged_judged_result_is_judged_again_to_the_same_answer(project):
    """.shardline/judged/ keeps a run judged on another's held-out documents: bookkeeping, made
    again when cut short or of another shape (issue 52), never a traceback."""
    first = _diff(project, "HEAD", "rule")
    kept = sorted((project / ".shardline" / "judged").glob("*.json"))
    assert kept
    for i, path in enumerate(kept):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2] if i % 2 == 0 else b'{"code": [1, 2]}')
    assert _diff(project, "HEAD", "rule") == first
    assert all(json.loads(p.read_text()) for p in kept)  # written again, whole
