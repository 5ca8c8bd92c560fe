import pytest
import yaml

from shardline.core import config
from shardline import paramsfile
from shardline.core.errors import ConfigError
from tests.conftest import REPO

SRC = {"name": "a", "uri": "x", "format": "txt"}


def problems(raw) -> list[str]:
    with pytest.raises(ConfigError) as e:
        paramsfile.parse(raw)
    return [ln.strip() for ln in str(e.value).splitlines()[1:]]


def test_shipped_params_load():
    p = paramsfile.load(REPO / "params.yaml")
    assert [s.name for s in p.sources] == ["code", "prose"]
    assert p.tokenizer.vocab_size <= 65535


def test_every_problem_reported_at_once_with_dotted_paths():
    got = problems({"sources": [{**SRC, "sha": "1"}], "clean": {"min_chars": -5, "max_chrs": 3, "normalize": "NFD"},
                    "tokenizr": {}, "shard": {"seq_len": 0}})
    assert "clean.min_chars: must be >= 0, got -5" in got
    assert "clean.max_chrs: unknown key (did you mean 'max_chars'?); known rules: url_blocklist, normalize, " \
           "strip_control, whitespace, min_chars, max_chars, max_line_chars, max_repeated_line_fraction, " \
           "min_alpha_fraction, max_replacement_fraction, language, gopher_repetition, gopher_quality, c4, fineweb, " \
           "decontaminate, pii (built in); stage-wide: dedup, near_dedup, drop_samples, max_bad_fraction, part_mb" in got
    assert "sources[0].sha: unknown key (did you mean 'sha256'?)" in got
    assert "tokenizr: unknown key (did you mean 'tokenizer'?)" in got
    assert "shard.seq_len: must be >= 1, got 0" in got
    assert any(g.startswith("clean.normalize: must be one of") for g in got)
    assert len(got) == 6


def test_cross_field_checks_name_the_field():
    assert problems({"sources": [SRC], "mix": {"b": 1.0}}) == [
        "mix: missing source 'a'; give every source a weight", "mix.b: unknown source"]
    assert problems({"sources": [SRC, SRC]}) == ["sources: duplicate name 'a'"]
    assert problems({"sources": [{**SRC, "uri": "hf://x/y"}]}) == \
        ["sources[0].uri: 'hf://x/y': write hf://datasets/<org>/<name>@<revision>/<glob> (files as files, the "
         "revision pinned), or a dataset by name, config and split as `dataset:`"]
    assert problems({"sources": [SRC], "tokenizer": {"eos_token": "<eos>", "bos_token": "<s>"}}) == \
        ["tokenizer.eos_token: '<eos>' must be one of special_tokens ['<|endoftext|>']",
         "tokenizer.bos_token: '<s>' must be one of special_tokens ['<|endoftext|>']"]
    assert problems({"sources": [SRC], "tokenizer": {"bos_token": "<|endoftext|>"}}) == \
        ["tokenizer.bos_token: '<|endoftext|>' is also eos_token; a document boundary needs two different ids, "
         "or leave bos_token unset"]
    # a given tokenizer is checked when the tokenize stage reads it; two given tokenizers are one too many
    assert paramsfile.parse({"sources": [SRC], "tokenizer": {"path": "t.json", "eos_token": "</s>"}}).tokenizer_given \
        == "t.json"
    assert problems({"sources": [SRC], "tokenizer": {"path": "t.json"}, "train": {"init_from": "m"}}) == \
        ["tokenizer.path: train.init_from brings its model's own tokenizer.json, which becomes the line's; remove "
         "tokenizer.path (or train.init_from)"]
    assert problems({"sources": []}) == ["sources: must list at least one source"]


def test_configs_are_frozen():
    p = paramsfile.parse({"sources": [SRC]})
    with pytest.raises(Exception):
        p.clean.min_chars = 3  # type: ignore[misc]


def test_every_field_is_documented():
    sections = config._Section.__subclasses__()  # every section, including ones added later
    assert {config.Params, config.Parts, config.Train, config.Retrain, config.Model} <= set(sections)
    for model in sections:
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"


def test_load_reports_yaml_errors_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        paramsfile.load(tmp_path / "params.yaml")
    (tmp_path / "params.yaml").write_text("sources: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        paramsfile.load(tmp_path / "params.yaml")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(ConfigError, match="must be a mapping"):
        paramsfile.load(tmp_path / "params.yaml")


def test_params_that_are_not_utf8_name_the_line(tmp_path):
    (tmp_path / "params.yaml").write_bytes(b"sources:\n  - name: caf\xe9\n")  # Latin-1, as an editor may save it
    with pytest.raises(ConfigError) as e:
        paramsfile.load(tmp_path / "params.yaml")
    assert str(e.value) == (f"{tmp_path / 'params.yaml'}: line 2: not UTF-8 (byte 0xe9 at offset 22); "
                            "save the file as UTF-8")


@pytest.mark.parametrize("w", [float("inf"), float("-inf"), float("nan"), 0.0])
def test_a_mix_weight_must_be_finite_and_positive(w):
    assert problems({"sources": [SRC], "mix": {"a": w}}) == [f"mix.a: must be a finite number > 0, got {w}"]
    assert problems(yaml.safe_load("{sources: [{name: a, uri: x, format: txt}], mix: {a: .inf}}")) == [
        "mix.a: must be a finite number > 0, got inf"]  # YAML's own spelling


def test_a_section_that_is_not_a_mapping_is_named():
    assert problems({"sources": [SRC], "train": 5}) == [
        "train: input should be a valid dictionary or instance of train, got 5"]
    assert problems({"sources": "x"}) == ["sources: input should be a valid tuple, got 'x'"]
    assert problems({"sources": [SRC], "clean": [1]}) == [
        "clean: input should be a valid dictionary or instance of clean, got [1]"]


@pytest.mark.parametrize("name", ["a/b", "..", "../x", "/abs", ".hidden", "a b", ""])
def test_a_source_name_cannot_leave_its_folder(name):
    assert problems({"sources": [{**SRC, "name": name}]}) == [
        f"sources[0].name: {name!r} must be letters, digits, '_', '-', '.' (it names folders)"]
