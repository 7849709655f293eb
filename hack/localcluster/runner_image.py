#!/usr/bin/env python3
"""The in-pod runner's image: the static Go runner (runner/ at the repository root, stdlib
only) built with the host's Go (CGO_ENABLED=0) and put alone in an image, imported into the
local cluster's containerd. Trial pods copy it into a read-only volume with an init container
(`runner install`), so the runner never uses a program of the task's image.

    runner_image.py binary    build (or reuse) the binary; print its path
    runner_image.py files     build (or reuse) the folder of the runner and its loader (the
                              operator's SHIPYARD_RUNNER_FILES); print its path
    runner_image.py import    build if needed and import into the local cluster; print the ref
    runner_image.py ref       print the reference the current sources get (no build)

The tag is `localhost/shipyard/runner:<content hash>` (the Go sources, go.mod and this script),
so a changed runner gets a new tag and a running pod keeps the one it started with. Binaries and
archives are cached under ~/.cache/shipyard/runner and ~/.cache/shipyard/images.

The runner's loader (runner/loader/loader.c: what a pod runs when the runner comes in
ConfigMaps, `render.runner_parts`) is built with the host's C compiler, static, without libc.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from layout import Layout

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "runner"
REPOSITORY = "localhost/shipyard/runner"
BINARY_IN_IMAGE = "/runner"
FILES_IN_IMAGE = "/opt/shipyard/runner"
"""Where the operator's image carries the runner and its loader (SHIPYARD_RUNNER_FILES)."""


LOADER_SOURCE = SOURCE / "loader" / "loader.c"


def source_files() -> list[Path]:
    return sorted([*(p for p in SOURCE.iterdir() if p.suffix == ".go" or p.name == "go.mod"),
                   LOADER_SOURCE])


def content_hash() -> str:
    digest = hashlib.sha256()
    for path in [*source_files(), Path(__file__).resolve()]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def reference() -> str:
    return f"{REPOSITORY}:{content_hash()}"


def _go() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK)
                                else None)
    if go is None:
        raise RuntimeError("building the runner needs Go (https://go.dev/dl/) on PATH")
    return go


def build_binary(layout: Layout) -> Path:
    """The static runner for these sources (built once per content hash)."""
    out = layout.cache / "runner" / f"runner-{content_hash()}"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod", GOOS="linux", GOARCH="amd64",
               GOCACHE=str(layout.cache / "go-build"), GOTOOLCHAIN="local")
    result = subprocess.run([_go(), "build", "-trimpath", "-ldflags", "-s -w", "-o",
                             str(partial), "."], cwd=SOURCE, env=env, capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise RuntimeError(f"building the runner failed:\n{result.stderr[-3000:]}")
    partial.rename(out)
    # Older builds go once a day old (another checkout's tests may be running one now).
    for old in out.parent.glob("runner-*"):
        with contextlib.suppress(OSError):
            if old != out and time.time() - old.stat().st_mtime > 86400:
                old.unlink()
    return out


def files_dir(layout: Layout) -> Path:
    """The folder of the runner and its loader for these sources (`build_files`)."""
    return layout.cache / "runner" / f"files-{content_hash()}"


def build_files(layout: Layout) -> Path:
    """The runner and its loader in one folder (built once per content hash)."""
    out = files_dir(layout)
    if (out / "loader").exists():
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("building the runner's loader needs a C compiler (cc) on PATH")
    partial = out.with_suffix(".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    shutil.copy2(build_binary(layout), partial / "runner")
    result = subprocess.run(
        [cc, "-static", "-nostdlib", "-Os", "-ffreestanding", "-fno-stack-protector",
         "-fno-asynchronous-unwind-tables", "-Wall", "-Werror", "-Wl,--build-id=none", "-s",
         "-o", str(partial / "loader"), str(LOADER_SOURCE)], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"building the runner's loader failed:\n{result.stderr[-3000:]}")
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    for old in out.parent.glob("files-*"):
        with contextlib.suppress(OSError):
            if old != out and time.time() - old.stat().st_mtime > 86400:
                shutil.rmtree(old)
    return out


def build(layout: Layout) -> tuple[str, Path]:
    """The runner image as a docker-archive in the cache: the binary alone at /runner."""
    from images import write_archive

    ref = reference()
    out = layout.images / f"runner-{content_hash()}.tar"
    if out.exists():
        return ref, out
    binary = build_binary(layout)

    def fill(rootfs: Path) -> None:
        shutil.copy2(binary, rootfs / BINARY_IN_IMAGE.lstrip("/"))
        (rootfs / BINARY_IN_IMAGE.lstrip("/")).chmod(0o755)

    write_archive(layout, ref, out, fill, [f"--config.entrypoint={BINARY_IN_IMAGE}",
                                          "--config.label=org.opencontainers.image.title="
                                          "shipyard-runner"])
    for old in layout.images.glob("runner-*.tar"):
        if old != out:
            old.unlink(missing_ok=True)
    return ref, out


def import_image(layout: Layout) -> str:
    """Imported once per content hash (a warm `up` only lists containerd's images)."""
    from images import _runner, imported_tags

    ref = reference()
    build_files(layout)
    if ref not in imported_tags(layout):
        _, archive = build(layout)
        _runner()("ctr", "-a", str(layout.containerd_sock), "-n", "k8s.io", "images", "import",
                  str(archive))
    return ref


def main() -> int:
    layout = Layout.default()
    match sys.argv[1:]:
        case ["binary"]:
            print(build_binary(layout))
        case ["files"]:
            print(build_files(layout))
        case ["import"]:
            print(import_image(layout))
        case ["ref"]:
            print(reference())
        case _:
            print(__doc__, file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
