"""A typed, versioned record read from and written as one JSON object: the machinery under the
manifest and the lineage (records.py).

Contract: a `_Record` subclass is a frozen dataclass whose SPEC lists its keys in the writer's
order, each (key, kind) or (key, kind, default); `parse(obj)` checks every value against its kind
(`_check`: a JSON type, a tuple of them, (kind, NULL), a record class, [kind], {kind}, or a
function) and `to_json()` writes the keys back in that order, leaving out those the file left out
(`absent`). `_read(obj, cls, reads, file, wrote, fix)` is the one entry: the version first
(`format_version`, 1 to `reads`), then the fields; another version or a bad field is one BadInput
line naming the file, the field's dotted path, the release that wrote it and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from shardline import __version__
from shardline.core.errors import BadInput

NULL = type(None)
_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "an object",
          list: "a list", NULL: "null"}


class _Bad(Exception):  # a field's problem, raised where it is found; file and remedy are added at the top
    def __init__(self, at: str, problem: str):
        self.at, self.problem = at, problem


def _show(value: Any) -> str:
    s = repr(value)
    return s if len(s) <= 40 else s[:37] + "..."


def _check(value: Any, kind: Any, at: str) -> Any:
    """`value` as `kind` reads it: a JSON type (float takes an int, no number takes a bool), a tuple
    of them, (kind, NULL), a record class, [kind] (a list, read as a tuple), {kind} (an object of
    those), or a function (value, at) -> value."""
    if type(value) is kind:  # the common case, first: a string, an integer (a bool is not one), an object
        return value
    if isinstance(kind, tuple) and len(kind) == 2 and kind[1] is NULL and not (
            isinstance(kind[0], type) and kind[0] in _NAMES):  # (a composite kind, NULL)
        return None if value is None else _check(value, kind[0], at)
    if isinstance(kind, list):
        return tuple(_check(v, kind[0], f"{at}[{i}]") for i, v in enumerate(_check(value, list, at)))
    if isinstance(kind, set):
        return {k: _check(v, next(iter(kind)), f'{at}["{k}"]') for k, v in _check(value, dict, at).items()}
    if isinstance(kind, type) and issubclass(kind, _Record):
        return kind.parse(_check(value, dict, at), f"{at}.")
    if not isinstance(kind, (type, tuple)):
        return kind(value, at)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if any(isinstance(value, k) and not (isinstance(value, bool) and k in (int, float)) for k in kinds) \
            or float in kinds and isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _Bad(at, f"must be {' or '.join(_NAMES[k] for k in kinds)}, got {_show(value)}")


def _plain(value: Any) -> Any:
    """A field's value as JSON: a record by its to_json, a tuple as a list."""
    if isinstance(value, _Record):
        return value.to_json()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _absent(*keys: str):
    """Which keys the file left out (so they stay out when written back): not part of the value."""
    return field(default=frozenset(keys), compare=False, repr=False, kw_only=True)


@dataclass(frozen=True)
class _Record:
    """A frozen dataclass read from and written as one JSON object. SPEC: its keys in the writer's
    order, each (key, kind) or (key, kind, default): a key with a default may be absent (an older
    writer of the same version left it out). ATTR: a key's attribute, where it is not the key."""

    SPEC: ClassVar[tuple]
    ATTR: ClassVar[dict] = {}
    KEYS: ClassVar[frozenset]
    absent: frozenset = _absent()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.KEYS = frozenset(key for key, *_ in cls.SPEC)

    @classmethod
    def parse(cls, obj: dict, prefix: str = ""):
        if not cls.KEYS.issuperset(obj):
            raise _Bad(prefix + sorted(set(obj) - cls.KEYS)[0], "is not a field of this format")
        values, absent = {}, set()
        for key, kind, *default in cls.SPEC:
            attr = cls.ATTR.get(key, key)
            if key in obj:
                values[attr] = _check(obj[key], kind, prefix + key)
            elif not default:
                raise _Bad(prefix + key, "missing")
            else:
                values[attr] = default[0]() if callable(default[0]) else default[0]
                absent.add(key)
        return cls(**values, absent=frozenset(absent))

    def to_json(self) -> dict:
        return {key: _plain(getattr(self, self.ATTR.get(key, key))) for key, *_ in self.SPEC if key not in self.absent}


class _Version(Exception):  # another format_version, as _Bad
    def __init__(self, at: str, found: Any, reads: int):
        self.at, self.found, self.reads = at, found, reads


def _version(obj: dict, prefix: str, reads: int) -> None:
    """Every version from 1 to `reads` is read (a field a version lacks reads as its default)."""
    found = obj.get("format_version", 1)
    if type(found) is not int or not 1 <= found <= reads:
        raise _Version(prefix + "format_version", found, reads)


def _read(obj: Any, cls: type, reads: int, file: str, wrote: str | None, fix: str, fix_version: str = ""):
    """`cls` parsed from `obj` (what `file` holds), or BadInput: its version first, then its fields.
    `fix`: what to do about a bad field; `fix_version`: about another version (default: `fix`)."""
    try:
        if not isinstance(obj, dict):
            raise _Bad("", f"must be a JSON object, got {_show(obj)}")
        _version(obj, "", reads)
        return cls.parse(obj)
    except _Version as v:
        by = f"shardline {wrote}" if wrote else "another shardline release (lineage.json does not say which)"
        what = "format" if v.at == "format_version" else v.at.rpartition(".")[0] + " format"
        reads = v.reads if v.reads == 1 else f"1 to {v.reads}"
        raise BadInput(f"{file}: {v.at} {v.found!r}, but this shardline ({__version__}) reads {what} {reads}; "
                       f"it was written by {by}: {fix_version or fix}") from None
    except _Bad as b:
        raise BadInput(f"{file}: {b.at or 'the file'}: {b.problem}; it is not what shardline {__version__} writes "
                       f"(edited, or written by another tool): {fix}") from None
