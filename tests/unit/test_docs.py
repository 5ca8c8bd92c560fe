"""The docs show only what exists.

README.md and docs/*.md are checked against the code as it is, not against a list kept here:
- every `shardline <subcommand> [--flags]` they show (fenced or inline code) is accepted by the
  real argparse parser, found through the `shardline` console script in pyproject.toml (a stage
  is one of shardline.registry's, or one docs/extending.md's example plug-ins add);
- every params key they show (`section.field` in backticks or code, `-S section.field=...`, and
  the keys of a yaml block that is a piece of params.yaml) is a field of the config models,
  walked from `shardline.core.config.Params` (but on a line that quotes an "unknown key" error,
  and the settings of docs/extending.md's example rule);
- every repository path they show (`shardline/...`, `tests/...`, `bench/...`, ...) and every
  `python -m` module exists;
- every relative link resolves, to a file, and to a heading when it names one.
A rename in the code fails here, naming the page and what it shows.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import shlex
import tomllib
import typing
from pathlib import Path
from unittest import mock

import pytest
import yaml
from pydantic import BaseModel

from harness.plugins import guide as plugin_guide
from shardline import registry
from shardline.core import config
from shardline import paramsfile

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"`([^`\n]+)`")
# a file name is not a params key: `model.safetensors`, `train.jsonl`, `eval.json`
FILE_EXTS = {"json", "jsonl", "csv", "png", "pt", "py", "md", "safetensors", "bin", "yaml", "yml", "npy",
             "parquet", "txt", "gz", "zst", "lock", "toml", "html", "next", "part"}
DOTTED = re.compile(r"(?<![\w./\-:@$<])([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+)(?![\w/\-(])")
REPO_PATH = re.compile(r"^(?:shardline|flows|tasks|cli|dvcrepo|harness|bench|tests)/[\w/.\-]*[\w/]$")
COMMAND_START = {"$", "&&", "||", ";", "|", "(", "--no-python", "then", "do"}


def _split(text: str) -> tuple[list[tuple[str, str]], str]:
    """A page as its fenced blocks (language, body) and its prose with the blocks taken out."""
    return [(m[1], m[2]) for m in FENCE.finditer(text)], FENCE.sub("", text)


def _code(text: str) -> list[str]:
    """Every line of code a page shows: the lines of its fenced blocks (yaml aside), its inline spans."""
    blocks, prose = _split(text)
    lines = [ln for lang, body in blocks if lang not in ("yaml", "yml") for ln in body.splitlines()]
    return lines + INLINE.findall(prose)


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return {str(p.relative_to(REPO)): p.read_text() for p in PAGES}


# -- commands ------------------------------------------------------------------------------------


def _cli() -> argparse.ArgumentParser:
    """The parser the `shardline` console script builds, caught as its main() parses."""
    target = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["shardline"]
    module, _, func = target.partition(":")
    main = getattr(importlib.import_module(module), func)

    class Built(Exception):
        pass

    def catch(self, *args, **kwargs):
        raise Built(self)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", catch), \
            mock.patch.object(argparse.ArgumentParser, "parse_known_args", catch):
        try:
            main(["--help"])
        except Built as built:
            return built.args[0]
    raise AssertionError(f"{target} did not parse its arguments with argparse")


def _subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a.choices for a in p._actions if isinstance(a, argparse._SubParsersAction))


def _takes_value(p: argparse.ArgumentParser, option: str) -> bool:
    action = p._option_string_actions[option]
    return action.nargs != 0


def _command_problems(line: str, cli: argparse.ArgumentParser) -> list[str]:
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote in prose-like code: words are enough
        words = line.split("#", 1)[0].split()
    subs, problems = _subcommands(cli), []
    for i, word in enumerate(words):
        if word != "shardline" or (i and words[i - 1] not in COMMAND_START):
            continue
        rest = words[i + 1:]
        while rest and rest[0].startswith("-"):  # the command's own options: --root DIR, --params FILE
            opt = rest.pop(0).split("=", 1)[0]
            if opt not in cli._option_string_actions:
                problems.append(f"shardline {opt}: no such option")
            elif "=" not in opt and _takes_value(cli, opt) and rest:
                rest.pop(0)
        if not rest or not re.fullmatch(r"[a-z][a-z-]*", rest[0]):  # `shardline`, `shardline <subcommand>`
            continue
        name, args = rest[0], rest[1:]
        if name not in subs:
            problems.append(f"shardline {name}: no such subcommand (has {', '.join(subs)})")
            continue
        sub = subs[name]
        end = next((k for k, a in enumerate(args) if a in COMMAND_START or a in (">", "<", "2>&1")), len(args))
        args = args[:end]
        for arg in args:
            opt = arg.split("=", 1)[0]
            if arg.startswith("-") and opt not in sub._option_string_actions:
                problems.append(f"shardline {name} {opt}: no such option")
        choices = [a.choices for a in sub._actions if not a.option_strings and a.choices]
        if name == "stage":  # the built-in stages, and those the guide's plug-ins add
            choices = [(*registry.NAMES, *_guide_names("stages"))]
        plain = [a for a in args if not a.startswith("-")]
        if choices and plain and re.fullmatch(r"[a-z][a-z_-]*", plain[0]) and plain[0] not in choices[0]:
            problems.append(f"shardline {name} {plain[0]}: not one of {', '.join(choices[0])}")
    return problems


def test_every_command_the_docs_show_exists(pages):
    cli = _cli()
    problems = [f"{page}: {p}" for page, text in pages.items() for line in _code(text)
                for p in _command_problems(line, cli)]
    assert not problems, "\n".join(problems)


def test_the_command_check_catches_an_invented_command():
    cli = _cli()
    assert _command_problems("shardline stage clean --run-id x", cli) == []
    assert _command_problems("shardline frobnicate latest", cli)
    assert _command_problems("shardline eval latest --frobnicate", cli)
    assert _command_problems("shardline stage frobnicate", cli)
    assert _command_problems("torchrun --no-python shardline --root /p stage train --nope", cli)


# -- params keys ---------------------------------------------------------------------------------


def _models(annotation) -> tuple[list[type[BaseModel]], bool]:
    """The config models a field holds, and whether it is a free mapping (mix: any source name)."""
    models, free, todo = [], False, [annotation]
    while todo:
        a = todo.pop()
        if isinstance(a, type) and issubclass(a, BaseModel):
            models.append(a)
        elif a is dict or typing.get_origin(a) is dict:
            free = True
        else:
            todo.extend(x for x in typing.get_args(a) if not isinstance(x, (str, int, float, bool)))
    return models, free


def _guide_names(group: str) -> set[str]:
    """What docs/extending.md's example plug-ins add to `group`: the pages may show them in use."""
    return {n for ex in plugin_guide().values() for n in ex.entry_points.get(f"shardline.{group}", {})}


