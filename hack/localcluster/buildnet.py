"""The build network: where a Dockerfile's `RUN` steps go on the local cluster.

buildkitd's OCI worker puts every `RUN` container in a network namespace of its own on the
bridge `shipyard-bk0` (CNI `bridge` + `host-local`, masqueraded to the host's uplink), instead of
the host's network. A chain in the `raw` table, hooked first in PREROUTING for packets from that
bridge, drops what a build must never reach, before kube-proxy's DNAT or kube-router's accepts
see the packet:

- every address of the host itself (`addrtype LOCAL`): etcd, the apiserver on each address it
  answers on, the kubelet, the registry (pushes would overwrite other tasks' images), buildkitd;
- the pod CIDR, the Service CIDR (before DNAT, so `kubernetes.default` too) and link-local
  (169.254.0.0/16, the metadata address on clouds);
- another build's container: IPv4 between two build addresses is dropped as the bridge forwards
  it (an nftables `bridge` table, whether or not br_netfilter hands bridged frames to iptables)
  and in the chain above; IPv6 (link-local addresses, which every container has) from the
  bridge is dropped in ip6tables' raw PREROUTING (bridged frames reach it through br_netfilter,
  which `apply` keeps on). So one task's `RUN` step cannot talk to a concurrent build's.

One exception comes first: the stand-in for astral.sh (`webstandins.ADDRESS`, a host address),
on TCP 443 only, which builds name through the operator's SHIPYARD_BUILD_ADD_HOSTS.

What remains is the outside world: DNS servers, package archives, registries, proxies.
`RUN --network=host` needs the `network.host` entitlement, which this buildkitd does not grant.

buildkitd itself fetches `ADD <url>` sources (and git sources) on the host's network, not in a
build container. It runs in a cgroup of its own (`shipyard-buildkitd`, cgroup v2), and an
nftables chain hooked on output before kube-proxy's DNAT and kube-router's accepts (priority
mangle) refuses every new connection of that cgroup to the same places, with an ICMP
"host unreachable" (the build fails at once: `connect: no route to host`), except:
the registry at exactly 127.0.0.1:5055 (the stand-in bases and the pushes of built images) and
port 53 of the host's own resolvers. Applied idempotently by `up` (a running buildkitd is moved
into the cgroup, no restart); removed by `down`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import subprocess
from pathlib import Path

from layout import POD_CIDR, SERVICE_CIDR, Layout
from webstandins import ADDRESS as WEB_STAND_IN

BUILD_BRIDGE = "shipyard-bk0"
BUILD_CIDR = "10.89.0.0/16"
CHAIN = "SHIPYARD-BUILD-NET"
LINK_LOCAL = "169.254.0.0/16"
BLOCKED_CIDRS = (POD_CIDR, SERVICE_CIDR, LINK_LOCAL)
COMMENT = "shipyard-build-network"  # no spaces: compared with `iptables -S` as printed
_JUMP = ["PREROUTING", "-i", BUILD_BRIDGE, "-m", "comment", "--comment", COMMENT, "-j", CHAIN]
# buildkitd's own egress (ADD <url>, git sources): an nftables table of its own.
NFT_TABLE = "shipyard_build"
BUILDKITD_CGROUP = "shipyard-buildkitd"
REGISTRY_ADDR = ("127.0.0.1", 5055)  # imagebuilds.REGISTRY: the only host port buildkitd reaches
BLOCKED_CIDRS_V6 = ("::1/128", "fe80::/10", "fc00::/7")  # loopback, link-local, ULA
CGROUP_ROOT = Path("/sys/fs/cgroup")


def cni_config_path(layout: Layout):
    # Outside cni_conf: the kubelet's CNI must not pick this one up.
    return layout.state / "buildkit-cni" / "shipyard-build.conflist"


def cni_config(layout: Layout) -> dict:
    return {
        "cniVersion": "0.4.0",
        "name": "shipyard-build",
        "plugins": [{
            "type": "bridge",
            "bridge": BUILD_BRIDGE,
            "isGateway": True,
            "ipMasq": True,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": BUILD_CIDR}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": str(layout.state / "buildkit-cni" / "ipam"),
            },
        }],
    }


def write_config(layout: Layout) -> None:
    path = cni_config_path(layout)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cni_config(layout), indent=2))


def rules() -> list[list[str]]:
    """The chain's rules, in order (arguments after `-A CHAIN`, as `iptables -S` prints them)."""
    stand_in = ["-d", f"{WEB_STAND_IN}/32", "-p", "tcp", "-m", "tcp", "--dport", "443"]
    drops = [["-m", "addrtype", "--dst-type", "LOCAL"]]
    drops += [["-d", cidr] for cidr in (*BLOCKED_CIDRS, BUILD_CIDR)]
    return [[*stand_in, "-m", "comment", "--comment", COMMENT, "-j", "ACCEPT"],
            *([*match, "-m", "comment", "--comment", COMMENT, "-j", "DROP"] for match in drops)]


