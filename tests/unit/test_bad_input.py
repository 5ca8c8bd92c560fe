"""The bad-input matrix: every case gives a clear message (file/field/shard named, remedy given)
or a counted quarantine, and nothing valid is lost or overwritten.

| case                               | where it is tested                                             |
|------------------------------------|----------------------------------------------------------------|
| malformed JSONL                    | test_readers::test_jsonl_bad_records..., test_clean::test_bad_records... |
| invalid UTF-8                      | test_readers::test_invalid_utf8..., ::test_lone_surrogate...    |
| empty and huge files (50 MB line)  | test_clean::test_huge_single_line_and_empty_files...           |
| binary garbage                     | here: test_binary_garbage_is_quarantined_by_rules              |
| truncated parquet                  | test_readers::test_parquet_column_and_damage                   |
| wrong sha256                       | test_download::test_wrong_sha256..., test_http::test_wrong_sha256... |
| HTTP 404 / server never answers    | test_http::test_404..., ::test_silent_server_times_out, test_retries |
| corrupt shard                      | test_loader::test_corrupt_shard..., test_shard::test_verify...  |
| torn checkpoint                    | test_train::test_torn_checkpoints..., test_checkpoint::test_validity... |
| full disk at the k-th fsync        | here: test_enospc_at_the_kth_fsync_* (clean, tokenize, shard stages, checkpoint) |
| invalid params.yaml                | test_config, test_cli::test_invalid_params...                  |
| params.yaml not UTF-8              | test_config::test_params_that_are_not_utf8_name_the_line       |
| a params section not a mapping     | test_config::test_a_section_that_is_not_a_mapping_is_named     |
| mix naming an unknown source       | test_config::test_cross_field_checks..., test_loader (Schedule) |
| mix weight .inf / NaN / 0          | test_config::test_a_mix_weight_must_be_finite_and_positive     |
| source name with / or ..           | test_config::test_a_source_name_cannot_leave_its_folder        |
| NUL bytes in JSONL                 | test_readers::test_nul_bytes_in_jsonl                          |
| one huge JSONL line (30 MB)        | test_clean::test_one_huge_jsonl_line_is_dropped...             |
| malformed tokenizer.json (path)    | test_cli::test_a_malformed_given_tokenizer_json_is_named       |
| checkpoint of another model shape  | test_train::test_a_checkpoint_of_another_model_shape...        |
| export of an invalid checkpoint    | test_export::test_refusals_exit_2_with_one_line_and_write_nothing |
| a mistyped SHARDLINE_FAULTS plan   | test_guard::test_a_mistyped_fault_plan_is_refused_not_ignored  |
| resume with changed data           | test_train::test_lineage_refuses..., ::test_changed_shards...   |
| checkpoint crafted to run code     | test_checkpoint::test_malicious_pickle_is_not_executed         |
| archive entry with ../             | not applicable: archives are not a supported source format     |
| OSError on a path a user chose     | here: test_each_errno_is_one_line..., test_an_unwritable_* (export OUT_DIR, push-shards, loader.cache_dir, full cache disk); test_cli_errors (CLI) |
| loader.shards_uri scheme / extra   | here: test_a_shards_uri_*                                      |
| train.checkpoint_uri not a URL / scheme | here: test_a_checkpoint_uri_*                             |
| sources[].uri scheme               | here: test_a_source_uri_of_an_unknown_scheme_is_refused_by_its_field |
| streaming node without data/tokenizer | here: test_a_streaming_node_without_data_tokenizer_is_told_to_copy_it |
| explain after a killed clean stage | here: test_explain_after_a_clean_stage_killed_before_its_selections |
| a checkpoint that does not exist   | test_cli_errors::test_every_subcommand_on_a_checkpoint_that_does_not_exist... |
| every subcommand on broken inputs  | test_cli_errors (no params.yaml, not a mapping, empty project, unwritable output) |
| eval.tasks / --tasks: bad name, file | test_cli_errors::test_eval_tasks_that_name_no_task..., test_tasks::test_a_bad_eval_tasks... |
| eval.tasks settings (twice, eval off) | here: test_eval_tasks_settings_are_refused_by_their_field |
| downstream tasks without lm-eval   | here: test_downstream_tasks_without_lm_eval_name_the_extra     |
| a file the line wrote, damaged     | test_written_back (each reader), test_cli_errors::..._cut_short (every subcommand) |
| params.yaml: a key twice, a boolean for a number | test_params_yaml, test_cli_errors::..._a_key_given_twice_... |
| raw damage read past, said out loud | test_damage_said, test_damage_logged (Prefect's log)           |
| random damage to every raw format  | test_damage_properties (hypothesis)                            |

By command and stage, with every cell named: docs/testing.md, "Broken inputs and faults, by command".
"""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from harness.projects import lineage_of
from shardline.core import fsio, shardformat
from shardline.data import download, tokenize, shard
from shardline.data.clean.stage import run as clean
from shardline.training import checkpoint
from shardline.core import errors
from shardline import paramsfile
from shardline.core.errors import BadInput, PathError
from tests.conftest import REPO, make_project, small_params, stdlib_files
from tests.unit.test_shard import fake_tokens


