"""How a trial's network policies are enforced: pod-label keys, the FQDN backend, refusals.

Pure decisions only; the manifests are built by `shipyard.render.network_policy`.

Every pod of a trial is selected by a deny-all NetworkPolicy. Each distinct Harbor policy the
trial uses (`public`, `no-network`, one per distinct allowlist) gets a key; the allow objects for
that policy select pods whose `shipyard.dev/network` label carries the key, and the operator
switches the label between phases. IP and CIDR entries become plain NetworkPolicy `ipBlock`s;
hostnames and `*.` wildcards need an FQDN backend (GKE `FQDNNetworkPolicy` or Cilium
`toFQDNs`). Without one the trial is refused: a restricted phase never runs open.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from ipaddress import ip_network
from typing import Any, Literal

from shipyard.api.conventions import Role
from shipyard.taskformat import AllowlistEntryType, NetworkPolicy, classify_allowlist_entry

FqdnBackend = Literal["gke", "cilium", "none"]
FQDN_BACKEND_SETTINGS = ("auto", "gke", "cilium", "none")
FQDN_BACKEND_ENV = "SHIPYARD_FQDN_BACKEND"

# API discovery entries ("group/version/resource") that identify each backend. GKE's managed
# FQDN network policy (Dataplane V2) is served as networking.gke.io/v1alpha1; Cilium's policy
# CRD as cilium.io/v2. GKE is checked first: Dataplane V2 runs Cilium underneath, but GKE does
# not honour raw CiliumNetworkPolicy objects there.
GKE_FQDN_RESOURCE = "networking.gke.io/v1alpha1/fqdnnetworkpolicies"
CILIUM_RESOURCE = "cilium.io/v2/ciliumnetworkpolicies"

HOSTNAME_TYPES = (AllowlistEntryType.HOSTNAME, AllowlistEntryType.WILDCARD_HOSTNAME)
IPV6_TYPES = (AllowlistEntryType.IPV6_ADDRESS, AllowlistEntryType.IPV6_CIDR)


DEFAULT_BLOCKED_CIDRS = ("169.254.0.0/16", "fd00:ec2::254/128")
"""Blocked even under `public`: the link-local range holding the cloud metadata servers
(169.254.169.254 on GCE/EC2/Azure) and EC2's IPv6 metadata address."""
DEFAULT_DNS_CIDRS = ("169.254.20.10/32", "169.254.169.254/32")
"""DNS servers outside the cluster DNS pods, allowed on port 53 only: NodeLocal DNSCache's
default address and GKE Cloud DNS (answered by the metadata server, port 53 only)."""
IP_FAMILIES = ("IPv4", "IPv6")
SETTING_ENV = {
    "fqdn_backend": FQDN_BACKEND_ENV,
    "blocked_cidrs": "SHIPYARD_BLOCKED_EGRESS_CIDRS",
    "dns_cidrs": "SHIPYARD_DNS_EGRESS_CIDRS",
    "ip_families": "SHIPYARD_IP_FAMILIES",
    "block_apiserver": "SHIPYARD_BLOCK_APISERVER",
    "block_cluster": "SHIPYARD_BLOCK_CLUSTER_EGRESS",
    "cluster_cidrs": "SHIPYARD_CLUSTER_CIDRS",
    "fence_sec": "SHIPYARD_NETWORK_FENCE_SEC",
    "fence_containers": "SHIPYARD_NETWORK_FENCE_CONTAINERS",
}
DEFAULT_FENCE_SEC = 30.0
FENCE_MARK = "network policy not in force"
"""In the runner's answer when a pod's first phase found its policy not enforced (the fence)."""


class NetworkSettingError(ValueError):
    """An operator setting has a value outside its choices."""


class UnenforceablePolicy(Exception):
    """A policy of the trial cannot be enforced on this cluster; `entries` names what."""

    def __init__(self, message: str, entries: list[str]) -> None:
        super().__init__(message)
        self.message = message
        self.entries = entries


