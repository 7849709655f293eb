"""A task's TOML and YAML documents are parsed within bounds: an alias bomb, an alias that
contains itself, a document nested thousands deep or over 1 MiB is refused naming its file,
quickly, never a hang or a RecursionError (the operator parses every Task it is given)."""

from __future__ import annotations

import time

import pytest

from shipyard.taskformat import TaskFormatError, load_task_files
from shipyard.taskformat.compose import compose_refusals, main_offline, parse_compose
from shipyard.taskformat.documents import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    check_shape,
    load_toml,
    load_yaml,
)

TOML = 'schema_version = "1.4"\n[environment]\ndocker_image = "busybox"\n'
FILES = {"task.toml": TOML, "instruction.md": "Do.\n",
         "tests/test.sh": "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n"}


def laughs(levels: int = 9) -> str:
    """Nine levels of nine aliases: 9**10 strings once expanded, 600 bytes as text."""
    lines = ['x-a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"x-a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join([*lines, "services:", "  main:", "    image: busybox",
                      f"    labels: *a{levels}", ""])


BAD_YAML = {
    "alias bomb": (laughs(), "expands to more than 100,000 values"),
    "alias inside itself": ("x: &a [1, *a]\nservices:\n  main:\n    image: busybox\n",
                            "an alias refers to a value that contains it"),
    "mapping inside itself": ("services: &s\n  main:\n    labels: *s\n",
                              "an alias refers to a value that contains it"),
    # libyaml stops at 1,000 levels itself ("exceeded maximum nesting depth")
    "deep flow": ("services:\n  main:\n    labels: " + "[" * 5000 + "]" * 5000 + "\n",
                  "nest"),
    "deep but parseable": ("services:\n  main:\n    labels: " + "[" * 80 + "]" * 80 + "\n",
                           "nested more than"),
    "over 1 MiB": ("services:\n  main:\n    image: busybox\n    environment:\n"
                   + "".join(f"      K{i}: v{i}\n" for i in range(80_000)),
                   "bytes: more than the 1,048,576"),
}


@pytest.mark.parametrize("name", BAD_YAML)
def test_a_compose_file_that_never_ends_is_refused_naming_it(name):
    text, words = BAD_YAML[name]
    started = time.monotonic()
    with pytest.raises(TaskFormatError) as raised:
        parse_compose(text, {})
    assert time.monotonic() - started < 5
    assert words in str(raised.value)
    assert all(e.file == "environment/docker-compose.yaml" for e in raised.value.errors)
    # main_offline reads the same file: it says no, and the file is refused on its own.
    assert main_offline(text.encode(), {}) is False


@pytest.mark.parametrize("name", ["alias bomb", "alias inside itself", "deep flow"])
def test_a_task_with_such_a_compose_file_is_refused_by_the_loader_path(name):
    files = dict(FILES, **{"environment/docker-compose.yaml": BAD_YAML[name][0]})
    task = load_task_files({k: v.encode() for k, v in files.items()}, name="t")
    refusals = compose_refusals(task)
    assert refusals and BAD_YAML[name][1] in str(refusals[0])


BAD_TOML = {
    "deep array": (TOML + "[metadata]\nx = " + "[" * 3000 + "]" * 3000 + "\n",
                   "nested more than"),
    "deep tables": (TOML + "[metadata." + ".".join(f"k{i}" for i in range(MAX_DEPTH + 2))
                    + "]\nx = 1\n", "nested more than"),
    "over 1 MiB": (TOML + "[metadata]\n" + "".join(f'k{i} = "v{i}"\n' for i in range(80_000)),
                   "bytes: more than the 1,048,576"),
}


@pytest.mark.parametrize("name", BAD_TOML)
def test_a_task_toml_that_never_ends_is_refused_naming_it(name):
    text, words = BAD_TOML[name]
    files = dict(FILES, **{"task.toml": text})
    with pytest.raises(TaskFormatError) as raised:
        load_task_files({k: v.encode() for k, v in files.items()}, name="t")
    assert words in str(raised.value)
    assert raised.value.errors[0].file == "task.toml"


def test_real_documents_and_shared_aliases_within_bounds_load():
    anchors = ("x-env: &env {A: '1', B: '2'}\nservices:\n  main:\n    image: busybox\n"
               "    environment: *env\n  db:\n    image: postgres\n    environment: *env\n")
    env = parse_compose(anchors, {})
    assert [s.name for s in env.services] == ["main", "db"]
    assert load_toml(TOML, "task.toml")["environment"]["docker_image"] == "busybox"
    assert load_yaml("a: [1, 2]\n", "f.yaml") == {"a": [1, 2]}
    assert len(("x" * MAX_DOCUMENT_BYTES).encode()) == MAX_DOCUMENT_BYTES
    load_toml(f'k = "{"x" * (MAX_DOCUMENT_BYTES - 10)}"\n', "task.toml")


def test_shared_subtrees_are_sized_once_and_counted_at_each_use():
    leaf = list(range(1000))
    check_shape({"a": [leaf] * 99}, "f")  # 99,100 values once expanded: within bounds
    with pytest.raises(TaskFormatError, match="more than 100,000"):
        check_shape({"a": [leaf] * 101}, "f")


def _with_ignore(ignore: str, *names: str) -> dict[str, bytes]:
    files = dict(FILES, **{"tests/.harborignore": ignore, "solution/solve.sh": "#!/bin/sh\n"})
    files.update({f"tests/{name}": "x" for name in names})
    return {k: v.encode() for k, v in files.items()}


def test_a_harborignore_pattern_that_backtracks_is_matched_in_linear_time():
    """`*a*a*a*a*a*a*a*a*a*a*a*a*c` against a name of a's: 200 s with Python's `re`."""
    name = "a" * 200
    started = time.monotonic()
    task = load_task_files(_with_ignore("*a" * 12 + "c\n*.tmp\n", name, "x.tmp"), name="t")
    assert time.monotonic() - started < 2
    assert f"tests/{name}" in task.files and "tests/x.tmp" not in task.files


@pytest.mark.parametrize("ignore,words", [
    ("[z-a]\n", "its patterns cannot be matched: bad character range z-a"),
    ("".join(f"p{i}\n" for i in range(1001)), "have more than 1,000 patterns in all"),
    ("#" * 70_000 + "\n", "is 70,001 bytes: more than the 65,536"),
])
def test_a_harborignore_that_cannot_be_matched_is_refused_naming_it(ignore, words):
    with pytest.raises(TaskFormatError) as raised:
        load_task_files(_with_ignore(ignore), name="t")
    assert words in str(raised.value) and raised.value.errors[0].file == "tests/.harborignore"