def _key_problem(key: str) -> str | None:
    models: list[type[BaseModel]] = [paramsfile.schema()]
    parts = key.split(".")
    if parts[0] == "clean" and len(parts) > 1 and parts[1] in _guide_names("rules"):
        return None  # a setting of the guide's own rule
    for i, part in enumerate(parts):
        field = next((m.model_fields[part] for m in models if part in m.model_fields), None)
        if field is None:
            known = sorted({f for m in models for f in m.model_fields})
            return f"{key}: no field {part!r} at {'.'.join(parts[:i]) or 'the top'} (has {', '.join(known)})"
        models, free = _models(field.annotation)
        if free:
            return None
        if not models and i < len(parts) - 1:
            return f"{key}: {'.'.join(parts[:i + 1])} is a value, not a section"
    return None


def _sections() -> set[str]:
    """The words that start a params key: today's sections, and any the config knows by an old name
    (so a page still showing the old name fails here instead of passing as plain text)."""
    return set(paramsfile.schema().model_fields) | set(getattr(config, "RENAMED", {}))


def _is_key(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] in _sections() and not FILE_EXTS & set(parts[1:])


def _yaml_keys(node, prefix: str = ""):
    if isinstance(node, dict):
        for k, v in node.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            yield path
            yield from _yaml_keys(v, path)
    elif isinstance(node, list):
        for item in node:
            yield from _yaml_keys(item, prefix)