def choose_fqdn_backend(setting: str | None, discovered: Collection[str]) -> FqdnBackend:
    """The backend for hostname entries.

    `setting` is the operator setting (``auto`` when unset); `discovered` holds the
    ``group/version/resource`` entries the cluster's API discovery lists. An explicit ``gke``
    or ``cilium`` is trusted as is (creating the objects fails loudly if it is wrong).
    """
    choice = (setting or "auto").strip().lower()
    if choice not in FQDN_BACKEND_SETTINGS:
        raise NetworkSettingError(
            f"{FQDN_BACKEND_ENV}={setting!r}: expected one of {', '.join(FQDN_BACKEND_SETTINGS)}"
        )
    if choice != "auto":
        return choice  # type: ignore[return-value]
    if GKE_FQDN_RESOURCE in discovered:
        return "gke"
    if CILIUM_RESOURCE in discovered:
        return "cilium"
    return "none"


def policy_key(policy: NetworkPolicy) -> str:
    """The `shipyard.dev/network` label value of pods under `policy` (a valid label value).

    Allowlists are keyed by their set of entries, so equal allowlists share one object.
    """
    if policy.mode != "allowlist":
        return policy.mode
    digest = hashlib.sha256("\n".join(sorted(set(policy.allowed_hosts))).encode()).hexdigest()
    return f"allowlist-{digest[:12]}"


def hostname_entries(policy: NetworkPolicy) -> list[str]:
    """The entries of an allowlist that need an FQDN backend (hostnames and wildcards)."""
    return [h for h in policy.allowed_hosts if classify_allowlist_entry(h) in HOSTNAME_TYPES]


def ip_entries(policy: NetworkPolicy) -> list[str]:
    """The entries of an allowlist that plain NetworkPolicy `ipBlock`s enforce."""
    return [h for h in policy.allowed_hosts if classify_allowlist_entry(h) not in HOSTNAME_TYPES]


def cidr_of(entry: str) -> str:
    """An IP or CIDR entry as a CIDR (`ipBlock.cidr` needs a prefix length)."""
    if "/" in entry:
        return entry
    ipv6 = classify_allowlist_entry(entry) == AllowlistEntryType.IPV6_ADDRESS
    return f"{entry}/128" if ipv6 else f"{entry}/32"


@dataclass(frozen=True)
class PhasePolicies:
    """The distinct policies a trial uses, each with the phases (for messages) that use it."""

    by_key: dict[str, NetworkPolicy]
    uses: dict[str, list[str]]

    @classmethod
    def collect(cls, phases: Mapping[str, NetworkPolicy]) -> PhasePolicies:
        by_key: dict[str, NetworkPolicy] = {}
        uses: dict[str, list[str]] = {}
        for phase, policy in phases.items():
            key = policy_key(policy)
            by_key.setdefault(key, policy)
            uses.setdefault(key, []).append(phase)
        return cls(by_key, uses)

    def policies(self) -> Iterable[tuple[str, NetworkPolicy]]:
        return self.by_key.items()


def check_never_reached(phases: Mapping[str, NetworkPolicy], never: Iterable[str]) -> None:
    """Raise `UnenforceablePolicy` for allowlist IP/CIDR entries that lie inside a range trial
    pods never reach (the metadata servers, the apiserver): a task cannot open them. Entries
    that merely contain such a range are kept, with the range excepted (`never_excepts`)."""
    never_nets = [ip_network(c) for c in never]
    problems: list[str] = []
    entries: list[str] = []
    for phase, policy in phases.items():
        if policy.mode != "allowlist":
            continue
        for entry in ip_entries(policy):
            net = ip_network(cidr_of(entry), strict=False)
            inside = next((n for n in never_nets
                           if n.version == net.version and net.subnet_of(n)), None)  # type: ignore[arg-type]
            if inside is not None:
                problems.append(f"{phase}: {entry} (in {inside.compressed})")
                if entry not in entries:
                    entries.append(entry)
    if problems:
        raise UnenforceablePolicy(
            "allowed_hosts: trial pods never reach the metadata servers, the apiserver or the "
            "nodes (SHIPYARD_BLOCKED_EGRESS_CIDRS, SHIPYARD_BLOCK_APISERVER, "
            f"SHIPYARD_BLOCK_CLUSTER_EGRESS); refusing "
            f"{'; '.join(problems)}", entries)


