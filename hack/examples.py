#!/usr/bin/env python3
"""Generate each example's `task.yaml` (an inline Task) from its Harbor task directory `task/`.

    .venv/bin/python hack/examples.py            write examples/<name>/task.yaml
    .venv/bin/python hack/examples.py --check    exit 1 when one is stale (CI; unit-tested too)

The Task is named after the example directory; files under task/ become spec.source.inline.files
(multi-line text as YAML literal blocks), .harborignore applied as Shipyard applies it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# The examples whose task.yaml this script owns (the network/accelerator examples keep their own).
GENERATED = ["compose", "hello-world", "multi-step", "separate-verifier"]


class _Literal(str):
    pass


def _literal(dumper: yaml.SafeDumper, value: _Literal) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Literal, _literal)


def task_files(task_dir: Path) -> dict[str, str]:
    sys.path.insert(0, str(ROOT / "operator"))
    from shipyard.taskformat import load_task_dir

    files = load_task_dir(task_dir).files
    return {path: content.decode("utf-8") for path, content in sorted(files.items())}


def render(name: str) -> str:
    files = task_files(EXAMPLES / name / "task")
    task = {
        "apiVersion": "shipyard.dev/v1alpha1",
        "kind": "Task",
        "metadata": {"name": name},
        "spec": {"source": {"inline": {"files": {k: _Literal(v) for k, v in files.items()}}}},
    }
    header = (
        f"# The {name} Harbor task (./task) as a Task resource.\n"
        "# Generated from ./task by `.venv/bin/python hack/examples.py`; edit ./task instead.\n"
    )
    return header + yaml.dump(task, Dumper=_Dumper, sort_keys=False, width=100,
                              allow_unicode=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("names", nargs="*", default=GENERATED)
    args = parser.parse_args(argv)
    stale = []
    for name in args.names:
        path = EXAMPLES / name / "task.yaml"
        text = render(name)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(text)
    if stale:
        print("stale (run `.venv/bin/python hack/examples.py`): " + ", ".join(stale),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
