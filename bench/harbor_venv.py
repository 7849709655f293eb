"""Harbor 0.25 in a virtualenv of its own, for the bench's Harbor arm only.

Harbor needs Python >= 3.12 (looked up as `python3.12`/`python3.13` on PATH, then under pyenv).
harbor==0.25.0 pins a certifi newer than some package indexes serve, so it is installed
``--no-deps`` and its requirements are installed next with certifi unpinned, plus
`kubernetes` (its `ack`/`gke` environments). Cached in ~/.cache/shipyard/bench/.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import zipfile
from email.parser import Parser
from pathlib import Path

HARBOR = "harbor==0.25.0"
CACHE = Path(os.environ.get("SHIPYARD_CACHE", Path.home() / ".cache" / "shipyard")) / "bench"
VENV = CACHE / "harbor-0.25.0"


def find_python312() -> str | None:
    for name in ("python3.12", "python3.13"):
        found = shutil.which(name)
        if found and _works(found):
            return found
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    for candidate in sorted(glob.glob(str(pyenv / "versions" / "3.1[2-9]*" / "bin" / "python3"))):
        if _works(candidate):
            return candidate
    return None


def _works(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", "import sys, venv; sys.exit(sys.version_info < "
                               "(3, 12))"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        headers = Parser().parsestr(z.read(meta).decode())
    reqs = []
    for req in headers.get_all("Requires-Dist") or []:
        if "extra ==" in req:
            continue
        reqs.append("certifi" if req.startswith("certifi") else req.split(";")[0].strip())
    return [*reqs, "kubernetes"]


def ensure_harbor() -> tuple[Path | None, str]:
    """(the venv's python, "") when Harbor is installed or could be; (None, why) otherwise."""
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    if stamp.exists() and python.exists():
        return python, ""
    base = find_python312()
    if base is None:
        return None, "no Python >= 3.12 found (python3.12 on PATH or under pyenv)"
    shutil.rmtree(VENV, ignore_errors=True)
    VENV.parent.mkdir(parents=True, exist_ok=True)
    quiet = {"check": True, "stdout": subprocess.DEVNULL}
    try:
        subprocess.run([base, "-m", "venv", str(VENV)], **quiet)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        wheels = CACHE / "wheels"
        subprocess.run([str(python), "-m", "pip", "download", "-q", "--no-deps", HARBOR,
                        "-d", str(wheels)], **quiet)
        wheel = next(wheels.glob("harbor-0.25.0-*.whl"))
        subprocess.run([*pip, "--no-deps", str(wheel)], **quiet)
        subprocess.run([*pip, *_requirements(wheel)], **quiet)
    except (subprocess.CalledProcessError, StopIteration) as e:
        return None, f"installing {HARBOR} failed: {e}"
    stamp.write_text(HARBOR + "\n")
    return python, ""