def never_excepts(cidr: str, never: Iterable[str]) -> list[str]:
    """The never-reached ranges inside an allowlist's `cidr`, for its ipBlock's `except`."""
    net = ip_network(cidr, strict=False)
    return [n for n in never if ip_network(n).version == net.version
            and ip_network(n) != net and ip_network(n).subnet_of(net)]  # type: ignore[arg-type]


def check_enforceable(phases: Mapping[str, NetworkPolicy], backend: FqdnBackend) -> None:
    """Raise `UnenforceablePolicy` naming every hostname entry when there is no FQDN backend.

    `phases` maps a phase description (``agent phase``, ``environment baseline``, ...) to its
    policy. Called before any pod starts, so nothing ever runs with a policy left open.
    """
    if backend != "none":
        return
    problems: list[str] = []
    entries: list[str] = []
    for phase, policy in phases.items():
        hosts = hostname_entries(policy)
        if hosts:
            problems.append(f"{phase}: {', '.join(hosts)}")
            entries.extend(h for h in hosts if h not in entries)
    if problems:
        raise UnenforceablePolicy(
            "allowed_hosts: hostname entries need an FQDN network policy backend (GKE "
            "FQDNNetworkPolicy or Cilium toFQDNs) and this cluster has none "
            f"({FQDN_BACKEND_ENV}); cannot enforce {'; '.join(problems)}. "
            "Refusing to run these phases open; use IP addresses or CIDRs instead, or "
            "install a backend",
            entries,
        )


@dataclass(frozen=True)
class Fence:
    """No task code runs in a pod before its network policy is in force: the runner's first
    step in each pod connects to `sockets` (the apiserver's, ``ip:port``), which every policy
    of Shipyard blocks, and goes on only once none answers; after `timeout_sec` the trial
    fails (`NetworkPolicyUnenforceable`). A CNI may program a new pod's policy a moment after
    its containers start (kube-router: about a second), and one that ignores NetworkPolicy
    never does."""

    sockets: tuple[str, ...]
    timeout_sec: float = DEFAULT_FENCE_SEC
    target: str = "the apiserver"
    """What `sockets` are, for the message."""
    containers: bool = True
    """Also before any program of the task's image starts with the pod (its ENTRYPOINT,
    compose sidecars; `render.pod.fence_start`). ``SHIPYARD_NETWORK_FENCE_CONTAINERS``, on
    by default."""


@dataclass(frozen=True)
class NetworkSettings:
    """The operator's network settings, resolved against what the cluster offers."""

    fqdn_backend: FqdnBackend = "none"
    blocked_cidrs: tuple[str, ...] = DEFAULT_BLOCKED_CIDRS
    dns_cidrs: tuple[str, ...] = DEFAULT_DNS_CIDRS
    ip_families: frozenset[str] = frozenset(IP_FAMILIES)
    block_cluster: bool = False
    """`public` pods reach no pod outside their own namespace (the cluster's ranges are in
    `blocked_cidrs`); False: every pod, as before SHIPYARD_BLOCK_CLUSTER_EGRESS."""
    never_cidrs: tuple[str, ...] = DEFAULT_BLOCKED_CIDRS
    """Never reached, not even by a task's allowlist: the metadata servers (the configured
    blocked ranges), the apiserver's addresses and, kept out of the cluster, the nodes'. (An
    allowlist may name pods, e.g. a model server: the pod and Service ranges are `public`'s
    exceptions only.)"""
    fence: Fence | None = None
    """The check each pod's first phase makes (None: the apiserver is not blocked, or
    ``SHIPYARD_NETWORK_FENCE_SEC=0``)."""
    dns_fence: Fence | None = None
    """The check of a switch to `no-network`: the cluster DNS Service refused."""

    def keeps(self, cidr: str) -> bool:
        """Whether rules for `cidr` are rendered (IPv6 blocks are left out on IPv4-only
        clusters: some enforcers reject the whole policy set over them, and they could
        never match anyway)."""
        family = "IPv6" if ":" in cidr else "IPv4"
        return family in self.ip_families


