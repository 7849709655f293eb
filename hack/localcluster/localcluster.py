#!/usr/bin/env python3
"""A real single-node Kubernetes for Shipyard's tests and demos, without Docker.

    localcluster.py up       build what is missing, start (or reuse) the cluster, print timings
    localcluster.py down     stop exactly the processes `up` started and clean the host
    localcluster.py status   what runs, and whether the node is Ready
    localcluster.py restart COMPONENT [--kill]
                             stop one component (SIGTERM, or SIGKILL as a crash) and start it
                             again as configured; waits until it serves (chaos tests)
    localcluster.py env      `export KUBECONFIG=...` for a shell

Components are built from the Go module proxy (hack/localcluster/k8s) and Debian packages;
images are built from root filesystems and imported into containerd. See docs/development.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

import buildnet
import clusterdns
import cpython
import kueue
import mirrors
import operator_defaults
import webstandins
from components import APISERVER_URL, components, log_path, write_configs
from imagebuilds import (
    buildkitd_config_current,
    buildkitd_healthy,
    ensure_binaries,
    ensure_builder_image,
    ensure_seeds,
    record_buildkitd_config,
    registry_healthy,
)
from imagebuilds import write_configs as write_build_configs
from images import IMAGES, ensure_imported
from kubeproxy import kube_proxy_cleanup_argv
from kuberouter import (
    BuildError,
    ensure_kube_router,
    kube_router_cleanup,
    kube_router_healthy,
)
from layout import BRIDGE, HERE, KUBERNETES_VERSION, NODE_NAME, Layout
from pki import ensure_pki

DEBIAN_PACKAGES = [
    "etcd-server",
    "containerd",
    "runc",
    "containernetworking-plugins",
    "openssl",
    "umoci",
    "skopeo",
    "busybox-static",
    "debootstrap",
    "iptables",
    "ipset",
    "gcc",
    "libc6-dev",
    "iproute2",
    "nftables",
]
COMMANDS = {
    "etcd": "etcd-server",
    "containerd": "containerd",
    "runc": "runc",
    "openssl": "openssl",
    "umoci": "umoci",
    "skopeo": "skopeo",
    "busybox": "busybox-static",
    "debootstrap": "debootstrap",
    "iptables": "iptables",
    "ipset": "ipset",
    "gcc": "gcc",
    "ip": "iproute2",
    "nft": "nftables",
}
KUBE_BINARIES = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kubectl",
    "kube-proxy",
]
# kubelet changes these; `down` puts back what was there before `up`.
KUBELET_SYSCTLS = ["vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"]


class ClusterError(Exception):
    """A stage failed; the message says which component and shows the tail of its log."""


class Timings:
    def __init__(self) -> None:
        self.stages: list[tuple[str, float]] = []

    @contextmanager
    def stage(self, name: str):
        start = time.monotonic()
        yield
        took = time.monotonic() - start
        self.stages.append((name, took))
        print(f"  {name:<28} {took:6.1f}s", flush=True)

    def total(self) -> float:
        return sum(t for _, t in self.stages)


# ---------------------------------------------------------------- prerequisites and builds


def ensure_packages() -> None:
    missing = sorted({pkg for cmd, pkg in COMMANDS.items() if shutil.which(cmd) is None})
    if not Path("/usr/lib/cni/bridge").exists():
        missing.append("containernetworking-plugins")
    if (
        not Path("/usr/lib/x86_64-linux-gnu/libc.a").exists()
        and not Path("/usr/lib/libc.a").exists()
    ):
        missing.append("libc6-dev")
    if not missing:
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *sorted(set(missing))],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def ensure_kubernetes_binaries(layout: Layout) -> None:
    """Build the Kubernetes components from the Go module proxy once per version."""
    if all(layout.binary(b).exists() for b in KUBE_BINARIES):
        return
    if shutil.which("go") is None:
        raise ClusterError("Go is needed to build the Kubernetes components and is not on PATH")
    partial = layout.bin.with_name(layout.bin.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    ldflags = ["-s", "-w"]
    minor = KUBERNETES_VERSION.split(".")[1]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        ldflags += [
            f"-X {pkg}.gitVersion={KUBERNETES_VERSION}",
            f"-X {pkg}.gitMajor=1",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod")
    result = subprocess.run(
        [
            "go",
            "build",
            "-trimpath",
            "-ldflags",
            " ".join(ldflags),
            "-o",
            f"{partial}/",
            *[f"k8s.io/kubernetes/cmd/{b}" for b in KUBE_BINARIES],
        ],
        cwd=HERE / "k8s",
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise ClusterError(
            f"building Kubernetes {KUBERNETES_VERSION} failed:\n{result.stderr[-3000:]}"
        )
    shutil.rmtree(layout.bin, ignore_errors=True)
    partial.rename(layout.bin)


# ---------------------------------------------------------------- processes


def read_pids(layout: Layout) -> dict[str, int]:
    try:
        return json.loads(layout.pids.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped) is not alive for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def start(layout: Layout, name: str, argv: list[str], pids: dict[str, int]) -> None:
    log = open(log_path(layout, name), "ab")  # noqa: SIM115 - handed to the child
    log.write(f"\n==== {time.ctime()} {' '.join(argv)}\n".encode())
    log.flush()
    proc = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=dict(os.environ, PATH=_path()),
        # buildkitd's own egress (ADD <url>) is filtered by its cgroup (buildnet.py).
        preexec_fn=buildnet.confine_self if name == "buildkitd" else None,
    )
    pids[name] = proc.pid
    layout.pids.write_text(json.dumps(pids))
    if name == "buildkitd":
        record_buildkitd_config(layout)


def _path() -> str:
    return os.environ.get("PATH", "") + ":/usr/sbin:/sbin"


def log_tail(layout: Layout, name: str, lines: int = 25) -> str:
    try:
        text = log_path(layout, name).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text[-lines:])


def wait_until(layout: Layout, name: str, pids: dict[str, int], check, timeout: float) -> None:
    """Poll `check` until it holds; fail naming the component if it dies or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if name in pids and not alive(pids[name]):
            raise ClusterError(
                f"{name} exited during start. Last lines of its log "
                f"({log_path(layout, name)}):\n{log_tail(layout, name)}"
            )
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, subprocess.SubprocessError):
            pass
        time.sleep(0.1)
    raise ClusterError(
        f"{name} did not become ready within {timeout:.0f}s. Last lines of its "
        f"log ({log_path(layout, name)}):\n{log_tail(layout, name)}"
    )


