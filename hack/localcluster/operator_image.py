#!/usr/bin/env python3
"""The Shipyard operator image, built without Docker and imported into the local cluster.

    operator_image.py build     build (or reuse) the image archive; print its reference
    operator_image.py import    build if needed and import into the local cluster's containerd
    operator_image.py ref       print the reference the current sources would get (no build)
    operator_image.py lock      (run with the project's venv python) pin the runtime dependencies
                                in hack/operator-image/constraints.txt from the venv

The same image as the Dockerfile, made the local cluster's way: the cached Debian bookworm root
filesystem (Python 3.11) + the project's wheel and its dependencies, installed by the host's pip
with `--target` for CPython 3.11 on manylinux x86_64 (binary wheels only, versions pinned by
hack/operator-image/constraints.txt) + the static Go runner at /runner (runner_image.py; trial
pods copy it from this image, the chart's default trials.runnerImage) + a non-root user (10001)
-> OCI (umoci) -> docker-archive (skopeo) -> `ctr import`. Entrypoint `python3 -m shipyard`,
command `operator`.

The tag is `localhost/shipyard/operator:<version>-<content hash>`; the hash covers the package
sources, pyproject.toml, the constraints, the runner's sources and this script, so any change
gives a new tag (and a `helm upgrade` rolls the pod). `<version>` alone is tagged too, for the
chart's default values.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import runner_image
from images import IMAGE_DEBIAN, IMAGES, _runner, imported_tags, write_archive
from layout import Layout

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "hack" / "operator-image" / "constraints.txt"
REPOSITORY = "localhost/shipyard/operator"
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"  # on Debian's python3 sys.path
UID = GID = 10001
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_5_x86_64", "linux_x86_64"]
ENV = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONUNBUFFERED=1",
    "PYTHONDONTWRITEBYTECODE=1",
    "HOME=/home/shipyard",
]


def version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def source_files() -> list[Path]:
    files = [REPO / "pyproject.toml", CONSTRAINTS, Path(__file__).resolve()]
    return files + runner_image.source_files() + package_files()


def package_files() -> list[Path]:
    """The files of the `shipyard` package (what the wheel is made of)."""
    return [
        path for path in sorted((REPO / "operator" / "shipyard").rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    ]


def content_hash() -> str:
    digest = hashlib.sha256()
    for path in source_files():
        digest.update(str(path.relative_to(REPO)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def reference() -> str:
    return f"{REPOSITORY}:{version()}-{content_hash()}"


def _pip() -> list[str]:
    """The host's pip (the venv's when run from it)."""
    return [sys.executable, "-m", "pip"]


def _build_wheel(out: Path) -> Path:
    """Built from a clean copy of the sources, so the checkout gets no build/ or egg-info."""
    source = out / "source"
    for path in [REPO / "pyproject.toml", REPO / "README.md", *package_files()]:
        target = source / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    result = subprocess.run(
        [*_pip(), "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(source)],
        capture_output=True, text=True,
        env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"),
    )
    if result.returncode != 0:
        raise RuntimeError(f"building the shipyard wheel failed:\n{result.stderr[-3000:]}")
    wheels = list(out.glob("shipyard-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one shipyard wheel in {out}, found {wheels}")
    return wheels[0]


def _install_into(root: Path, wheel: Path) -> None:
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run(
        [
            *_pip(), "install", "--quiet", "--no-compile", "--no-warn-script-location",
            "--target", str(root / SITE_PACKAGES),
            "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
            *platforms, "--only-binary=:all:",
            "--constraint", str(CONSTRAINTS), str(wheel),
        ],
        check=True, env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"),
    )
    # Console scripts land in the target's bin/; the image runs `python3 -m shipyard`.
    shutil.rmtree(root / SITE_PACKAGES / "bin", ignore_errors=True)


def _add_user(root: Path) -> None:
    with open(root / "etc" / "passwd", "a") as f:
        f.write(f"shipyard:x:{UID}:{GID}:Shipyard operator:/home/shipyard:/usr/sbin/nologin\n")
    with open(root / "etc" / "group", "a") as f:
        f.write(f"shipyard:x:{GID}:\n")
    home = root / "home" / "shipyard"
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, UID, GID)


def build(layout: Layout) -> tuple[str, Path]:
    """The image as a docker-archive in the cache (built once per content hash)."""
    ref = reference()
    out = layout.images / f"operator-{ref.rsplit(':', 1)[1]}.tar"
    if out.exists():
        return ref, out
    debian = next(i for i in IMAGES if i.tag == IMAGE_DEBIAN)
    cached_rootfs = layout.cache / "rootfs" / "bookworm"
    if not cached_rootfs.exists():  # debootstrap once; the local cluster's image shares it
        with tempfile.TemporaryDirectory(dir=layout.cache) as scratch:
            debian.build_rootfs(layout, Path(scratch))
    began = time.monotonic()
    runner = runner_image.build_binary(layout)
    runner_files = runner_image.build_files(layout)

    def fill(rootfs: Path) -> None:
        subprocess.run(["cp", "-a", f"{cached_rootfs}/.", str(rootfs)], check=True)
        _install_into(rootfs, _build_wheel(rootfs.parent.parent / "wheel"))
        _add_user(rootfs)
        carried = rootfs / runner_image.BINARY_IN_IMAGE.lstrip("/")
        shutil.copy2(runner, carried)
        carried.chmod(0o755)
        # The runner and its loader, which trial pods get in ConfigMaps (SHIPYARD_RUNNER_FILES).
        files = rootfs / runner_image.FILES_IN_IMAGE.lstrip("/")
        files.mkdir(parents=True)
        for name in ("runner", "loader"):
            shutil.copy2(runner_files / name, files / name)

    config = [
        f"--config.user={UID}:{GID}",
        "--config.workingdir=/home/shipyard",
        "--config.entrypoint=python3", "--config.entrypoint=-m",
        "--config.entrypoint=shipyard", "--config.cmd=operator",
        "--config.label=org.opencontainers.image.title=shipyard-operator",
        f"--config.label=org.opencontainers.image.version={version()}",
        f"--config.label=dev.shipyard.content-hash={content_hash()}",
        *[f"--config.env={e}" for e in ENV],
    ]
    write_archive(layout, ref, out, fill, config)
    print(f"built {ref} in {time.monotonic() - began:.1f}s", file=sys.stderr)
    # Older archives of the operator are of no further use.
    for old in layout.images.glob("operator-*.tar"):
        if old != out:
            old.unlink(missing_ok=True)
    return ref, out


def import_image(layout: Layout) -> str:
    ref, archive = build(layout)
    ctr = ["ctr", "-a", str(layout.containerd_sock), "-n", "k8s.io"]
    if ref not in imported_tags(layout):
        _runner()(*ctr, "images", "import", str(archive))
    plain = f"{REPOSITORY}:{version()}"
    # Earlier builds' tags go (a running pod keeps its snapshot); `<version>` moves to this one.
    stale = [t for t in imported_tags(layout) if t.startswith(f"{REPOSITORY}:") and t != ref]
    if stale:
        subprocess.run([*ctr, "images", "rm", *stale], capture_output=True)
    _runner()(*ctr, "images", "tag", ref, plain)
    return ref


def lock() -> None:
    """Pin the runtime closure of `shipyard` as installed in the running (venv) Python."""
    from importlib.metadata import distribution

    from packaging.requirements import Requirement

    environment = {"python_version": "3.11", "sys_platform": "linux", "platform_machine": "x86_64"}
    pins: dict[str, str] = {}
    todo: list[tuple[str, frozenset[str]]] = [("shipyard", frozenset())]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        wanted, extras = todo.pop()
        dist = distribution(wanted)
        name = dist.metadata["Name"].lower().replace("_", "-")
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        pins[name] = dist.version
        for spec in dist.requires or []:
            req = Requirement(spec)  # a dependency's extras (pathspec[re2]) pull theirs in
            if req.marker is None or any(req.marker.evaluate({**environment, "extra": extra})
                                         for extra in {"", *extras}):
                todo.append((req.name, frozenset(req.extras)))
    pins.pop("shipyard")
    CONSTRAINTS.parent.mkdir(parents=True, exist_ok=True)
    CONSTRAINTS.write_text(
        "# The operator image's runtime dependencies, pinned to what the tests run with.\n"
        "# Regenerate: .venv/bin/python hack/localcluster/operator_image.py lock\n"
        + "".join(f"{name}=={pins[name]}\n" for name in sorted(pins))
    )
    print(f"wrote {len(pins)} pins to {CONSTRAINTS.relative_to(REPO)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build", "import", "ref", "lock"])
    args = parser.parse_args(argv)
    if args.command == "ref":
        print(reference())
        return 0
    if args.command == "lock":
        lock()
        return 0
    if os.geteuid() != 0:
        print("building the image needs root (file ownership in the root filesystem)",
              file=sys.stderr)
        return 2
    layout = Layout.default()
    try:
        ref = build(layout)[0] if args.command == "build" else import_image(layout)
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print(f"operator_image: {e}", file=sys.stderr)
        return 1
    print(ref)
    return 0


if __name__ == "__main__":
    sys.exit(main())