def _cidrs(name: str, text: str) -> tuple[str, ...]:
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(ip_network(part, strict=True).compressed)
        except ValueError:
            raise NetworkSettingError(f"{name}: {part!r} is not a CIDR") from None
    return tuple(out)


@dataclass(frozen=True)
class NetworkConfig:
    """The operator's network settings as configured (parsed once, when the operator starts);
    `resolve` fills in the ``auto`` choices from what the cluster offers."""

    fqdn_backend: str = "auto"
    blocked_cidrs: tuple[str, ...] = DEFAULT_BLOCKED_CIDRS
    dns_cidrs: tuple[str, ...] = DEFAULT_DNS_CIDRS
    ip_families: frozenset[str] | None = None  # None: auto, the nodes' families
    block_apiserver: bool = True
    block_cluster: bool = True
    cluster_cidrs: tuple[str, ...] = ()
    fence_sec: float = DEFAULT_FENCE_SEC
    fence_containers: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> NetworkConfig:
        backend = environ.get(FQDN_BACKEND_ENV)
        choose_fqdn_backend(backend, ())  # refuses a value outside the choices
        blocked_env, dns_env = SETTING_ENV["blocked_cidrs"], SETTING_ENV["dns_cidrs"]
        blocked = (
            _cidrs(blocked_env, environ[blocked_env])
            if blocked_env in environ
            else DEFAULT_BLOCKED_CIDRS
        )
        dns = _cidrs(dns_env, environ[dns_env]) if dns_env in environ else DEFAULT_DNS_CIDRS
        families_env = SETTING_ENV["ip_families"]
        raw = environ.get(families_env, "auto").strip()
        families = None
        if raw.lower() != "auto":
            by_lower = {f.lower(): f for f in IP_FAMILIES}
            chosen = [by_lower.get(p.strip().lower()) for p in raw.split(",") if p.strip()]
            if not chosen or None in chosen:
                raise NetworkSettingError(
                    f"{families_env}={raw!r}: expected auto, IPv4, IPv6 or IPv4,IPv6"
                )
            families = frozenset(f for f in chosen if f)
        cluster_env, fence_env = SETTING_ENV["cluster_cidrs"], SETTING_ENV["fence_sec"]
        fence_raw = environ.get(fence_env, "").strip()
        try:
            fence_sec = float(fence_raw) if fence_raw else DEFAULT_FENCE_SEC
        except ValueError:
            fence_sec = -1.0
        if not 0 <= fence_sec <= 3600:
            raise NetworkSettingError(f"{fence_env}={fence_raw!r}: expected seconds from 0 "
                                      "(no fence) to 3600")
        return cls(backend or "auto", blocked, dns, families,
                   _flag(environ, SETTING_ENV["block_apiserver"]),
                   _flag(environ, SETTING_ENV["block_cluster"]),
                   _cidrs(cluster_env, environ.get(cluster_env, "")), fence_sec,
                   _flag(environ, SETTING_ENV["fence_containers"], "true"))

    def resolve(self, discovered: Collection[str] = (),
                node_families: Collection[str] = IP_FAMILIES,
                apiserver: Collection[str] = (),
                cluster: Collection[str] = (),
                apiserver_sockets: Collection[str] = (),
                dns_sockets: Collection[str] = ()) -> NetworkSettings:
        """`discovered` is the API discovery list (for ``SHIPYARD_FQDN_BACKEND=auto``),
        `node_families` the IP families of the nodes' addresses (for
        ``SHIPYARD_IP_FAMILIES=auto``, the default) and `apiserver` the apiserver's Service IP
        and endpoint addresses, blocked even under `public` (a trial pod has no business with
        the cluster's API) unless ``SHIPYARD_BLOCK_APISERVER=false``. `cluster` holds the
        cluster's own ranges and addresses (pod and Service CIDRs, node addresses, on each of
        which a self-hosted apiserver, etcd or kubelet may answer): with
        ``SHIPYARD_BLOCK_CLUSTER_EGRESS`` (the default) they and ``SHIPYARD_CLUSTER_CIDRS``
        are blocked under `public` too, and pods are reached in the trial's own namespace
        only. `apiserver_sockets` and `dns_sockets` (the cluster DNS Service, ``ip:port``) are
        what the fences connect to."""
        backend = choose_fqdn_backend(self.fqdn_backend, discovered)
        families = self.ip_families
        if families is None:
            families = frozenset(f for f in node_families if f in IP_FAMILIES) or frozenset(
                IP_FAMILIES
            )
        blocked = self.blocked_cidrs
        if self.block_apiserver or self.block_cluster:
            blocked += tuple(c for c in _host_cidrs(apiserver) if c not in blocked)
        never = blocked
        if self.block_cluster:  # the nodes' own addresses (a self-hosted apiserver's too)
            never += tuple(c for c in _host_cidrs([a for a in cluster if "/" not in a])
                           if c not in never)
            for c in self.cluster_cidrs + _host_cidrs(cluster):
                if c not in blocked:
                    blocked += (c,)
        fence = None
        if (self.block_apiserver or self.block_cluster) and apiserver_sockets \
                and self.fence_sec > 0:
            fence = Fence(tuple(sorted(apiserver_sockets)), self.fence_sec,
                          containers=self.fence_containers)
        dns_fence = None
        if dns_sockets and self.fence_sec > 0:
            dns_fence = Fence(tuple(sorted(dns_sockets)), self.fence_sec, "the cluster DNS")
        return NetworkSettings(backend, blocked, self.dns_cidrs, families, self.block_cluster,
                               never, fence, dns_fence)