def _ipt(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", "-t", "raw", *args], capture_output=True,
                          text=True, check=check)


_JUMP6 = ["PREROUTING", "-i", BUILD_BRIDGE, "-m", "comment", "--comment", COMMENT, "-j", "DROP"]
BR_NETFILTER = ("bridge-nf-call-iptables", "bridge-nf-call-ip6tables")


def _ipt6(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip6tables", "-w", "-t", "raw", *args], capture_output=True,
                          text=True, check=check)


def apply_ipv6() -> None:
    """Builds have IPv4 only: every IPv6 packet from the bridge (a container's link-local address
    towards another's or the host's) is dropped. Bridged frames reach ip6tables through
    br_netfilter, kept on here as Kubernetes nodes have it."""
    for key in BR_NETFILTER:
        path = Path("/proc/sys/net/bridge", key)
        if path.exists() and path.read_text().strip() != "1":
            path.write_text("1")
    hooked = [line for line in _ipt6("-S", "PREROUTING").stdout.splitlines()
              if line.startswith("-A ")]
    if not hooked or COMMENT not in hooked[0]:
        while _ipt6("-C", *_JUMP6, check=False).returncode == 0:
            _ipt6("-D", *_JUMP6)
        _ipt6("-I", _JUMP6[0], "1", *_JUMP6[1:])


def apply() -> None:
    """Create or refresh the chain and hook it first in raw PREROUTING (idempotent)."""
    if _ipt("-S", CHAIN, check=False).returncode != 0:
        _ipt("-N", CHAIN)
    current = [line.split()[2:] for line in _ipt("-S", CHAIN).stdout.splitlines()
               if line.startswith("-A ")]
    if current != rules():
        _ipt("-F", CHAIN)
        for rule in rules():
            _ipt("-A", CHAIN, *rule)
    hooked = _ipt("-S", "PREROUTING").stdout.splitlines()
    first = next((line for line in hooked if line.startswith("-A ")), "")
    if CHAIN not in first.split():
        while _ipt("-C", *_JUMP, check=False).returncode == 0:
            _ipt("-D", *_JUMP)
        _ipt("-I", _JUMP[0], "1", *_JUMP[1:])
    apply_ipv6()
    apply_nft()


def cgroup2_mount() -> Path:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a
    hybrid host)."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    raise RuntimeError("no cgroup v2 hierarchy is mounted: buildkitd's egress filter needs one "
                       "(mount -t cgroup2 none /sys/fs/cgroup/unified)")


def buildkitd_cgroup() -> Path:
    return cgroup2_mount() / BUILDKITD_CGROUP


BUILD_CGROUP = "buildkit"
"""Where buildkitd's runc puts each `RUN` container (`/buildkit/<id>`, from the root of each
hierarchy, not under buildkitd's own cgroup)."""
BUILD_PIDS_LIMIT = 4096
"""Processes and threads of every `RUN` step at once: a task's Dockerfile that fork-bombs
(`RUN b() { b | b & }; b`) fails its own build instead of taking the node's PIDs (on a real
cluster buildkitd is a pod, held by the kubelet's podPidsLimit: docs/trust.md)."""


def build_pids_group() -> tuple[Path, Path | None] | None:
    """The pids cgroup every `RUN` container goes under, and (cgroup v2) the root whose
    subtree_control must hand it the pids controller; None without a pids controller."""
    v1 = Path("/sys/fs/cgroup/pids")
    if (v1 / "cgroup.procs").exists():
        return v1 / BUILD_CGROUP, None
    with contextlib.suppress(OSError, RuntimeError):
        root = cgroup2_mount()
        if "pids" in (root / "cgroup.controllers").read_text().split():
            return root / BUILD_CGROUP, root
    return None


def limit_build_processes() -> bool:
    """Hold every `RUN` step of every build to BUILD_PIDS_LIMIT processes together
    (idempotent; runc makes each container's cgroup inside this one). False: no pids
    controller here."""
    found = build_pids_group()
    if found is None:
        return False
    group, v2_root = found
    if v2_root is not None and "pids" not in (v2_root / "cgroup.subtree_control").read_text():
        (v2_root / "cgroup.subtree_control").write_text("+pids")
    group.mkdir(exist_ok=True)
    if (group / "pids.max").read_text().strip() != str(BUILD_PIDS_LIMIT):
        (group / "pids.max").write_text(str(BUILD_PIDS_LIMIT))
    return True


