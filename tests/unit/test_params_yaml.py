"""The YAML files the line reads, checked as a new user breaks them (issue 44, point 1): a key
given twice at any level of params.yaml (PyYAML keeps the last, silently) is one line naming the
key and both lines; a boolean where a number goes (pydantic took `steps: true` as 1 and YAML reads
yes/no/on/off as booleans) names the field; an unknown key of the mix-search settings gets its
did-you-mean as every other section's does; dvc.yaml that DVC refuses is one line, not DVC's
traceback through the pipeline flow."""

from __future__ import annotations

import shlex
import subprocess

import pytest
import yaml

from shardline.core import yamlfile
from shardline import paramsfile
from shardline.core.errors import ConfigError
from tests.conftest import BIN, REPO

SHIPPED = (REPO / "params.yaml").read_text()


def _load(tmp_path, text: str):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return paramsfile.load(path), path


@pytest.mark.parametrize("text, said", [
    ("train:\n  steps: 3\nmodel: {}\ntrain:\n  lr: 0.1\n", "line 4: train is given twice (first at line 1)"),
    ("train:\n  steps: 3\n  lr: 0.1\n  steps: 30\n", "line 4: train.steps is given twice (first at line 2)"),
    ("sources:\n  - name: code\n    uri: x\n  - name: prose\n    uri: y\n    name: web\n",
     "line 6: sources[1].name is given twice (first at line 4)"),
    ("mix_search:\n  runs: 8\n  bounds: {code: {min: 0.1, min: 0.2}}\n",
     "line 3: mix_search.bounds.code.min is given twice (first at line 3)"),
])
def test_a_key_given_twice_is_one_line_naming_it_and_both_lines(tmp_path, text, said):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, text)
    assert str(e.value) == f"{tmp_path / 'params.yaml'}: {said}; keep one: YAML would silently take the last"


def test_the_shipped_params_and_yaml_merge_keys_read_as_pyyaml_reads_them():
    assert yamlfile.load(SHIPPED) == yaml.safe_load(SHIPPED)
    merged = "base: &b {steps: 3, lr: 0.1}\ntrain:\n  <<: *b\n  steps: 5\n"  # an override, not a repeat
    assert yamlfile.load(merged) == yaml.safe_load(merged) == {"base": {"steps": 3, "lr": 0.1},
                                                               "train": {"steps": 5, "lr": 0.1}}


@pytest.mark.parametrize("path, yaml_value", [("train.steps", "true"), ("clean.max_bad_fraction", "no"),
                                              ("eval.fraction", "off"), ("mix.code", "yes"), ("mix_search.seed", "on")])
def test_a_boolean_where_a_number_goes_is_refused_by_its_field(tmp_path, path, yaml_value):
    params = yaml.safe_load(SHIPPED)
    section, key = path.split(".")
    params[section][key] = "BOOLEAN"
    with pytest.raises(ConfigError) as e:  # YAML 1.1, as PyYAML reads it: yes/no, on/off are booleans
        _load(tmp_path, yaml.safe_dump(params).replace("BOOLEAN", yaml_value))
    value = "true" if yaml_value in ("true", "yes", "on") else "false"
    assert str(e.value).splitlines()[1:] == [f"  {path}: a number is wanted, got {value} (YAML reads true/false, "
                                             "yes/no and on/off as booleans)"], str(e.value)


def test_an_unknown_mix_search_key_gets_its_did_you_mean(tmp_path):
    text = SHIPPED.replace("  model: {n_layer: 1}", "  model: {n_layers: 1}").replace(
        "  target_sources: []", "  target_sources: [cod]").replace("  target: loss", "  target: sources")
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, text)
    assert str(e.value).splitlines()[1:] == ["  mix_search.target_sources: unknown source 'cod' (did you mean 'code'?)",
                                             "  mix_search.model.n_layers: unknown key (did you mean 'n_layer'?)"]
    with pytest.raises(ConfigError) as e:  # a key of a source's bounds: the section under a mapping's key
        _load(tmp_path, SHIPPED.replace("  bounds: {}", "  bounds: {code: {mn: 0.1}}"))
    assert str(e.value).splitlines()[1:] == ["  mix_search.bounds.code.mn: unknown key (did you mean 'min'?)"]


def test_dvc_yaml_that_dvc_refuses_is_one_line_naming_the_file_and_line(tmp_path):
    from shardline import dvcrepo

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run([str(BIN / "dvc"), "init", "-q"], cwd=tmp_path, check=True)
    text = (REPO / "dvc.yaml").read_text()
    (tmp_path / "dvc.yaml").write_text(text.replace("  clean:\n", "  clean:\n    cmd: echo\n  clean:\n", 1))
    line = text.splitlines().index("  clean:") + 3
    with pytest.raises(ConfigError) as e, dvcrepo.open_repo(tmp_path) as repo:
        dvcrepo.stage_order(repo)
    assert str(e.value).startswith(f"dvc.yaml: line {line}: found duplicate key \"clean\"") and \
        str(e.value).endswith("; fix it (DVC refuses the file as it is)"), str(e.value)


def _set_params(command: str) -> list[str]:
    """The -S values of a `dvc exp run` command line, as the shell hands them to DVC."""
    words = shlex.split(command)
    return [words[i + 1] for i, w in enumerate(words) if w == "-S"]


@pytest.mark.parametrize("settings", [
    ["mix.code=0.6", "mix.prose=0.4"],  # the README's experiment
    ["model.n_layer=3"], ["train.steps=300"], ["clean.min_chars=200"],  # docs/experiments.md's
])
def test_dvc_exp_run_set_param_changes_only_the_lines_it_sets(tmp_path, settings):
    """`dvc exp run -S` writes params.yaml through DVC's writer (dvc.utils.hydra.apply_overrides:
    ruamel's round trip, every list replaced whole): the shipped file rewrote 44 lines, its comments
    lost (issue 50). Laid out as that writer writes it, only the lines of the keys set change."""
    from dvc.utils.hydra import apply_overrides

    path = tmp_path / "params.yaml"
    path.write_text(SHIPPED)
    apply_overrides(str(path), settings)
    before, after = SHIPPED.splitlines(), path.read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(after) == len(before) and len(changed) == len(settings), changed
    for setting, (a, b) in zip(settings, changed):  # the key's own line: its value set, its comment kept
        key, value = setting.split("=")
        assert b.split(":")[0] == a.split(":")[0] == " " * (2 * key.count(".")) + key.split(".")[-1]
        assert b.partition(":")[2].partition("#")[0].strip() == value and b.partition("#")[2] == a.partition("#")[2]


def test_the_profile_command_the_card_and_the_log_offer_runs_and_adds_only_its_keys(tmp_path):
    """`train.profile` ships null: DVC refused `-S train.profile.start_step=N` ("Invalid
    `--set-param` value"), and unquoted braces are the shell's brace expansion."""
    from dvc.utils.hydra import apply_overrides

    from shardline.training.throughput import profile_command

    path = tmp_path / "params.yaml"
    path.write_text(SHIPPED)
    apply_overrides(str(path), _set_params(profile_command(120)))
    assert yaml.safe_load(path.read_text())["train"]["profile"] == {"start_step": 120, "steps": 3}
    added = ["    start_step: 120", "    steps: 3"]
    assert [ln for ln in path.read_text().splitlines() if ln not in added] == SHIPPED.splitlines()