def stop_pid(pid: int, grace: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not alive(pid):
                return
            time.sleep(0.05)


# ---------------------------------------------------------------- health


def _ssl_context(layout: Layout) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    ctx.load_cert_chain(str(layout.pki / "admin.crt"), str(layout.pki / "admin.key"))
    return ctx


def api_get(layout: Layout, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(
            APISERVER_URL + path, context=_ssl_context(layout), timeout=timeout
        ) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def apiserver_ready(layout: Layout) -> bool:
    return api_get(layout, "/readyz")[0] == 200


def node_ready(layout: Layout) -> bool:
    status, body = api_get(layout, f"/api/v1/nodes/{NODE_NAME}")
    if status != 200:
        return False
    conditions = json.loads(body).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def default_service_account(layout: Layout) -> bool:
    return api_get(layout, "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200


def healthy(layout: Layout) -> bool:
    pids = read_pids(layout)
    names = [c.name for c in components(layout)]
    if not pids or any(n not in pids or not alive(pids[n]) for n in names):
        return False
    try:
        return apiserver_ready(layout) and node_ready(layout)
    except (OSError, urllib.error.URLError):
        return False


def healthy_within(layout: Layout, seconds: float) -> bool:
    """`healthy`, allowing a busy apiserver a few slow /readyz answers before a restart."""
    deadline = time.monotonic() + seconds
    while True:
        if healthy(layout):
            return True
        if time.monotonic() >= deadline or not read_pids(layout):
            return False
        time.sleep(1)


# ---------------------------------------------------------------- up / down


def up() -> int:
    layout = Layout.default()
    began = time.monotonic()
    t = Timings()
    if update_in_place(layout) and healthy_within(layout, 15):
        # The kubelet's eviction under disk pressure deletes unused images, the pod sandbox's
        # `pause` among them (containerd 1.6 does not pin it): no pod could start after.
        for image in IMAGES:
            ensure_imported(layout, image)
        ensure_runner_image(layout)
        ensure_mirrors(layout)
        ensure_cluster_dns(layout)
        ensure_python_downloads(layout)
        ensure_seeds(layout)
        ensure_kueue(layout)
        confine_buildkitd(layout)
        print(f"reusing the running cluster (KUBECONFIG={layout.kubeconfig})")
        return 0
    print(f"starting the local cluster (Kubernetes {KUBERNETES_VERSION})", flush=True)
    if read_pids(layout):
        with t.stage("stop leftovers"):
            down_quietly(layout)
    with t.stage("debian packages"):
        ensure_packages()
    with t.stage("kubernetes binaries"):
        ensure_kubernetes_binaries(layout)
    with t.stage("kube-router binary"):
        ensure_kube_router(layout)
    with t.stage("buildkit, registry binaries"):
        ensure_binaries(layout)
    with t.stage("certificates and configs"):
        ensure_pki(layout.pki)
        write_configs(layout)
        record_sysctls(layout)
    for stage in ("images (build)",):
        with t.stage(stage):
            from images import build_archive

            for image in IMAGES:
                build_archive(layout, image)
    pids: dict[str, int] = {}
    procs = {c.name: c for c in components(layout)}
    with t.stage("containerd"):
        start(layout, "containerd", procs["containerd"].argv, pids)
        wait_until(layout, "containerd", pids, lambda: containerd_serving(layout), 30)
        mirrors.record(layout, pids["containerd"])
    with t.stage("etcd"):
        start(layout, "etcd", procs["etcd"].argv, pids)
    with t.stage("images (import)"):
        for image in IMAGES:
            ensure_imported(layout, image)
        ensure_builder_image(layout)
        ensure_runner_image(layout)
    with t.stage("kube-apiserver"):
        wait_until(layout, "etcd", pids, lambda: _etcd_healthy(), 30)
        start(layout, "kube-apiserver", procs["kube-apiserver"].argv, pids)
        wait_until(layout, "kube-apiserver", pids, lambda: apiserver_ready(layout), 90)
    with t.stage("controllers, scheduler"):
        for name in ("kube-controller-manager", "kube-scheduler"):
            start(layout, name, procs[name].argv, pids)
    with t.stage("kubelet, node Ready"):
        start(layout, "kubelet", procs["kubelet"].argv, pids)
        wait_until(layout, "kubelet", pids, lambda: node_ready(layout), 90)
    with t.stage("kube-proxy (Services)"):
        # After the node registered: kube-proxy reads the node's addresses at start.
        start(layout, "kube-proxy", procs["kube-proxy"].argv, pids)
    with t.stage("kube-router (NetworkPolicy)"):
        start(layout, "kube-router", procs["kube-router"].argv, pids)
        wait_until(layout, "kube-router", pids, kube_router_healthy, 60)
    with t.stage("registry, buildkitd"):
        start_builds(layout, procs, pids)
        start(layout, "web-stand-ins", procs["web-stand-ins"].argv, pids)
    with t.stage("default ServiceAccount"):
        wait_until(
            layout, "kube-controller-manager", pids, lambda: default_service_account(layout), 60
        )
    with t.stage("base image stand-ins, uv's Pythons"):
        ensure_python_downloads(layout)
        ensure_seeds(layout)
    with t.stage("cluster DNS (CoreDNS)"):
        ensure_cluster_dns(layout)
    with t.stage("kueue, node accelerators"):
        ensure_kueue(layout)
    print(
        f"cluster ready in {time.monotonic() - began:.1f}s; export KUBECONFIG={layout.kubeconfig}"
    )
    return 0


def update_in_place(layout: Layout) -> bool:
    """A running cluster whose components' command lines changed since it started (for example
    a component was added), or whose buildkitd configuration did: restart or start just those,
    keeping etcd, containerd and the pods.
    True when the cluster runs as configured now (or was brought there); False when it needs a
    full start (nothing runs, or etcd/containerd are not as configured)."""
    pids = read_pids(layout)
    wanted = components(layout)
    core = ("containerd", "etcd")
    if not pids or any(
        c.name in core and (c.name not in pids or not alive(pids[c.name]) or
                            _cmdline(pids[c.name]) != c.argv)
        for c in wanted
    ):
        return False
    ensure_pki(layout.pki)
    ensure_packages()  # nftables, for a cluster started before builds' egress was filtered
    write_build_configs(layout)  # buildkitd's file: a change of it restarts buildkitd too
    stale = [
        c for c in wanted
        if c.name not in pids or not alive(pids[c.name]) or _cmdline(pids[c.name]) != c.argv
        or (c.name == "buildkitd" and not buildkitd_config_current(layout))
    ]
    if not stale:
        return True
    ensure_kubernetes_binaries(layout)
    ensure_kube_router(layout)
    ensure_binaries(layout)
    ensure_pki(layout.pki)
    write_configs(layout)
    ensure_builder_image(layout)
    for c in stale:
        print(f"  restarting {c.name} with its current configuration", flush=True)
        if c.name in pids and alive(pids[c.name]):
            stop_pid(pids.pop(c.name), 3 if c.name == "kube-apiserver" else 5)
        start(layout, c.name, c.argv, pids)
        if c.name == "kube-apiserver":
            wait_until(layout, c.name, pids, lambda: apiserver_ready(layout), 90)
        if c.name in ("registry", "buildkitd"):
            wait_build_component(layout, c.name, pids)
    wait_until(layout, "kubelet", pids, lambda: node_ready(layout), 90)
    ensure_seeds(layout)
    return True


def ensure_python_downloads(layout: Layout) -> None:
    """This machine's CPythons as uv downloads, for the stand-in for astral.sh (cpython.py)."""
    cpython.ensure_uv_downloads(webstandins.cache_dir(layout.cache) / "python")


def ensure_runner_image(layout: Layout) -> None:
    """The static Go runner's image (runner_image.py), imported once per content hash: a warm
    `up` only compares a hash and lists containerd's images."""
    import runner_image

    try:
        runner_image.import_image(layout)
    except RuntimeError as e:
        raise ClusterError(str(e)) from None


def ensure_mirrors(layout: Layout) -> None:
    """The registry mirrors' hosts files (mirrors.py); a containerd that started before they
    were configured is restarted once to read its `config_path`."""
    mirrors.write_hosts(layout)
    pid = read_pids(layout).get("containerd")
    if pid is not None and not mirrors.loaded_by(layout, pid):
        (layout.state / "containerd.toml").write_text(_containerd_toml(layout))
        print("  restarting containerd once: it started without the registry mirrors",
              flush=True)
        restart("containerd")
        mirrors.record(layout, read_pids(layout)["containerd"])


def _containerd_toml(layout: Layout) -> str:
    from components import _containerd_config

    return _containerd_config(layout)


def ensure_cluster_dns(layout: Layout) -> None:
    """CoreDNS and the kube-dns Service (clusterdns.py); a kubelet started before the cluster
    had DNS, or before its pods had a PID limit, is restarted once to read its configuration."""
    try:
        clusterdns.apply(layout, str(layout.binary("kubectl")))
        operator_defaults.apply(layout, str(layout.binary("kubectl")))
    except (RuntimeError, BuildError) as e:
        raise ClusterError(str(e)) from None
    from components import _kubelet_config, kubelet_lacks

    missing = kubelet_lacks(_kubelet_configz(layout))
    if missing:
        (layout.state / "kubelet.yaml").write_text(_kubelet_config(layout))
        print(f"  restarting kubelet once: it started without {' and '.join(missing)}",
              flush=True)
        restart("kubelet")


def _kubelet_configz(layout: Layout) -> dict:
    """The running kubelet's configuration, from its own /configz (the apiserver's node proxy
    refuses the loopback node address); {} when it does not answer."""
    ctx = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    ctx.load_cert_chain(str(layout.pki / "apiserver-kubelet-client.crt"),
                        str(layout.pki / "apiserver-kubelet-client.key"))
    try:
        with urllib.request.urlopen("https://127.0.0.1:10250/configz", context=ctx,
                                    timeout=10) as resp:
            return json.loads(resp.read())
    except (OSError, urllib.error.URLError, ValueError):
        return {"kubeletconfig": {"clusterDNS": ["unknown"]}}  # not known: no restart
def ensure_kueue(layout: Layout) -> None:
    """Kueue and the node's accelerators (kueue.py), added to a running cluster as needed."""
    kueue.ensure(layout, start, read_pids(layout), alive)


def confine_buildkitd(layout: Layout) -> None:
    """A buildkitd started before its egress was filtered joins its cgroup (no restart)."""
    pid = read_pids(layout).get("buildkitd")
    if pid is not None and alive(pid) and buildnet.confine(pid):
        print("  buildkitd moved into its cgroup: its own fetches (ADD <url>) are filtered now",
              flush=True)


def start_builds(layout: Layout, procs: dict, pids: dict[str, int]) -> None:
    for name in ("registry", "buildkitd"):
        start(layout, name, procs[name].argv, pids)
    for name in ("registry", "buildkitd"):
        wait_build_component(layout, name, pids)


def wait_build_component(layout: Layout, name: str, pids: dict[str, int]) -> None:
    check = registry_healthy if name == "registry" else (lambda: buildkitd_healthy(layout))
    wait_until(layout, name, pids, check, 60)


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


def containerd_serving(layout: Layout) -> bool:
    """True once containerd answers over gRPC: the socket file appears before it serves."""
    if not layout.containerd_sock.exists():
        return False
    result = subprocess.run(
        ["ctr", "-a", str(layout.containerd_sock), "version"],
        capture_output=True, timeout=5,
    )
    return result.returncode == 0


def _etcd_healthy() -> bool:
    with urllib.request.urlopen("http://127.0.0.1:2379/health", timeout=2) as resp:
        return json.loads(resp.read()).get("health") == "true"


def record_sysctls(layout: Layout) -> None:
    if layout.sysctls.exists():
        return
    values = {k: Path("/proc/sys", k).read_text().strip() for k in KUBELET_SYSCTLS}
    layout.sysctls.write_text(json.dumps(values))


def restore_sysctls(layout: Layout) -> None:
    try:
        values = json.loads(layout.sysctls.read_text())
    except FileNotFoundError:
        return
    for key, value in values.items():
        try:
            Path("/proc/sys", key).write_text(value)
        except OSError as e:
            print(f"could not restore {key}: {e}", file=sys.stderr)
    layout.sysctls.unlink()


def remove_containers(layout: Layout) -> None:
    """kubelet leaves containers running when it stops; remove them while containerd is up."""
    if not layout.containerd_sock.exists():
        return
    ctr = ["ctr", "-a", str(layout.containerd_sock), "-n", "k8s.io"]
    listed = subprocess.run([*ctr, "containers", "ls", "-q"], capture_output=True, text=True)
    for cid in listed.stdout.split():
        subprocess.run([*ctr, "tasks", "kill", "-s", "SIGKILL", cid], capture_output=True)
    for cid in listed.stdout.split():
        for _ in range(20):
            gone = subprocess.run([*ctr, "tasks", "delete", "-f", cid], capture_output=True)
            if gone.returncode == 0 or b"not found" in gone.stderr:
                break
            time.sleep(0.1)
        subprocess.run([*ctr, "containers", "delete", cid], capture_output=True)


def clean_host(layout: Layout) -> None:
    """Unmount leftovers, delete pod network namespaces and the bridge, remove pod cgroups."""
    roots = (str(layout.kubelet_root), str(layout.run), str(layout.state / "containerd"),
             str(layout.state / "buildkit"))
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for target in sorted((m for m in mounts if m.startswith(roots)), key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)
    netns = Path("/var/run/netns")
    if netns.exists():
        for ns in netns.glob("cni-*"):
            subprocess.run(["ip", "netns", "delete", ns.name], capture_output=True)
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True)
    for controller in Path("/sys/fs/cgroup").iterdir():
        pods = controller / "kubepods"
        if pods.is_dir():
            # Deepest first; directories may vanish while we walk (kubelet just exited).
            found = [Path(root) for root, _, _ in os.walk(pods, onerror=lambda e: None)]
            for d in sorted(found, key=lambda p: -len(p.parts)):
                _rmdir(d)
    # A fresh etcd and kubelet state for the next `up`; certificates and images are kept.
    for d in ("etcd", "kubelet", "kubelet-pki", "cni/ipam", "buildkit-cni/ipam"):
        shutil.rmtree(layout.state / d, ignore_errors=True)


def _rmdir(path: Path) -> None:
    with suppress(OSError):
        path.rmdir()


def down_quietly(layout: Layout) -> None:
    pids = read_pids(layout)
    if "kueue" in pids:
        stop_pid(pids.pop("kueue"), 5)
    if "kubelet" in pids:
        stop_pid(pids.pop("kubelet"), 5)
    remove_containers(layout)
    for name in ("buildkitd", "registry"):
        if name in pids:
            stop_pid(pids.pop(name), 10)
    if "web-stand-ins" in pids:
        stop_pid(pids.pop("web-stand-ins"), 5)
    webstandins.remove_address()
    buildnet.cleanup()
    if "kube-router" in pids:
        stop_pid(pids.pop("kube-router"), 5)
    kube_router_cleanup(layout)
    if "kube-proxy" in pids:
        stop_pid(pids.pop("kube-proxy"), 5)
        subprocess.run(kube_proxy_cleanup_argv(layout), capture_output=True)
    for name in (
        "kube-scheduler",
        "kube-controller-manager",
        "kube-apiserver",
        "etcd",
        "containerd",
    ):
        if name in pids:
            stop_pid(pids.pop(name), 3 if name == "kube-apiserver" else 5)
    clean_host(layout)
    restore_sysctls(layout)
    layout.pids.unlink(missing_ok=True)


def down() -> int:
    layout = Layout.default()
    began = time.monotonic()
    down_quietly(layout)
    print(f"local cluster stopped and cleaned in {time.monotonic() - began:.1f}s")
    return 0


def status() -> int:
    layout = Layout.default()
    pids = read_pids(layout)
    ok = True
    for c in components(layout):
        pid = pids.get(c.name)
        running = pid is not None and alive(pid)
        ok = ok and running
        print(f"{c.name:<24} {'running' if running else 'stopped':<8} {pid or ''}")
    ready = False
    if ok:
        try:
            ready = node_ready(layout)
        except (OSError, urllib.error.URLError):
            ready = False
    print(f"node {NODE_NAME} {'Ready' if ready else 'not ready'}; KUBECONFIG={layout.kubeconfig}")
    return 0 if ready else 1


RESTARTABLE = ("containerd", "etcd", "kube-apiserver", "kube-controller-manager",
               "kube-scheduler", "kubelet", "kube-proxy", "kube-router", "registry", "buildkitd")
"""containerd is stopped alone (its pid, not its process group): the containers' shims, in
process groups of their own, keep the pods running while it restarts, as on a node where
containerd's service is restarted."""


def restart(name: str, kill: bool = False) -> int:
    """One component of the running cluster stopped and started again with its configured
    command line, its state kept (etcd's data, kubelet's pods, containers go on running); back
    when it serves again: etcd healthy, apiserver ready, node Ready, ... Prints the seconds it was
    down. The chaos bench (bench/chaos.py) restarts the apiserver, etcd and kubelet this way."""
    layout = Layout.default()
    pids = read_pids(layout)
    if not (name in pids and alive(pids[name])):
        raise ClusterError(f"{name} is not running (localcluster.py status); nothing to restart")
    component = next(c for c in components(layout) if c.name == name)
    began, since = time.monotonic(), time.time()
    pid = pids.pop(name)
    if name == "containerd":
        _stop_alone(pid, signal.SIGKILL if kill else signal.SIGTERM)
    elif kill:
        with suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    else:
        stop_pid(pid, 3 if name == "kube-apiserver" else 5)
    # Its ports are free once every thread is gone, not when its main thread is a zombie.
    deadline = time.monotonic() + 30
    while not _all_threads_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    start(layout, name, component.argv, pids)
    checks = {
        "containerd": lambda: containerd_serving(layout),
        "etcd": _etcd_healthy,
        "kube-apiserver": lambda: apiserver_ready(layout),
        "kubelet": lambda: _kubelet_serving(layout, since),
        "kube-router": kube_router_healthy,
    }
    if name in ("registry", "buildkitd"):
        wait_build_component(layout, name, pids)
    else:
        wait_until(layout, name, pids, checks.get(name, lambda: True), 90)
    print(f"{name} restarted ({'SIGKILL' if kill else 'SIGTERM'}): serving again after "
          f"{time.monotonic() - began:.1f}s")
    return 0


def _stop_alone(pid: int, sig: int) -> None:
    """Signal only `pid` (not its process group) and wait for it to exit (SIGKILL after 10 s)."""
    with suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with suppress(ProcessLookupError):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def _all_threads_gone(pid: int) -> bool:
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return True
    return len(threads) <= 1 and not alive(pid)


KUBELET_HEALTHZ = "http://127.0.0.1:10248/healthz"  # the kubelet's default healthz port


def _kubelet_serving(layout: Layout, since: float) -> bool:
    """The node's Ready condition may still be the old kubelet's: its heartbeat must come after
    `since`, and the kubelet's health endpoint must answer."""
    status, body = api_get(layout, f"/api/v1/nodes/{NODE_NAME}")
    if status != 200:
        return False
    conditions = json.loads(body).get("status", {}).get("conditions", [])
    ready = next((c for c in conditions if c["type"] == "Ready"), {})
    beat = ready.get("lastHeartbeatTime")
    if ready.get("status") != "True" or not beat:
        return False
    heartbeat = datetime.strptime(beat, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    if heartbeat <= since:  # whole seconds: one in the second of the restart may be the old one's
        return False
    with urllib.request.urlopen(KUBELET_HEALTHZ, timeout=2) as resp:
        return resp.status == 200


def env() -> int:
    layout = Layout.default()
    print(f"export KUBECONFIG={layout.kubeconfig}")
    print(f"export PATH={layout.bin}:$PATH")
    # What an operator run by hand uses here: it reads them from the cluster (commented out, so
    # that an `eval` does not hand them to every process of the shell, test operators included).
    print("# `shipyard operator` run by hand reads these from kube-public/shipyard-localcluster:")
    print("\n".join(f"#   {line}" for line in operator_defaults.exports()))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "down", "status", "env", "restart"])
    parser.add_argument("component", nargs="?", choices=RESTARTABLE,
                        help="for restart: the component")
    parser.add_argument("--kill", action="store_true",
                        help="for restart: SIGKILL (a crash) rather than SIGTERM")
    args = parser.parse_args(argv)
    if (args.command == "restart") != (args.component is not None) or (
            args.kill and args.command != "restart"):
        parser.error("restart takes one COMPONENT (and --kill); the other commands neither")
    if os.geteuid() != 0:
        print(
            "the local cluster needs root (containerd, kubelet, network namespaces)",
            file=sys.stderr,
        )
        return 2
    try:
        if args.command == "restart":
            return restart(args.component, args.kill)
        return {"up": up, "down": down, "status": status, "env": env}[args.command]()
    except (ClusterError, BuildError) as e:
        print(f"localcluster: {e}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as e:
        detail = (e.stderr or "").strip()[-2000:] if isinstance(e.stderr, str) else ""
        print(
            f"localcluster: {' '.join(map(str, e.cmd))} exited {e.returncode}"
            + (f": {detail}" if detail else ""),
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
