"""Harbor 0.25.0 in a virtualenv of its own (Python 3.12, cached), for the tests that check
Shipyard's exports and statistics against Harbor's own code (`tests/harbor_stats.py`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


def _python312() -> str | None:
    candidates = [os.environ.get("SHIPYARD_PYTHON312"), shutil.which("python3.12"),
                  *sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.12*/bin/python3"))]
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "-c", "import sys; assert sys.version_info"
                                         "[:2] == (3, 12)"], capture_output=True).returncode == 0:
            return candidate
    return None


HARBOR_VENV = Path(os.environ.get("SHIPYARD_CACHE", Path.home() / ".cache/shipyard")) \
    / "harbor-0.25.0-venv"


def harbor_python() -> str:
    """A python3.12 virtualenv with harbor 0.25.0 (cached): harbor without its dependencies,
    then its requirements with certifi unpinned (the pinned one is newer than PyPI here)."""
    python = HARBOR_VENV / "bin/python"
    if python.exists() and subprocess.run([str(python), "-c", "import harbor.models.job.result"],
                                          capture_output=True).returncode == 0:
        return str(python)
    base = _python312()
    if base is None:
        pytest.skip("python3.12 is not installed (harbor 0.25.0 needs it); set "
                    "SHIPYARD_PYTHON312=/path/to/python3.12")
    shutil.rmtree(HARBOR_VENV, ignore_errors=True)
    subprocess.run([base, "-m", "venv", str(HARBOR_VENV)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--no-deps", "harbor==0.25.0"], check=True, timeout=600)
    requires = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print('\\n'.join(r for r in "
         "m.requires('harbor') if 'extra ==' not in r))"],
        check=True, capture_output=True, text=True).stdout.split()
    requires = ["certifi" if r.startswith("certifi") else r for r in requires]
    subprocess.run([*pip, *requires], check=True, timeout=1200)
    return str(python)


@contextlib.contextmanager
def harbor_view(python: str, jobs: Path) -> Iterator[str]:
    """Harbor's own viewer over the jobs folder `jobs`, as `harbor view` serves it (on a free
    port of this machine), until the block ends; yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    viewer = subprocess.Popen([str(Path(python).parent / "harbor"), "view", str(jobs),
                               "--port", str(port), "--jobs"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/api/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "harbor view did not start"
                time.sleep(0.5)
        yield base
    finally:
        viewer.terminate()
        viewer.wait(20)


VIEWER_CLIENT = """
import json, sys, urllib.request
from pathlib import Path
from harbor.models.trial.artifact_manifest import ArtifactManifest, ArtifactManifestEntry
from harbor.models.trial.result import TrialResult
base, job, jobs = sys.argv[1], sys.argv[2], Path(sys.argv[3])
def get(path):
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return json.loads(r.read())
"""
"""The start of a script run by Harbor's python (`python -c SCRIPT BASE JOB JOBS`): Harbor's
models, and `get` of the viewer's API at BASE."""