def test_binary_garbage_is_quarantined_by_rules(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (d / "garbage.bin.txt").write_bytes(random.Random(7).randbytes(200_000))  # seeded: the same garbage every run
    (d / "ok.txt").write_text("A perfectly ordinary document about the weather, long enough to keep.\n")
    params, layout = make_project(tmp_path / "p", [{"name": "t", "uri": str(d), "format": "txt"}])
    download.run(params, layout, log=lambda _: None)
    stats = clean.run(params, layout, log=lambda _: None)["sources"]["t"]
    assert stats["docs_out"] == 1 and stats["invalid_utf8"] == 1
    dropped = {k: v["docs"] for k, v in stats["rules"].items() if v["docs"]}
    assert sum(dropped.values()) == 1, dropped  # counted under the rule that caught it


def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _fsync_fails_at(k: int, real=os.fsync):
    """An fsync that fails with ENOSPC from its k-th call on: a disk that fills up partway."""
    calls = [0]

    def fsync(fd):
        calls[0] += 1
        if calls[0] >= k:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)
    return fsync


def _files(root) -> dict:
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 12, 16, 19, 20])  # a rewrite of these 8 + 1 shards fsyncs 20 times
def test_enospc_at_the_kth_fsync_of_the_shard_stage_never_mixes_old_and_new(tmp_path, monkeypatch, k):
    params, layout = make_project(tmp_path / "p", [{"name": "s", "uri": "x", "format": "txt"}],
                                  shard={"seq_len": 15, "target_mb": 0.002})
    fake_tokens(layout, "s", [5000])
    shard.run(params, layout, log=lambda _: None)
    out = layout.shards / "s"
    old_index = (out / "index.json").read_bytes()
    fake_tokens(layout, "s", [5000], seed=1)  # new tokens: every shard must be rewritten
    monkeypatch.setattr(fsio.os, "fsync", _fsync_fails_at(k))
    with pytest.raises(OSError, match="No space left"):
        shard.run(params, layout, log=lambda _: None)
    monkeypatch.undo()
    for side in (out, out / "val"):
        # an index, old or new, verifies against the shards beside it: it never vouches for a mix; no
        # index at all (the switch under way) is refused by the loader by name (test_loader)
        if (side / "index.json").exists():
            shardformat.verify(side)
    if k <= 8:  # the disk filled while the new training shards were staged: the old ones still serve
        assert (out / "index.json").read_bytes() == old_index
    assert not [p for p in out.rglob("*") if fsio.TMP_MARK in p.name]  # no temp left behind
    shard.run(params, layout, log=lambda _: None)  # space again: the run completes, as one never failed
    ref, ref_layout = make_project(tmp_path / "ref", [{"name": "s", "uri": "x", "format": "txt"}],
                                   shard={"seq_len": 15, "target_mb": 0.002})
    fake_tokens(ref_layout, "s", [5000], seed=1)
    shard.run(ref, ref_layout, log=lambda _: None)
    assert _files(out) == _files(ref_layout.shards / "s")


