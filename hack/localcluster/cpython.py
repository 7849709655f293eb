"""CPython for the local cluster's stand-ins: this machine's pyenv builds (Debian bookworm, as
the stand-ins; docs/development.md) are the only CPython 3.10, 3.12 and 3.13 here. Debian
bookworm has 3.11, and neither python.org's sources nor uv's Python downloads (GitHub) are
reachable. Each is used twice:

- in the `python:3.X` stand-in images, copied to /usr/local (imagebuilds.py), as upstream's;
- as what uv downloads for `uv python install` / `uvx -p 3.X`, in the layout of uv's own
  downloads (a `python/` folder, the interpreter finding its libpython beside it), served by
  the stand-in for astral.sh (webstandins.py), which the stand-in images name to uv.

Both copies drop the tests, static library and bytecode, and rewrite the build's prefix in the
text files that name it (scripts' #!, sysconfig, python-config, pkg-config).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

PYENV_VERSIONS = Path.home() / ".pyenv" / "versions"
PYTHON_MINORS = ("3.10", "3.11", "3.12", "3.13")
# The prefix uv's own downloads were built with, which uv rewrites in their sysconfig data.
UV_PREFIX = "/install"
UV_ORIGIN_RUNPATH = b"$ORIGIN/../lib"
CODE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
"""This file's version: what it made by another is made again (uv's archives, the images)."""


def pyenv_cpython(minor: str) -> Path | None:
    """The newest pyenv build of `minor` on this machine (e.g. ~/.pyenv/versions/3.13.0)."""
    builds = [p for p in PYENV_VERSIONS.glob(f"{minor}.*")
              if p.name.removeprefix(f"{minor}.").isdigit()
              and (p / "bin" / f"python{minor}").is_file()]
    return max(builds, key=lambda p: int(p.name.rsplit(".", 1)[1]), default=None)


BUNDLED = ("pip", "setuptools", "wheel")
"""The distributions a CPython install comes with (ensurepip's); the rest of its site-packages
is what this machine installed since (and its own start-up `.pth` hooks): left out."""


def _bundled(build: Path) -> set[str]:
    """The top-level names in site-packages that belong to the bundled distributions."""
    names = {"README.txt"}
    for record in build.glob("lib/python*/site-packages/*.dist-info/RECORD"):
        if record.parent.name.split("-", 1)[0].lower() in BUNDLED:
            names.add(record.parent.name)
            names.update(line.split(",", 1)[0].split("/", 1)[0]
                         for line in record.read_text(errors="replace").splitlines())
    return names


def copy_cpython(build: Path, dest: Path, prefix: str = "/usr/local") -> None:
    """The pyenv build at `build` as it is to be under `prefix`: without its tests, static
    library, bytecode and what site-packages holds beyond the bundled distributions, the old
    prefix rewritten in text files."""
    old, skip_dirs = str(build).encode(), {"test", "tests", "idle_test", "__pycache__"}
    bundled = _bundled(build)
    for path in sorted(build.rglob("*")):
        rel = path.relative_to(build)
        if (skip_dirs & set(rel.parts) or path.suffix == ".a"
                or (len(rel.parts) >= 4 and rel.parts[2] == "site-packages"
                    and rel.parts[3] not in bundled)):
            continue
        target = dest / rel
        if path.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(os.readlink(path))
        elif path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.is_file():
            data = path.read_bytes()
            if old in data and b"\0" not in data[:8192]:
                data = data.replace(old, prefix.encode())
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(path.stat().st_mode & 0o7777)


def origin_runpath(executable: Path, build: Path) -> bool:
    """The interpreter's RUNPATH (the build's lib folder) made `$ORIGIN/../lib` in place, the
    rest of the string's room NULs: it then finds its libpython wherever uv unpacks it. True
    when the interpreter runs from anywhere now (a static one needs nothing), False when it
    loads a libpython that it would not find."""
    data = executable.read_bytes()
    old = f"{build}/lib".encode() + b"\0"
    if data.count(old) == 1 and len(old) > len(UV_ORIGIN_RUNPATH):
        new = UV_ORIGIN_RUNPATH + b"\0" * (len(old) - len(UV_ORIGIN_RUNPATH))
        executable.write_bytes(data.replace(old, new))
        return True
    return b"libpython" not in data


def _reproducible(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


def uv_download_name(build: Path) -> str:
    return f"cpython-{build.name}+pyenv-x86_64-unknown-linux-gnu-install_only.tar.gz"


def ensure_uv_downloads(cache: Path) -> list[Path]:
    """Each minor's pyenv build as a uv download in `cache` (made once per build), and the
    metadata uv reads (`downloads.json`, the format of UV_PYTHON_DOWNLOADS_JSON_URL) for the
    URL prefix `{base}`, filled in when served; the archives."""
    cache.mkdir(parents=True, exist_ok=True)
    # Archives made by another version of this file are made again (a folder from before the
    # stamp keeps its archives: they are this version's).
    stamp, code = cache / "made-by", CODE
    if stamp.exists() and stamp.read_text().strip() != code:
        for old in cache.glob("cpython-*.tar.gz*"):
            old.unlink()
    stamp.write_text(code + "\n")
    made, entries = [], {}
    for minor in PYTHON_MINORS:
        build = pyenv_cpython(minor)
        if build is None:
            continue
        archive = cache / uv_download_name(build)
        digest_file = archive.with_name(archive.name + ".sha256")
        if not digest_file.exists():
            with tempfile.TemporaryDirectory(dir=cache) as tmp:
                root = Path(tmp, "python")
                copy_cpython(build, root, UV_PREFIX)
                if not origin_runpath(root / "bin" / f"python{minor}", build):
                    print(f"  {build}: its interpreter's libpython cannot be found from "
                          "another folder; uv gets no download of it", flush=True)
                    continue
                partial = Path(tmp, archive.name)
                # The same bytes each time for the same build (no times, owners): made again,
                # an archive keeps its sha256, and the stand-in images that list it stay.
                with open(partial, "wb") as raw, \
                        gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as gz, \
                        tarfile.open(fileobj=gz, mode="w") as tar:
                    tar.add(root, arcname="python", filter=_reproducible)
                digest = hashlib.sha256(partial.read_bytes()).hexdigest()
                shutil.move(partial, archive)
            digest_file.write_text(digest + "\n")
        major, minor_n, patch = (int(v) for v in build.name.split("."))
        entries[f"cpython-{build.name}-linux-x86_64-gnu"] = {
            "name": "cpython", "arch": {"family": "x86_64", "variant": None}, "os": "linux",
            "libc": "gnu", "major": major, "minor": minor_n, "patch": patch,
            "prerelease": "", "url": "{base}/" + archive.name,
            "sha256": digest_file.read_text().strip(), "variant": None, "build": "pyenv"}
        made.append(archive)
    (cache / "downloads.json").write_text(json.dumps(entries, indent=1) + "\n")
    for stale in cache.glob("cpython-*.tar.gz*"):
        if stale.name.removesuffix(".sha256") not in {a.name for a in made}:
            stale.unlink()
    return made
