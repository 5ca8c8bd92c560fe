"""What a user sees when input is bad: one clear message, no traceback, nothing half-written."""

from __future__ import annotations

import json

import pytest

from tests.conftest import BIN, init_repo, make_project, run, small_params, write_params

SL = str(BIN / "shardline")


def test_invalid_params_lists_every_problem_without_traceback(tmp_path):
    p = small_params([{"name": "a", "uri": "x", "format": "csv"}], clean={"min_chars": -5, "max_chrs": 1})
    write_params(tmp_path, p)
    r = run([SL, "stage", "clean"], tmp_path, check=False)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "clean.min_chars: must be >= 0, got -5" in r.stderr
    assert "clean.max_chrs: unknown key (did you mean 'max_chars'?)" in r.stderr
    assert "sources[0].format: must be one of" in r.stderr


@pytest.mark.slow
def test_dvc_repro_surfaces_the_same_message(tmp_path):
    init_repo(tmp_path)
    write_params(tmp_path, small_params([{"name": "a", "uri": "x", "format": "txt"}], shard={"seq_len": 0}))
    r = run([str(BIN / "dvc"), "repro"], tmp_path, check=False)
    assert r.returncode != 0
    assert "shard.seq_len: must be >= 1, got 0" in r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_missing_input_names_the_uri(tmp_path):
    write_params(tmp_path, small_params([{"name": "a", "uri": "nowhere/*.txt", "format": "txt"}]))
    r = run([SL, "stage", "download"], tmp_path, check=False)
    assert r.returncode == 2 and "sources[a].uri: 'nowhere/*.txt' matched no files" in r.stderr


def test_params_command_prints_resolved_settings(tmp_path):
    write_params(tmp_path, small_params([{"name": "a", "uri": "x", "format": "txt"}]))
    out = json.loads(run([SL, "params"], tmp_path).stdout)
    assert out["clean"]["normalize"] == "NFC" and out["sources"][0]["text_field"] == "text"


def test_output_into_a_closed_pipe_ends_quietly(tmp_path):
    """`shardline params | head -1`: the reader left early; that is no error of the command's."""
    import subprocess

    from tests.conftest import env_for

    write_params(tmp_path, small_params([{"name": "a", "uri": "x", "format": "txt"}]))
    p = subprocess.Popen([SL, "params"], cwd=tmp_path, env=env_for(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # before it writes: its first write meets no reader (EPIPE)
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 0 and err == "", err


def test_given_tokenizer_json_is_used_as_is(tmp_path, code_dir):
    from shardline.data import download, tokenize, shard, tokenizer
    from shardline.data.clean.stage import run as clean

    params, layout = make_project(tmp_path / "a", [{"name": "c", "uri": str(code_dir), "format": "txt"}])
    for stage in (download, clean, tokenize, shard):
        stage.run(params, layout, log=lambda _: None)
    given = tmp_path / "given.json"
    given.write_bytes((layout.tokenizer / "tokenizer.json").read_bytes())
    params2, layout2 = make_project(tmp_path / "b", [{"name": "c", "uri": str(code_dir), "format": "txt"}],
                                    tokenizer={"path": str(given)})
    for stage in (download, clean, tokenize, shard):
        stage.run(params2, layout2, log=lambda _: None)
    assert (layout2.tokenizer / "tokenizer.json").read_bytes() == given.read_bytes()
    assert json.loads((layout2.tokenizer / "meta.json").read_text())["source"] == str(given)
    a = sorted((layout.shards / "c").glob("shard-*.bin"))
    b = sorted((layout2.shards / "c").glob("shard-*.bin"))
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert tokenizer.load(given).get_vocab_size() == 512


def test_a_malformed_given_tokenizer_json_is_named(tmp_path, code_dir):
    given = tmp_path / "given.json"
    make_project(tmp_path / "p", [{"name": "c", "uri": str(code_dir), "format": "txt"}], tokenizer={"path": str(given)})
    for stage in ("download", "clean"):
        run([SL, "stage", stage], tmp_path / "p")
    for content in (b'{"model": {"type": "BPE"', b'{"version": "1.0"}', b"\xff\xfe not json"):
        given.write_bytes(content)
        r = run([SL, "stage", "tokenize"], tmp_path / "p", check=False)
        assert r.returncode == 2 and "Traceback" not in r.stderr, content
        assert f"error: {given}: cannot load tokenizer.json" in r.stderr and "point to a tokenizer.json" in r.stderr
        assert not (tmp_path / "p/data/tokenizer/tokenizer.json").exists()  # nothing half-made is left as if valid
