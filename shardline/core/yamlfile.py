"""params.yaml parsed as YAML, a key given twice refused.

PyYAML's safe loader keeps the last of two equal keys in a mapping without a word: a second
`train:` section, or a `steps:` repeated further down a section, silently replaces the first and
the run trains on what the user did not read. `load(text, origin)` parses like `yaml.safe_load`
but raises ConfigError naming the key, where it is (its dotted path) and both lines; everything
else (syntax errors included) is yaml.safe_load's.
"""

from __future__ import annotations

from typing import Any

import yaml

from shardline.core.errors import ConfigError
from shardline.core.filenames import PARAMS


class _Unique(yaml.SafeLoader):
    """A SafeLoader whose mappings refuse a key given twice (`origin`: the file, for the message)."""

    origin = PARAMS
    constructed_root: yaml.Node | None = None  # the document, to name where a repeated key is

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` merges, it repeats nothing
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: construct_mapping says so below
                continue
            if first is not None:
                raise ConfigError(f"{self.origin}: line {key_node.start_mark.line + 1}: {_path(self, node, key)} "
                                  f"is given twice (first at line {first.start_mark.line + 1}); keep one: YAML "
                                  "would silently take the last")
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def _path(loader: _Unique, node: yaml.MappingNode, key: Any) -> str:
    """The dotted path of `key` in mapping `node`, from the document's root (sections, list items)."""
    names = [str(key)]
    root = loader.constructed_root
    trail = _trail(root, node) if root is not None else None
    return ".".join([*trail, *names]).replace(".[", "[") if trail else names[0]


def _trail(at: yaml.Node, target: yaml.Node) -> list[str] | None:
    if at is target:
        return []
    children = (at.value if isinstance(at, yaml.MappingNode) else
                [(None, v) for v in at.value] if isinstance(at, yaml.SequenceNode) else [])
    for i, (k, v) in enumerate(children):
        found = _trail(v, target)
        if found is not None:
            return [k.value if k is not None else f"[{i}]", *found]
    return None


def load(text: str, origin: str = PARAMS) -> Any:
    loader = _Unique(text)
    loader.origin = origin
    try:
        root = loader.get_single_node()
        loader.constructed_root = root
        return loader.construct_document(root) if root is not None else None
    finally:
        loader.dispose()