def _clean_project(root, src, vocab=512, **clean_opts):
    params, layout = make_project(root, [{"name": "code", "uri": str(src), "format": "txt"}],
                                  clean={"part_mb": 0.02, **clean_opts}, eval={"fraction": 0.1, "min_docs": 1},
                                  tokenizer={"vocab_size": vocab})
    download.run(params, layout, log=lambda _: None)
    return params, layout


@pytest.fixture(scope="module")
def code_src(tmp_path_factory):
    src = tmp_path_factory.mktemp("code")
    for f in stdlib_files(12):
        (src / f"{f.parent.name}_{f.name}").write_bytes(f.read_bytes())
    return src


@pytest.mark.parametrize("k", [1, 4, 9, 14, 19])  # a rewrite of these 5 parts fsyncs about 20 times
def test_enospc_at_the_kth_fsync_of_the_clean_stage_never_mixes_old_and_new(tmp_path, monkeypatch, k, code_src):
    params, layout = _clean_project(tmp_path / "p", code_src)
    clean.run(params, layout, log=lambda _: None)
    parts = sorted((layout.clean / "code").glob("part-*.parquet"))
    old = {p: clean.part_meta(p)["key"] for p in parts}
    params, layout = _clean_project(tmp_path / "p", code_src, min_chars=40)  # every part's key changes
    monkeypatch.setattr(fsio.os, "fsync", _fsync_fails_at(k))
    with pytest.raises(OSError, match="No space left"):
        clean.run(params, layout, log=lambda _: None)
    monkeypatch.undo()
    assert not [p for p in layout.clean.rglob("*") if fsio.TMP_MARK in p.name]
    for part in parts:  # tokenize reads a part only through its selection: old and whole, or refused by name
        try:
            clean.read_selection(part)
        except BadInput as e:
            assert "re-run 'dvc repro clean'" in str(e)
        else:
            assert clean.part_meta(part)["key"] == old[part]
    clean.run(params, layout, log=lambda _: None)  # space again: as if it had never failed
    ref, ref_layout = _clean_project(tmp_path / "ref", code_src, min_chars=40)
    clean.run(ref, ref_layout, log=lambda _: None)
    assert _files(layout.clean) == _files(ref_layout.clean)


def test_token_parts_count_each_side_once_in_the_progress(tmp_path, code_src):
    params, layout = _clean_project(tmp_path / "p", code_src)
    clean.run(params, layout, log=lambda _: None)
    parts = tokenize.clean_parts(params, layout)
    _, tmeta = tokenize.prepare_tokenizer(params, layout, parts, log=lambda _: None)
    jobs = tokenize.plan(params, layout, parts, tokenize.Recipe("", "", "hf"), tmeta)
    whole = sum(p.stat().st_size for ps in parts.values() for p in ps)
    # the held-out side was counted at its whole part's size, so progress read more bytes than there are
    assert any(j.work.side == "val" for j in jobs) and whole - len(jobs) <= sum(j.size for j in jobs) <= whole


@pytest.mark.parametrize("k", [1, 3, 8, 17, 30])  # a new tokenizer and 5 parts (2 sides): 34 fsyncs
def test_enospc_at_the_kth_fsync_of_the_tokenize_stage_never_mixes_old_and_new(tmp_path, monkeypatch, k, code_src):
    params, layout = _clean_project(tmp_path / "p", code_src)
    clean.run(params, layout, log=lambda _: None)
    tokenize.run(params, layout, log=lambda _: None)
    params, layout = _clean_project(tmp_path / "p", code_src, vocab=600)  # a new tokenizer: every part changes
    monkeypatch.setattr(fsio.os, "fsync", _fsync_fails_at(k))
    with pytest.raises(OSError, match="No space left"):
        tokenize.run(params, layout, log=lambda _: None)
    monkeypatch.undo()
    assert not [p for p in layout.data.rglob("*") if fsio.TMP_MARK in p.name]
    tok_sha = fsio.sha256_file(layout.tokenizer / "tokenizer.json")
    for side in (layout.tokens / "code", layout.tokens / "code" / "val"):
        if (side / "index.json").exists():  # an index left stands for whole parts of the tokenizer on disk
            index = fsio.read_json(side / "index.json")
            assert index["tokenizer_sha256"] == tok_sha
            assert all(fsio.sha256_file(side / e["file"]) == e["sha256"] for e in index["parts"])
        else:  # none: the shard stage refuses the source by name
            with pytest.raises(BadInput, match=r"index.json: missing.*re-run 'dvc repro tokenize'"):
                shard.run(params, layout, log=lambda _: None)
    tokenize.run(params, layout, log=lambda _: None)
    ref, ref_layout = _clean_project(tmp_path / "ref", code_src, vocab=600)
    clean.run(ref, ref_layout, log=lambda _: None)
    tokenize.run(ref, ref_layout, log=lambda _: None)
    for d in ("tokens", "tokenizer"):
        assert _files(layout.data / d) == _files(ref_layout.data / d)