def _flag(environ: Mapping[str, str], name: str, default: str = "true") -> bool:
    raw = environ.get(name, default).strip().lower()
    if raw not in ("true", "false", "1", "0", "yes", "no"):
        raise NetworkSettingError(f"{name}={environ[name]!r}: expected true or false")
    return raw in ("true", "1", "yes")


def _host_cidrs(addresses: Collection[str]) -> tuple[str, ...]:
    out = []
    for address in sorted(addresses):
        try:
            out.append(ip_network(address if "/" in address else
                                  f"{address}/{128 if ':' in address else 32}").compressed)
        except ValueError:
            continue
    return tuple(out)


def settings_from_env(
    environ: Mapping[str, str],
    discovered: Collection[str] = (),
    node_families: Collection[str] = IP_FAMILIES,
    apiserver: Collection[str] = (),
    cluster: Collection[str] = (),
    apiserver_sockets: Collection[str] = (),
    dns_sockets: Collection[str] = (),
) -> NetworkSettings:
    """Settings from the operator's environment, resolved against the cluster."""
    return NetworkConfig.from_env(environ).resolve(discovered, node_families, apiserver,
                                                   cluster, apiserver_sockets, dns_sockets)


@dataclass(frozen=True)
class StepNetwork:
    """The resolved policy keys of one step (or of a single-step trial)."""

    env_baseline: str
    agent: str
    verifier_baseline: str | None  # the separate verifier pod's baseline
    verifier: str


@dataclass(frozen=True)
class ModelPeer:
    """In-cluster model server pods an installed agent may reach during its phase."""

    pod_selector: tuple[tuple[str, str], ...]
    namespace: str | None = None  # None: the trial's namespace
    port: int | None = None


MODEL_KEY_SUFFIX = "-model"


