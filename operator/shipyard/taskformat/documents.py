"""Parsing a task's TOML and YAML documents within bounds (pure).

A task is input from anyone, and the operator parses it when a Task is checked and when a
trial loads it. An unbounded parse there is a denial of service for every trial the operator
runs: a few hundred bytes of YAML aliases nested nine deep (a "billion laughs") expand to a
billion values for whatever walks them, an alias may contain itself, a document nested a few
thousand levels deep overflows the parsers' recursion, and a many-MiB file takes minutes of
pure-Python parsing. Docker Compose refuses excessive aliasing too; Harbor's task.toml files
are a few KiB. Every such document is refused here with its file and the reason.
"""

from __future__ import annotations

import tomllib
from typing import Any

import yaml

from shipyard.taskformat.errors import TaskFormatError

MAX_DOCUMENT_BYTES = 1024 * 1024
"""task.toml and docker-compose.yaml: far above any real task's, far below a slow parse."""
MAX_DEPTH = 64
"""Nesting of mappings and lists (Harbor's and Compose's own keys go five or six deep)."""
MAX_VALUES = 100_000
"""Values a document holds once its YAML aliases are expanded (each alias counts in full)."""

_YAML_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: much faster


def load_toml(text: str, file: str) -> dict[str, Any]:
    """A TOML document, or TaskFormatError naming `file` and why it is refused."""
    _check_size(text, file)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        hint = ""
        if text.startswith("\ufeff"):  # Harbor reads the text as it is and refuses it too
            hint = ("; the file starts with a UTF-8 byte order mark (BOM), which TOML does not "
                    "allow: save it as UTF-8 without a BOM")
        raise TaskFormatError(f"invalid TOML: {exc}{hint}", file=file) from None
    except RecursionError:
        raise _too_deep(file) from None
    check_shape(data, file, aliases=False)
    return data


def load_yaml(text: str, file: str) -> Any:
    """A YAML document (the safe subset), or TaskFormatError naming `file` and why."""
    _check_size(text, file)
    try:
        data = yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise TaskFormatError(f"not valid YAML: {exc}", file=file) from None
    except RecursionError:
        raise _too_deep(file) from None
    check_shape(data, file)
    return data


def check_shape(data: Any, file: str, aliases: bool = True) -> None:
    """Refuse a parsed document that nests deeper than MAX_DEPTH, refers to itself, or
    expands to more than MAX_VALUES values. Shared subtrees (YAML aliases) are sized once
    and counted at every use, so the check itself is linear in the document's text."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: Any, depth: int) -> int:
        if not isinstance(node, dict | list):
            return 1
        if depth > MAX_DEPTH:
            raise _too_deep(file)
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_:
            raise TaskFormatError("an alias refers to a value that contains it: the document "
                                  "never ends", file=file)
        open_.add(key)
        total = 1
        for child in (node.values() if isinstance(node, dict) else node):
            total += size(child, depth + 1)
            if total > MAX_VALUES:
                raise TaskFormatError(
                    f"expands to more than {MAX_VALUES:,} values through its aliases: refused, "
                    "as Docker Compose refuses excessive aliasing" if aliases else
                    f"holds more than {MAX_VALUES:,} values", file=file)
        open_.discard(key)
        sizes[key] = total
        return total

    size(data, 0)


def _check_size(text: str, file: str) -> None:
    length = len(text.encode("utf-8", "surrogatepass"))
    if length > MAX_DOCUMENT_BYTES:
        raise TaskFormatError(f"is {length:,} bytes: more than the {MAX_DOCUMENT_BYTES:,} "
                              "this file may have", file=file)


def _too_deep(file: str) -> TaskFormatError:
    return TaskFormatError(f"nested more than {MAX_DEPTH} levels deep", file=file)