@pytest.mark.parametrize("k", [1, 2, 4, 6])
def test_enospc_at_the_kth_fsync_of_a_checkpoint_keeps_the_last_valid(tmp_path, monkeypatch, k):
    model = torch.nn.Linear(4, 4)
    files = {"model.pt": model.state_dict(), "optimizer.pt": {"x": torch.ones(3)}, "rng.pt": torch.zeros(2)}
    lin = lineage_of(tmp_path)
    checkpoint.save(tmp_path, 1, files, {"step": 1}, lin)
    monkeypatch.setattr(checkpoint.os, "fsync", _fsync_fails_at(k))
    with pytest.raises(OSError):
        checkpoint.save(tmp_path, 2, files, {"step": 2}, lin)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["step-000000001"]  # no half-written step-2, no temp dir
    assert checkpoint.latest_valid(tmp_path, lambda _: None).name == "step-000000001"


# -- every OSError on a path a user chose is one line naming it and what to do (issue 28) ---------

UNWRITABLE = "/sys/kernel/shardline-test"  # mkdir there is refused for real: EPERM as root, EACCES otherwise


@pytest.mark.parametrize("code, line", [
    (errno.EACCES, "OUT_DIR /o: permission denied; pick a path you may use, or fix its permissions"),
    (errno.EPERM, "OUT_DIR /o: operation not permitted; pick another path (this one refuses it whatever its "
                  "permissions)"),
    (errno.EROFS, "OUT_DIR /o: read-only file system; pick a path on a writable file system"),
    (errno.EDQUOT, "OUT_DIR /o: disk quota exceeded; free space under your quota (or have it raised), or pick a "
                   "path on another file system, and re-run the same command"),
    (errno.ENOSPC, "no space left on the device while writing OUT_DIR /o; free space and re-run the same command "
                   "(finished parts and the last valid checkpoint are kept; nothing half-written is)"),
    (errno.EIO, "OUT_DIR /o: Input/output error (/o/.x.tmp-1); re-run the same command (the fault may pass)"),
], ids=["EACCES", "EPERM", "EROFS", "EDQUOT", "ENOSPC", "EIO"])
def test_each_errno_is_one_line_naming_the_path_and_what_to_do(code, line):
    # each errno's line, as a user reads it; EROFS and ENOSPC also happen for real, on small tmpfs mounts,
    # in tests/integration/test_disk_faults.py (EDQUOT and, as root, EACCES cannot be made to happen here)
    e = OSError(code, os.strerror(code), "/o/.x.tmp-1")
    assert errors.os_error_line(e, "/o", "OUT_DIR") == line
    with pytest.raises(PathError) as got:
        with errors.on_path("/o", "OUT_DIR"):
            raise e
    assert str(got.value) == line and got.value.transient == (code == errno.EIO)  # EIO is retried


def test_an_unwritable_export_dir_is_one_line_naming_out_dir(tmp_path):
    from shardline.results import export

    params, layout = _trained(tmp_path)
    ckpt = checkpoint.latest_valid(layout.checkpoints, lambda _: None)
    with pytest.raises(PathError, match=rf"^OUT_DIR {UNWRITABLE}: (operation not permitted|permission denied); "):
        export.export(ckpt, Path(UNWRITABLE), layout)
    assert not Path(UNWRITABLE).exists()


