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
- any other build's bridge address is on the same L2 segment and is not filtered here.

What remains is the outside world: DNS servers, package archives, registries, proxies.
`RUN --network=host` needs the `network.host` entitlement, which this buildkitd does not grant.
Applied idempotently by `up`; removed by `down`.
"""

from __future__ import annotations

import json
import subprocess

from layout import POD_CIDR, SERVICE_CIDR, Layout

BUILD_BRIDGE = "shipyard-bk0"
BUILD_CIDR = "10.89.0.0/16"
CHAIN = "SHIPYARD-BUILD-NET"
LINK_LOCAL = "169.254.0.0/16"
BLOCKED_CIDRS = (POD_CIDR, SERVICE_CIDR, LINK_LOCAL)
COMMENT = "shipyard-build-network"  # no spaces: compared with `iptables -S` as printed
_JUMP = ["PREROUTING", "-i", BUILD_BRIDGE, "-m", "comment", "--comment", COMMENT, "-j", CHAIN]


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
    """The chain's rules, in order (arguments after `-A CHAIN`)."""
    drops = [["-m", "addrtype", "--dst-type", "LOCAL"]]
    drops += [["-d", cidr] for cidr in BLOCKED_CIDRS]
    return [[*match, "-m", "comment", "--comment", COMMENT, "-j", "DROP"] for match in drops]


def _ipt(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", "-t", "raw", *args], capture_output=True,
                          text=True, check=check)


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


def installed() -> bool:
    return _ipt("-C", *_JUMP, check=False).returncode == 0


def cleanup() -> None:
    while _ipt("-C", *_JUMP, check=False).returncode == 0:
        _ipt("-D", *_JUMP)
    _ipt("-F", CHAIN, check=False)
    _ipt("-X", CHAIN, check=False)
    subprocess.run(["ip", "link", "delete", BUILD_BRIDGE], capture_output=True)
