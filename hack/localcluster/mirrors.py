"""containerd's registry mirrors on the local cluster: the same path-preserving map builds use
(imagebuilds.MIRRORS), as `hosts.toml` files under containerd's CRI `config_path`, so that a
task's prebuilt `docker_image = "ubuntu:24.04"` is pulled from the local registry's stand-in
exactly as `FROM ubuntu:24.04` in a Dockerfile is built from it:

    docker.io/library/ubuntu:24.04  ->  http://127.0.0.1:5055/v2/library/ubuntu/...
    ghcr.io/org/x:tag               ->  http://127.0.0.1:5055/v2/ghcr.io/org/x/...

The files are read on each pull (changing them needs no restart); `config_path` itself is read
when containerd starts, so a containerd that started without it is restarted once by `up`
(`localcluster.py restart containerd`: only its own process is stopped; the containers' shims
and so the pods go on running).
"""

from __future__ import annotations

from pathlib import Path

from imagebuilds import MIRRORS, REGISTRY
from layout import Layout

UPSTREAM = {"docker.io": "https://registry-1.docker.io"}


def hosts_dir(layout: Layout) -> Path:
    return layout.state / "registry-hosts"


def containerd_settings(layout: Layout) -> str:
    """The CRI section that points containerd at the hosts files."""
    return (f'  [plugins."io.containerd.grpc.v1.cri".registry]\n'
            f'    config_path = "{hosts_dir(layout)}"\n')


def hosts_toml(host: str, mirror: str) -> str:
    """One registry's hosts.toml: the mirror first (pull and resolve), then the registry
    itself as containerd's fallback. The mirror's path is the API root (`override_path`)."""
    server = UPSTREAM.get(host, f"https://{host}")
    _, _, prefix = mirror.partition("/")
    root = f"http://{REGISTRY}/v2" + (f"/{prefix}" if prefix else "")
    override = "\n  override_path = true" if prefix else ""
    return (f'server = "{server}"\n\n[host."{root}"]\n  capabilities = ["pull", "resolve"]\n'
            f"  skip_verify = true{override}\n")


def write_hosts(layout: Layout) -> None:
    for host, mirror in MIRRORS.items():
        d = hosts_dir(layout) / host
        d.mkdir(parents=True, exist_ok=True)
        text = hosts_toml(host, mirror)
        path = d / "hosts.toml"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


def marker(layout: Layout) -> Path:
    """The pid of the containerd known to have read `config_path` (it started after it was
    configured)."""
    return layout.run / "containerd-mirrors.pid"


def loaded_by(layout: Layout, pid: int) -> bool:
    try:
        return int(marker(layout).read_text()) == pid
    except (FileNotFoundError, ValueError):
        return False


def record(layout: Layout, pid: int) -> None:
    marker(layout).write_text(str(pid))