def _keys_shown(text: str) -> set[str]:
    blocks, _ = _split(text)
    lines = [ln for ln in _code(text) if "unknown key" not in ln]  # an error message shows a wrong key on purpose
    keys = {k for line in lines for k in DOTTED.findall(line) if _is_key(k)}
    keys |= {k for line in _code(text) for k in re.findall(r"-S\s+'?\"?([\w.]+)=", line)}
    for lang, body in blocks:
        if lang not in ("yaml", "yml"):
            continue
        try:
            doc = yaml.safe_load(body)
        except yaml.YAMLError:
            continue
        if isinstance(doc, dict) and doc and set(doc) <= _sections():  # a piece of params.yaml
            keys |= set(_yaml_keys(doc))
    return keys


def test_every_params_key_the_docs_show_exists(pages):
    problems = [f"{page}: {p}" for page, text in pages.items() for k in sorted(_keys_shown(text))
                if (p := _key_problem(k))]
    assert not problems, "\n".join(problems)


def test_the_key_check_catches_an_invented_key():
    assert _key_problem("train.steps") is None and _key_problem("mix.anything") is None
    assert _key_problem("sources.name") is None
    assert _key_problem("train.stepz") and _key_problem("train.steps.more")
    page = "Set `loader.seedz` or\n```sh\ndvc exp run -S model.n_layerz=3\n```\n```yaml\nshard:\n  seq_lenz: 8\n```\n"
    assert {k for k in _keys_shown(page) if _key_problem(k)} == {"loader.seedz", "model.n_layerz", "shard.seq_lenz"}
    assert _keys_shown("`train.jsonl`, `model.safetensors`, `data/metrics/eval.json`") == set()


# -- paths, modules and links --------------------------------------------------------------------


def test_every_repository_path_and_module_the_docs_show_exists(pages):
    problems = []
    for page, text in pages.items():
        for span in _code(text):
            for word in span.split():
                word = word.strip("(),;:'\"")
                if REPO_PATH.match(word) and not (REPO / word).exists():
                    problems.append(f"{page}: {word}: no such file")
            for module in re.findall(r"python -m ([\w.]+)", span):
                if module.split(".")[0] in ("bench", "harness", "shardline", "flows", "tasks") \
                        and importlib.util.find_spec(module) is None:
                    problems.append(f"{page}: python -m {module}: no such module")
    assert not problems, "\n".join(problems)


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lowercased, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", _split(text)[1], re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        if n:
            seen[f"{slug}-{n}"] = 1
    return set(seen)


def test_every_relative_link_resolves(pages):
    problems = []
    for page, text in pages.items():
        here = (REPO / page).parent
        for target in re.findall(r"\]\(([^)\s]+)\)", _split(text)[1]):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (here / path).resolve() if path else REPO / page
            if not file.exists():
                problems.append(f"{page}: ({target}): no such file")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text()):
                problems.append(f"{page}: ({target}): no such heading in {file.relative_to(REPO)}")
    assert not problems, "\n".join(problems)


def sections_pointed_at(text: str) -> list[tuple[str, str]]:
    """(page, section) for every `README "Section"` or `docs/page.md ("Section")` a file points at."""
    return [(page, section) for page, section in re.findall(r'(README|docs/[\w.-]+\.md),? \(?"([^"]+)"', text)]


def test_every_section_the_settings_point_to_exists():
    """params.yaml and pyproject.toml pointed at a README "Curation" section that never existed
    (issue 50): a section named there is a heading of that page."""
    problems = []
    for name in ("params.yaml", "pyproject.toml"):
        for page, section in sections_pointed_at((REPO / name).read_text()):
            page = "README.md" if page == "README" else page
            heads = re.findall(r"^#+ (.+)$", (REPO / page).read_text(), re.M)
            if not any(h.startswith(section) for h in heads):
                problems.append(f'{name}: {page} has no section "{section}"')
    assert not problems, "\n".join(problems)
    assert sections_pointed_at('README "Curation" shows') == [("README", "Curation")]  # the old pointer, caught


def test_the_architecture_names_every_module():
    """docs/architecture.md's layer map names every module of the tree (a new module is placed in
    it, or this fails), in the block of its package."""
    text = (REPO / "docs" / "architecture.md").read_text()
    block = text[text.index("## Layers"):text.index("## The stage frame")]
    unnamed = [str(p.relative_to(REPO)) for top in ("shardline", "harness")
               for p in sorted((REPO / top).rglob("*.py"))
               if p.name != "__init__.py" and not re.search(rf"\b{p.stem}\b", block)]
    assert not unnamed, f"docs/architecture.md, Layers, does not name: {', '.join(unnamed)}"
