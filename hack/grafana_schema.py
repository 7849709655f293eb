#!/usr/bin/env python3
"""Grafana's own dashboard schema as a JSON Schema, for validating the chart's dashboard.

Grafana publishes its dashboard model (generated from its CUE kinds) as the TypeScript types of
the npm package `@grafana/schema`; `ts-json-schema-generator` turns its `Dashboard` type into a
JSON Schema (Draft 7). Both come from the npm registry, once: the schema is cached under
`~/.cache/shipyard/grafana-schema-<version>/dashboard.schema.json` (or $SHIPYARD_CACHE), so a
warm run costs nothing. `hack/test.sh` runs this before pytest; the unit test
(`tests/unit/cli/test_chart.py`) validates `charts/shipyard/dashboards/shipyard.json` with it.

    python3 hack/grafana_schema.py        # prints the schema's path (building it when missing)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

GRAFANA_SCHEMA_VERSION = "13.2.3"
GENERATOR_VERSION = "2.9.0"
TYPES = "node_modules/@grafana/schema/dist/types/raw/dashboard/x/types.gen.d.ts"


def cache_dir() -> Path:
    base = Path(os.environ.get("SHIPYARD_CACHE", Path.home() / ".cache" / "shipyard"))
    return base / f"grafana-schema-{GRAFANA_SCHEMA_VERSION}"


def schema_path() -> Path:
    return cache_dir() / "dashboard.schema.json"


def ensure() -> Path:
    """The cached schema; built with npm when missing (RuntimeError when npm cannot)."""
    target = schema_path()
    if target.exists():
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is needed once to build Grafana's dashboard schema "
                           "(apt-get install npm)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="grafana-schema-") as tmp:
        work = Path(tmp)
        (work / "package.json").write_text('{"name": "grafana-schema", "private": true}\n')
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error",
                        f"@grafana/schema@{GRAFANA_SCHEMA_VERSION}",
                        f"ts-json-schema-generator@{GENERATOR_VERSION}"],
                       cwd=work, check=True, stdin=subprocess.DEVNULL, timeout=600)
        out = work / "dashboard.schema.json"
        subprocess.run([str(work / "node_modules/.bin/ts-json-schema-generator"),
                        "--path", TYPES, "--type", "Dashboard", "--no-type-check",
                        "-o", str(out)], cwd=work, check=True, stdin=subprocess.DEVNULL,
                       timeout=600)
        partial = target.with_suffix(".tmp")
        shutil.copyfile(out, partial)
        partial.replace(target)  # never a half-written schema in the cache
    return target


if __name__ == "__main__":
    try:
        print(ensure())
    except (RuntimeError, subprocess.SubprocessError) as e:
        sys.exit(f"hack/grafana_schema.py: {e}")
