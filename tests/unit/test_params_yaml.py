"""The YAML files the line reads, checked as a new user breaks them (issue 44, point 1): a key
given twice at any level of params.yaml (PyYAML keeps the last, silently) is one line naming the
key and both lines; a boolean where a number goes (pydantic took `steps: true` as 1 and YAML reads
yes/no/on/off as booleans) names the field; an unknown key of the mix-search settings gets its
did-you-mean as every other section's does; dvc.yaml that DVC refuses is one line, not DVC's
traceback through the pipeline flow."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from shardline.core import config, yamlfile
from shardline.core.errors import ConfigError
from tests.conftest import BIN, REPO

SHIPPED = (REPO / "params.yaml").read_text()


def _load(tmp_path, text: str):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return config.load(path), path


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