def test_an_unwritable_push_shards_target_is_one_line_naming_it(tmp_path):
    from shardline.stream import remote

    params, layout = _sharded(tmp_path)
    with pytest.raises(PathError, match=rf"^push-shards {UNWRITABLE}: (operation not permitted|permission denied)"):
        remote.upload_shards(layout.shards, UNWRITABLE, ["s"], log=lambda _: None)
    # a local folder that is not there yet is made, not refused
    assert remote.upload_shards(layout.shards, str(tmp_path / "store" / "shards"), ["s"], log=lambda _: None) > 1


def test_an_unwritable_cache_dir_is_one_line_naming_the_field(tmp_path):
    from shardline.stream.loader import Loader

    params, layout = _sharded(tmp_path, loader={"shards_uri": f"file://{tmp_path / 'p' / 'data' / 'shards'}",
                                                "cache_dir": UNWRITABLE})
    with pytest.raises(PathError, match=rf"^loader.cache_dir {UNWRITABLE}: (operation not permitted|permission denied)"):
        next(iter(Loader.from_params(params, layout)))


def test_a_full_disk_under_the_cache_is_one_line_naming_the_cache_not_the_network(tmp_path, monkeypatch):
    from shardline.stream.loader import Loader

    params, layout = _sharded(tmp_path, loader={"shards_uri": f"file://{tmp_path / 'p' / 'data' / 'shards'}",
                                                "cache_dir": str(tmp_path / "cache")})
    monkeypatch.setattr(fsio.os, "fsync", _enospc)  # the cache's disk fills as the first shard arrives
    with pytest.raises(PathError, match=rf"^no space left on the device while writing loader.cache_dir "
                                        rf"{tmp_path / 'cache'}; free space"):
        next(iter(Loader.from_params(params, layout)))


def test_a_shards_uri_of_an_unknown_scheme_is_refused_by_its_field(tmp_path):
    raw = small_params([{"name": "s", "uri": "x", "format": "txt"}], loader={"shards_uri": "foo://bucket/x"})
    with pytest.raises(errors.ConfigError, match=r"loader.shards_uri: 'foo://bucket/x': foo:// is not a scheme "
                                                  r"fsspec knows"):
        paramsfile.parse(raw)


@pytest.mark.parametrize("uri, said", [
    ("data/elsewhere", "'data/elsewhere' is not a URL; give s3://bucket/prefix (or gs://, file://...), or leave "
                       "it unset for data/checkpoints (on a filesystem every node shares)"),
    ("foo://bucket/x", "'foo://bucket/x': foo:// is not a scheme fsspec knows; use s3://, gs://, file:// or "
                       "another fsspec URL")])
def test_a_checkpoint_uri_that_no_store_can_take_is_refused_by_its_field(uri, said):
    raw = small_params([{"name": "s", "uri": "x", "format": "txt"}], train={"checkpoint_uri": uri})
    with pytest.raises(errors.ConfigError) as e:
        paramsfile.parse(raw)
    assert str(e.value).splitlines()[1:] == [f"  train.checkpoint_uri: {said}"]


def test_a_source_uri_of_an_unknown_scheme_is_refused_by_its_field():
    raw = small_params([{"name": "s", "uri": ["/data/a.txt", "foo://bucket/x"], "format": "txt"}])
    with pytest.raises(errors.ConfigError, match=r"sources\[0\]\.uri: 'foo://bucket/x': foo:// is not a scheme "
                                                  r"fsspec knows"):
        paramsfile.parse(raw)


