"""Curation as a user meets it: rules per source, inspectable drops, `shardline explain`, the
evidence card's drop table."""

import json
import signal

import pydoc_data.topics

from shardline.data import download
from shardline.data.clean.stage import dropped, explain, run as clean
from shardline.results import report
from tests.conftest import BIN, env_for, make_project, run, stdlib_files

NO_SPLIT = {"fraction": 0, "min_docs": 0, "every": 0}
QUIET = dict(log=lambda _: None)
WEB_RULES = {"gopher_quality": {}, "gopher_repetition": {}, "fineweb": {}, "language": {}}


def project(tmp_path, part_mb=0.05, **clean_cfg):
    """A prose source (pydoc topics, judged by the web rules) and a code source (not)."""
    d = tmp_path / "in"
    d.mkdir(parents=True, exist_ok=True)
    topics = list(pydoc_data.topics.topics.values())
    (d / "prose.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in topics + topics))  # each twice
    code = d / "code"
    code.mkdir(exist_ok=True)
    for f in stdlib_files(30):
        (code / f"{f.parent.name}_{f.name}").write_text(f.read_text())
    sources = [{"name": "prose", "uri": str(d / "prose.jsonl"), "format": "jsonl", "clean": WEB_RULES},
               {"name": "code", "uri": str(code), "format": "txt"}]
    params, layout = make_project(tmp_path / "p", sources, eval=NO_SPLIT, clean={"part_mb": part_mb, **clean_cfg})
    download.run(params, layout, **QUIET)
    return params, layout, clean.run(params, layout, **QUIET)


def test_rules_apply_per_source_and_every_drop_is_explained(tmp_path):
    params, layout, stats = project(tmp_path)
    prose, code = stats["sources"]["prose"], stats["sources"]["code"]
    assert "gopher_quality.min_doc_words" in stats["rules_order"]["prose"]
    assert not any(r.startswith(("gopher", "fineweb", "language")) for r in stats["rules_order"]["code"])
    web_drops = {r: c["docs"] for r, c in prose["rules"].items() if c["docs"]}
    assert web_drops and all(r.split(".")[0] in (*WEB_RULES, "min_chars") for r in web_drops)
    assert {r for r, c in code["rules"].items() if c["docs"]} <= {"min_chars"}  # an empty __init__.py at most
    assert code["docs_out"] == 30 - sum(c["docs"] for c in code["rules"].values())
    for rule, n in web_drops.items():  # each dropped rule has its sample, and explain agrees with each row
        rows = [json.loads(x) for x in (layout.dropped("prose") / f"{rule}.jsonl").read_text().splitlines()]
        assert len(rows) == min(n, params.clean.drop_samples)
        for row in rows:
            e = explain.explain(params, layout, row["id"])
            assert (e["verdict"], e["rule"], e["value"], e["limit"]) == ("dropped", rule, row["value"], row["limit"])
            assert list(row) == [k for k in dropped.FIELDS if k in row]
    n = len(pydoc_data.topics.topics)
    kept = [i for i in range(1, n + 1) if explain.explain(params, layout, f"prose.jsonl:{i}")["verdict"] == "kept"]
    assert kept  # the copies of the others went by the same rule as they did
    copy = [json.loads(x) for x in (layout.dropped("prose") / "dedup.jsonl").read_text().splitlines()]
    assert {(f"prose.jsonl:{n + i}", f"exact copy of prose.jsonl:{i}") for i in kept} \
        <= {(r["id"], r["detail"]) for r in copy}


def test_the_dropped_sample_does_not_depend_on_how_parts_were_cut(tmp_path):
    _, small, _ = project(tmp_path / "small", part_mb=0.05)
    _, one, _ = project(tmp_path / "one", part_mb=64)
    files = sorted(p.name for p in small.dropped("prose").iterdir())
    assert files == sorted(p.name for p in one.dropped("prose").iterdir()) and len(files) >= 3
    for name in files:
        assert (small.dropped("prose") / name).read_bytes() == (one.dropped("prose") / name).read_bytes()


def test_explain_on_the_command_line(tmp_path):
    params, layout, stats = project(tmp_path)
    root = tmp_path / "p"
    sh = [str(BIN / "shardline"), "explain"]
    r = run([*sh, "prose.jsonl:1"], root)
    assert r.stdout.startswith("prose.jsonl:1: ") and ("kept for training" in r.stdout or "dropped by" in r.stdout)
    kept = next(i for i in range(1, 80) if explain.explain(params, layout, f"prose.jsonl:{i}")["verdict"] == "kept")
    r = run([*sh, f"prose.jsonl:{kept}", "--json"], root)
    e = json.loads(r.stdout)
    assert e["verdict"] == "kept" and e["side"] == "train" and e["lang"] == "en" and e["lang_score"] >= 0.65
    code_file = sorted((layout.raw_files("code")).iterdir())[0].name
    assert "kept for training (code, code/part-" in run([*sh, f"{code_file}:1"], root).stdout
    for bad, says in (("nonsense", "not a document id"), ("prose.jsonl:99999", "no such record"),
                      ("missing.txt:1", "no source has a raw file 'missing.txt'")):
        r = run([*sh, bad], root, check=False)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_evidence_card_has_the_drop_table(tmp_path):
    _, layout, stats = project(tmp_path)
    lines = report._drops(stats, layout)
    prose = stats["sources"]["prose"]
    rule, c = next((r, c) for r, c in prose["rules"].items() if c["docs"])
    assert f"| prose | {rule} | {c['docs']:,} | {c['docs'] / prose['docs_in']:.2%} | {c['bytes'] / 1e6:.2f} | " \
           f"`data/clean/prose/dropped/{rule}.jsonl` |" in lines  # a path, as code: never markup
    assert f"| prose | dedup | {prose['dedup']['docs']} |" in "\n".join(lines)


def test_a_clean_stage_killed_while_writing_a_part_loses_nothing(tmp_path):
    """With the rule sets on, a SIGKILL between a part's files and its marker redoes that part only."""
    params, layout, _ = project(tmp_path)
    before = {p: p.read_bytes() for p in sorted(layout.clean.rglob("*")) if p.is_file()}
    for p in layout.clean.rglob("part-00001.json"):
        p.unlink()
    r = run([str(BIN / "shardline"), "stage", "clean"], tmp_path / "p", check=False,
            env=env_for(SHARDLINE_CHAOS="clean.part#1"))
    assert r.returncode == -signal.SIGKILL
    run([str(BIN / "shardline"), "stage", "clean"], tmp_path / "p")
    assert {p: p.read_bytes() for p in sorted(layout.clean.rglob("*")) if p.is_file()} == before


def test_the_readmes_web_and_code_params_are_valid():
    import re

    import yaml

    from shardline import paramsfile
    from tests.conftest import REPO

    table = (REPO / "docs" / "data.md").read_text().split("<table>", 1)[1].split("</table>", 1)[0]
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", table, re.S)]
    assert len(blocks) == 2
    web, code = (paramsfile.parse(b, "README") for b in blocks)
    assert web.clean.near_dedup is not None and web.clean.c4.filter_no_terminal_punct is False
    assert code.clean_for(code.sources[0]).max_line_chars == 1000 and code.clean.gopher_repetition.dup_line_frac is None