@dataclass(frozen=True)
class TrialNetwork:
    """Which policy holds when, for every pod and phase of a trial.

    `policies` maps each key to its policy. A pod is created under its baseline (the agent
    environment's, or a separate verifier's); during a phase it carries the phase's key, and
    after the phase its baseline again.
    """

    policies: dict[str, NetworkPolicy]
    steps: dict[str | None, StepNetwork]
    notices: tuple[str, ...] = ()
    model_peer: ModelPeer | None = None
    model_policies: dict[str, NetworkPolicy] = field(default_factory=dict)
    """Keys (`<key>-model`) of agent phases that also reach `model_peer`, with the policy
    they extend. Distinct keys, so only the agent phase gets the model server."""
    fence: Fence | None = None
    """Made by each pod's first phase (`Fence`)."""
    dns_fence: Fence | None = None
    """Made by a `no-network` phase on a pod whose baseline is not."""

    @property
    def restricted(self) -> bool:
        return any(p.mode != "public" for p in self.policies.values())

    def offline(self, key: str) -> bool:
        """Whether key `key` is `no-network` (no DNS either)."""
        policy = self.policies.get(key)
        return policy is not None and policy.mode == "no-network"

    def baseline(self, pod: Role, step: str | None) -> str:
        """The key a pod carries between phases (`pod` is ``env`` or ``verifier``)."""
        plan = self.steps[step] if step in self.steps else next(iter(self.steps.values()))
        if pod == Role.VERIFIER and plan.verifier_baseline is not None:
            return plan.verifier_baseline
        return plan.env_baseline

    def phase_key(self, kind: str, step: str | None, pod: Role) -> str:
        """The key while phase `kind` of `step` runs in `pod`: the agent and verifier phases
        have their own policies, every other phase runs under its pod's baseline."""
        plan = self.steps[step] if step in self.steps else next(iter(self.steps.values()))
        if kind == "agent":
            return plan.agent
        if kind == "verifier":
            return plan.verifier
        return self.baseline(pod, step)


def trial_network(plans: Mapping[str | None, Any]) -> TrialNetwork:
    """The trial's network from the `NetworkPlan` of each step (`shipyard.taskformat`)."""
    policies: dict[str, NetworkPolicy] = {}
    steps: dict[str | None, StepNetwork] = {}
    notices: list[str] = []

    def key(policy: NetworkPolicy) -> str:
        k = policy_key(policy)
        policies.setdefault(k, policy)
        return k

    for step, plan in plans.items():
        steps[step] = StepNetwork(
            env_baseline=key(plan.agent_env_baseline),
            agent=key(plan.agent_phase),
            verifier_baseline=(None if plan.verifier_env_baseline is None
                               else key(plan.verifier_env_baseline)),
            verifier=key(plan.verifier_phase),
        )
        notices.extend(n for n in plan.notices if n not in notices)
    return TrialNetwork(policies, steps, tuple(notices))


def phases_by_description(plans: Mapping[str | None, Any]) -> dict[str, NetworkPolicy]:
    """`{description: policy}` for messages: "agent phase", "step 2 verifier phase", ..."""
    out: dict[str, NetworkPolicy] = {}
    for step, plan in plans.items():
        where = "" if step is None else f"step {step} "
        out.setdefault("environment baseline", plan.agent_env_baseline)
        out[f"{where}agent phase"] = plan.agent_phase
        if plan.verifier_env_baseline is not None:
            out[f"{where}verifier environment baseline"] = plan.verifier_env_baseline
        out[f"{where}verifier phase"] = plan.verifier_phase
    return out


def with_model_access(network: TrialNetwork, peer: ModelPeer,
                      public_reaches_pods: bool = True) -> TrialNetwork:
    """`network` with every agent phase also allowed to `peer`, whatever the task's network
    mode (`public` is left as is when it reaches every pod: SHIPYARD_BLOCK_CLUSTER_EGRESS
    false)."""
    model_policies: dict[str, NetworkPolicy] = {}
    steps = {}
    for step, plan in network.steps.items():
        policy = network.policies[plan.agent]
        if policy.mode == "public" and public_reaches_pods:
            steps[step] = plan
            continue
        key = plan.agent + MODEL_KEY_SUFFIX
        model_policies[key] = policy
        steps[step] = replace(plan, agent=key)
    return replace(network, steps=steps, model_peer=peer, model_policies=model_policies)