def test_a_shards_uri_whose_extra_is_missing_names_the_extra():
    # s3fs is installed here; a fresh interpreter where importing it fails stands for one without [s3]
    code = ("import sys; sys.modules['s3fs'] = None\n"
            "from shardline import paramsfile\nfrom shardline.core import config\n"
            "from tests.conftest import small_params\n"
            "p = small_params([{'name': 's', 'uri': 'x', 'format': 'txt'}], loader={'shards_uri': 's3://b/shards'})\n"
            "try:\n    paramsfile.parse(p)\nexcept config.ConfigError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert "loader.shards_uri: 's3://b/shards': s3:// needs a package that is not installed here; " \
           "pip install 'shardline[s3]'" in out.stdout, out.stdout + out.stderr


def test_a_streaming_node_without_data_tokenizer_is_told_to_copy_it(tmp_path):
    from shardline.training.network import Network

    params, layout = make_project(tmp_path / "node", [{"name": "s", "uri": "x", "format": "txt"}],
                                  loader={"shards_uri": "file:///elsewhere/shards"})
    with pytest.raises(BadInput, match=r"^data/tokenizer/meta.json: missing; this node streams its shards "
                                       r"\(loader.shards_uri\) but still needs data/tokenizer/ .*copy that folder"):
        Network.for_run(params, layout, 64)


def test_explain_after_a_clean_stage_killed_before_its_selections(tmp_path, code_src):
    from shardline.data.clean.stage import explain

    params, layout = _clean_project(tmp_path / "p", code_src)
    clean.run(params, layout, log=lambda _: None)
    part = sorted((layout.clean / "code").glob("part-*.parquet"))[0]
    doc = pq.read_table(part, columns=["id"]).column("id")[0].as_py()
    assert explain.explain(params, layout, doc)["verdict"] == "kept"
    for sel in (layout.clean / "code").glob("*.split.json"):
        sel.unlink()  # as a clean stage killed after its parts, before phase 2 wrote their selections
    with pytest.raises(BadInput, match=r"split.json: missing \(the clean stage did not finish\); re-run 'dvc repro "
                                       r"clean'"):
        explain.explain(params, layout, doc)


def _sharded(tmp_path, **sections):
    params, layout = make_project(tmp_path / "p", [{"name": "s", "uri": "x", "format": "txt"}],
                                  shard={"seq_len": 15, "target_mb": 0.002}, **sections)
    fake_tokens(layout, "s", [5000])
    shard.run(params, layout, log=lambda _: None)
    return params, layout


def _trained(tmp_path):
    """A real checkpoint of a tiny model over real shards (the line's own stages, in-process)."""
    from shardline.context import RunContext
    from shardline.training import train

    params, layout = _clean_project(tmp_path / "p", _code(tmp_path))
    for stage in (clean, tokenize, shard):
        stage.run(params, layout, log=lambda _: None)
    train.run(params, layout, RunContext(log=lambda _: None))
    return params, layout


def _code(tmp_path):
    src = tmp_path / "code"
    src.mkdir()
    for f in stdlib_files(12):
        (src / f"{f.parent.name}_{f.name}").write_bytes(f.read_bytes())
    return src


def test_eval_tasks_settings_are_refused_by_their_field():
    for section, line in (({"tasks": ["arc_easy", "arc_easy"]}, r"eval\.tasks\[1\]: 'arc_easy' is listed twice"),
                          ({"tasks": ["arc_easy"], "every": 0}, r"eval\.tasks: task results join the held-out eval at "
                                                                r"checkpoints, which eval\.every: 0 turns off"),
                          ({"tasks_every": 0}, r"eval\.tasks_every: must be >= 1, got 0")):
        with pytest.raises(errors.ConfigError, match=line):
            paramsfile.parse(small_params([{"name": "s", "uri": "x", "format": "txt"}], eval=section))


def test_downstream_tasks_without_lm_eval_name_the_extra():
    # lm-eval is installed here (dev extra); a fresh interpreter where importing it fails stands for one
    # without [tasks]
    code = ("import sys; sys.modules['lm_eval'] = None\n"
            "from pathlib import Path\n"
            "from shardline.core.extras import MissingExtra\n"
            "from shardline.training.downstream import Tasks\n"
            "try:\n    Tasks.open(['arc_easy'], Path('.'), 'eval.tasks[{i}]')\nexcept MissingExtra as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.stdout == "eval.tasks needs lm-evaluation-harness: pip install 'shardline[tasks]'\n", out.stdout + out.stderr