def confine(pid: int) -> bool:
    """Move buildkitd (all its threads) into its cgroup; True when it was moved, False when it
    was there already. Sockets it opens from then on carry the cgroup."""
    group = buildkitd_cgroup()
    group.mkdir(exist_ok=True)
    if str(pid) in (group / "cgroup.procs").read_text().split():
        return False
    (group / "cgroup.procs").write_text(str(pid))
    return True


def confine_self() -> None:
    """Popen's preexec_fn for buildkitd: the child joins the cgroup before it executes."""
    confine(os.getpid())


def resolvers(text: str) -> list[str]:
    """The nameservers of a resolv.conf (buildkitd resolves ADD's host names through them)."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            try:
                found.append(str(ipaddress.ip_address(fields[1].split("%")[0])))
            except ValueError:
                continue
    return found


def nft_ruleset(cgroup_path: str, nameservers: list[str]) -> str:
    """The nftables tables (replaced atomically by `nft -f`): buildkitd's egress and the bridge's
    port-to-port forwarding. `cgroup_path` is relative to /sys/fs/cgroup, as nft resolves it."""
    v4 = [ns for ns in nameservers if ipaddress.ip_address(ns).version == 4]
    v6 = [ns for ns in nameservers if ipaddress.ip_address(ns).version == 6]
    reject = "reject with icmpx host-unreachable"
    dns = "".join(f"    {family} daddr {{ {', '.join(found)} }} meta l4proto {{ tcp, udp }} "
                  "th dport 53 return\n"
                  for family, found in (("ip", v4), ("ip6", v6)) if found)
    host, port = REGISTRY_ADDR
    blocked4 = ", ".join([*BLOCKED_CIDRS, BUILD_CIDR, "127.0.0.0/8"])
    return (
        f"table inet {NFT_TABLE}\n"
        f"delete table inet {NFT_TABLE}\n"
        f"table inet {NFT_TABLE} {{\n"
        "  chain buildkitd-output {\n"
        # Before nat's DNAT (-100): a Service IP is seen as written in the Dockerfile.
        "    type filter hook output priority mangle; policy accept;\n"
        f'    socket cgroupv2 level 1 "{cgroup_path}" jump buildkitd-egress\n'
        "  }\n"
        "  chain buildkitd-egress {\n"
        "    ct state established,related return\n"
        f"    ip daddr {host} tcp dport {port} return\n"
        + dns +
        f"    fib daddr type local {reject}\n"
        f"    ip daddr {{ {blocked4} }} {reject}\n"
        f"    ip6 daddr {{ {', '.join(BLOCKED_CIDRS_V6)} }} {reject}\n"
        "  }\n"
        "}\n"
        f"table bridge {NFT_TABLE}\n"
        f"delete table bridge {NFT_TABLE}\n"
        f"table bridge {NFT_TABLE} {{\n"
        "  chain forward {\n"
        "    type filter hook forward priority -200; policy accept;\n"
        # One build's container to another's (only the build bridge holds BUILD_CIDR; this
        # kernel has no `meta ibrname`).
        f"    ip saddr {BUILD_CIDR} ip daddr {BUILD_CIDR} drop\n"
        "  }\n"
        "}\n"
    )


def _nft(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["nft", *args], input=stdin, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"nft {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def apply_nft() -> None:
    """(Re)load both nftables tables in one transaction (idempotent; no window without them).
    The cgroup must exist first: nft resolves its path to an id when the rule is loaded."""
    group = buildkitd_cgroup()
    group.mkdir(exist_ok=True)
    path = os.path.relpath(group, CGROUP_ROOT)
    nameservers = resolvers(Path("/etc/resolv.conf").read_text())
    _nft("-f", "-", stdin=nft_ruleset(path, nameservers))


def installed() -> bool:
    return (_ipt("-C", *_JUMP, check=False).returncode == 0
            and _ipt6("-C", *_JUMP6, check=False).returncode == 0
            and _nft("list", "table", "inet", NFT_TABLE, check=False).returncode == 0
            and _nft("list", "table", "bridge", NFT_TABLE, check=False).returncode == 0)


def cleanup() -> None:
    while _ipt("-C", *_JUMP, check=False).returncode == 0:
        _ipt("-D", *_JUMP)
    _ipt("-F", CHAIN, check=False)
    _ipt("-X", CHAIN, check=False)
    while _ipt6("-C", *_JUMP6, check=False).returncode == 0:
        _ipt6("-D", *_JUMP6)
    for family in ("inet", "bridge"):
        _nft("delete", "table", family, NFT_TABLE, check=False)
    with contextlib.suppress(OSError, RuntimeError):
        buildkitd_cgroup().rmdir()  # once buildkitd has stopped
    subprocess.run(["ip", "link", "delete", BUILD_BRIDGE], capture_output=True)
