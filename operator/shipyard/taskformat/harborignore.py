"""``.harborignore`` (Harbor `models/task/file_filter.py`): gitignore patterns for the trees that
are uploaded at run time, ``tests/``, ``solution/``, ``steps/*/tests/`` and ``steps/*/solution/``.

A ``.harborignore`` applies to its own directory and everything below it; the deepest file with
a matching pattern decides. The ignore files themselves are never part of an upload.

Its patterns are the task author's, matched against the author's paths whenever the operator
loads a Task. With Python's backtracking `re` (pathspec's default) 17 bytes of pattern
(``*a*a*a*a*a*a*a*a*c``) took 4 s against a 40-character name, 12 pairs 200 s: so they are
matched with RE2 (linear time, the same regular expressions, the same verdicts), at most
MAX_PATTERNS per file, and a pattern that does not compile is the file's error, not a traceback.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping

from pathspec import GitIgnoreSpec

from shipyard.taskformat.errors import TaskFormatError

IGNORE_FILE = ".harborignore"
MAX_PATTERNS = 1000
"""Patterns of all of a task's .harborignore files (RE2 compiles each file's into one set)."""
MAX_BYTES = 64 * 1024

_SCOPED = re.compile(r"^(?:tests|solution|steps/[^/]+/(?:tests|solution))/")
# Directories whose ignore files can reach a scoped tree: the root, steps/, steps/<n>/, or inside.
_EFFECTIVE_DIR = re.compile(
    r"^(?:|steps|steps/[^/]+|(?:tests|solution|steps/[^/]+/(?:tests|solution))(?:/.*)?)$"
)


def _is_ignore_file(path: str) -> bool:
    directory, name = posixpath.split(path)
    return name == IGNORE_FILE and _EFFECTIVE_DIR.match(directory) is not None


def _ignored(path: str, specs: Mapping[str, GitIgnoreSpec]) -> bool:
    directory = posixpath.dirname(path)
    while True:
        spec = specs.get(directory)
        if spec is not None:
            relative = path[len(directory) + 1 :] if directory else path
            decision = spec.check_file(relative).include
            if decision is not None:
                return decision
        if not directory:
            return False
        directory = posixpath.dirname(directory)


def apply_harborignore(files: Mapping[str, bytes]) -> tuple[dict[str, bytes], set[str]]:
    """Split ``files`` into what Harbor keeps and the paths it excludes."""
    specs: dict[str, GitIgnoreSpec] = {}
    total = 0
    for path, content in sorted(files.items()):
        if _is_ignore_file(path):
            lines = _lines(path, content)
            total += sum(1 for line in lines if line.strip() and not line.startswith("#"))
            if total > MAX_PATTERNS:
                raise TaskFormatError(f"the task's ignore files have more than {MAX_PATTERNS:,} "
                                      "patterns in all", file=path)
            specs[posixpath.dirname(path)] = _spec(path, lines)
    kept: dict[str, bytes] = {}
    excluded: set[str] = set()
    for path, content in files.items():
        if _is_ignore_file(path) or (_SCOPED.match(path) and _ignored(path, specs)):
            excluded.add(path)
        else:
            kept[path] = content
    return kept, excluded


def _lines(path: str, content: bytes) -> list[str]:
    if len(content) > MAX_BYTES:
        raise TaskFormatError(f"is {len(content):,} bytes: more than the {MAX_BYTES:,} an "
                              "ignore file may have", file=path)
    return content.decode("utf-8", errors="replace").splitlines()


def _spec(path: str, lines: list[str]) -> GitIgnoreSpec:
    try:
        return GitIgnoreSpec.from_lines(lines, backend="re2")
    except Exception as exc:  # re.error for a bad range, re2's own for a set too large
        raise TaskFormatError(f"its patterns cannot be matched: {exc}", file=path) from None
