#!/usr/bin/env python3
"""Images for running the chart's own buildkitd on the local cluster (tests/e2e/
test_install_builds.py): the local cluster runs buildkitd and the registry as host processes,
and moby/buildkit cannot be pulled here (package registries only), so the same binaries go into
images of their own, imported into the local cluster's containerd.

    chart_images.py import    build if needed, import, print the two references

- `localhost/shipyard/buildkitd:<version>`: busybox, buildkitd and buildctl (the Go builds of
  imagebuilds.py) and the host's runc with the libraries it links (the OCI worker runs it), as
  in moby/buildkit's image; run privileged by the chart.
- `localhost/shipyard/registry:<version>`: busybox and CNCF distribution's registry serving
  plain HTTP on :5000 with storage in /var/lib/registry: an in-cluster registry for the chart's
  builds to push to (the host's registry listens on 127.0.0.1 only).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from imagebuilds import (
    BUILDKIT_VERSION,
    REGISTRY_VERSION,
    buildkit_dir,
    ensure_binaries,
    registry_dir,
)
from images import (
    PATH_ENV,
    _busybox_rootfs,
    _runner,
    imported_tags,
    write_archive,
)
from layout import Layout

IMAGE_BUILDKITD = f"localhost/shipyard/buildkitd:{BUILDKIT_VERSION}"
IMAGE_REGISTRY = f"localhost/shipyard/registry:{REGISTRY_VERSION}"
RUNC = Path("/usr/sbin/runc")
REGISTRY_CONFIG = """\
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: /var/lib/registry}
  delete: {enabled: true}
http: {addr: ':5000'}
"""


def _copy_with_libraries(binary: Path, root: Path, into: str) -> None:
    """`binary` at `into` and each shared library it links at its own path."""
    target = root / into.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(binary, target)
    listed = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        path = next((p for p in line.split() if p.startswith("/")), None)
        if path:
            lib = root / path.lstrip("/")
            lib.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(path).resolve(), lib)


def _buildkitd_rootfs(layout: Layout, root: Path) -> None:
    _busybox_rootfs(layout, root)
    for name in ("buildkitd", "buildctl"):
        _copy_with_libraries(buildkit_dir(layout) / name, root, f"/usr/bin/{name}")
    _copy_with_libraries(RUNC, root, "/usr/bin/runc")
    for d in ("run/buildkit", "var/lib/buildkit", "etc/buildkit"):
        (root / d).mkdir(parents=True, exist_ok=True)


def _registry_rootfs(layout: Layout, root: Path) -> None:
    _busybox_rootfs(layout, root)
    _copy_with_libraries(registry_dir(layout) / "registry", root, "/usr/bin/registry")
    (root / "etc" / "registry").mkdir(parents=True, exist_ok=True)
    (root / "etc" / "registry" / "config.yml").write_text(REGISTRY_CONFIG)
    (root / "var" / "lib" / "registry").mkdir(parents=True, exist_ok=True)


# (tag, archive, rootfs, entrypoint, cmd): the chart passes buildkitd only its arguments, as
# to moby/buildkit, whose entrypoint is buildkitd.
IMAGES = (
    (IMAGE_BUILDKITD, f"buildkitd-{BUILDKIT_VERSION}.tar", _buildkitd_rootfs,
     ("/usr/bin/buildkitd",), ()),
    (IMAGE_REGISTRY, f"registry-{REGISTRY_VERSION}.tar", _registry_rootfs,
     ("/usr/bin/registry",), ("serve", "/etc/registry/config.yml")),
)


def ensure_imported(layout: Layout, tag: str, archive: str, rootfs, entrypoint: tuple[str, ...],
                    cmd: tuple[str, ...]) -> None:
    if tag in imported_tags(layout):
        return
    config = [f"--config.env={PATH_ENV}",
              *[f"--config.entrypoint={part}" for part in entrypoint],
              *[f"--config.cmd={part}" for part in cmd]]
    out = write_archive(layout, tag, layout.images / archive,
                        lambda root: rootfs(layout, root), config)
    _runner()("ctr", "-a", str(layout.containerd_sock), "-n", "k8s.io", "images", "import",
              str(out))


def main(argv: list[str]) -> int:
    if argv != ["import"]:
        print(__doc__, file=sys.stderr)
        return 2
    layout = Layout.default()
    ensure_binaries(layout)
    for image in IMAGES:
        ensure_imported(layout, *image)
        print(image[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
