"""What the cluster offers for network policies (API discovery, node address families), and
applying a trial's network objects and pod labels."""

from __future__ import annotations

import os
import threading
import time
from ipaddress import ip_address
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from shipyard.kube.client import api_client, core
from shipyard.kube.errors import create_or_none
from shipyard.kube.owned import create_owned

# (group/version, resource) pairs whose presence selects an FQDN backend.
FQDN_APIS = (
    ("networking.gke.io/v1alpha1", "fqdnnetworkpolicies"),
    ("cilium.io/v2", "ciliumnetworkpolicies"),
)
CUSTOM_PLURALS = {
    ("networking.gke.io", "FQDNNetworkPolicy"): "fqdnnetworkpolicies",
    ("cilium.io", "CiliumNetworkPolicy"): "ciliumnetworkpolicies",
}
CACHE_SEC = 300.0
_lock = threading.Lock()
_cache: dict[str, tuple[float, Any]] = {}
_computing: dict[str, threading.Lock] = {}


def _cached(key: str, fn):
    """`fn()` at most once per CACHE_SEC, however many trials ask at the same moment."""
    with _lock:
        computing = _computing.setdefault(key, threading.Lock())
    with computing:  # the first caller computes, the others wait for its answer
        with _lock:
            hit = _cache.get(key)
            if hit is not None and time.monotonic() - hit[0] < CACHE_SEC:
                return hit[1]
        value = fn()
        with _lock:
            _cache[key] = (time.monotonic(), value)
        return value


def _discover() -> frozenset[str]:
    found = set()
    for group_version, resource in FQDN_APIS:
        group, version = group_version.split("/")
        try:
            listed = client.CustomObjectsApi(api_client()).get_api_resources(
                group, version, _request_timeout=10)
        except ApiException as e:
            if e.status in (403, 404, 503):
                continue
            raise
        if isinstance(listed, dict):
            names = {r.get("name") for r in listed.get("resources", [])}
        else:
            names = {r.name for r in listed.resources or []}
        if resource in names:
            found.add(f"{group_version}/{resource}")
    return frozenset(found)


def discovered_fqdn_apis() -> frozenset[str]:
    """``group/version/resource`` of the FQDN policy APIs this cluster serves (cached)."""
    return _cached("discovery", _discover)


def _families() -> frozenset[str]:
    try:
        nodes = core().list_node(limit=50).items
    except ApiException as e:
        if e.status == 403:  # not allowed to look: assume both families
            return frozenset({"IPv4", "IPv6"})
        raise
    families = set()
    for node in nodes:
        for address in (node.status.addresses or []) if node.status else []:
            if address.type not in ("InternalIP", "ExternalIP"):
                continue
            try:
                families.add("IPv6" if ip_address(address.address).version == 6 else "IPv4")
            except ValueError:
                continue
    return frozenset(families or {"IPv4", "IPv6"})


def node_ip_families() -> frozenset[str]:
    """The IP families of the nodes' addresses (cached)."""
    return _cached("families", _families)


def _apiserver() -> frozenset[tuple[str, int]]:
    """(address, port) of the `kubernetes` Service and of the endpoints it leads to."""
    found: set[tuple[str, int]] = set()
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    if host:
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
        found.add((host, int(port) if port.isdigit() else 443))
    try:
        service = core().read_namespaced_service("kubernetes", "default")
        ports = [p.port for p in service.spec.ports or [] if p.port] or [443]
        found.update((ip, port) for ip in (service.spec.cluster_ips or [service.spec.cluster_ip])
                     if ip for port in ports)
        endpoints = core().read_namespaced_endpoints("kubernetes", "default")
        for subset in endpoints.subsets or []:
            ports = [p.port for p in subset.ports or [] if p.port] or [443]
            found.update((a.ip, port) for a in subset.addresses or [] if a.ip for port in ports)
    except ApiException as e:
        if e.status not in (403, 404):
            raise
    return frozenset((ip, port) for ip, port in found
                     if not ip.startswith("127.") and ip != "::1")


def apiserver_addresses() -> frozenset[str]:
    """The `kubernetes` Service's IPs and the apiserver endpoints it leads to (cached)."""
    return frozenset(ip for ip, _ in _cached("apiserver", _apiserver))


def apiserver_sockets() -> frozenset[str]:
    """The same as ``ip:port`` (``[ip]:port`` for IPv6), what the network fence connects to
    (`plan.network.Fence`)."""
    return frozenset(_socket(ip, port) for ip, port in _cached("apiserver", _apiserver))


def _socket(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _dns() -> frozenset[str]:
    try:
        service = core().read_namespaced_service("kube-dns", "kube-system")
    except ApiException as e:
        if e.status in (403, 404):
            return frozenset()
        raise
    ports = [p.port for p in service.spec.ports or [] if p.port and p.protocol == "TCP"]
    return frozenset(_socket(ip, port)
                     for ip in (service.spec.cluster_ips or [service.spec.cluster_ip])
                     if ip and ip != "None" for port in ports)


def dns_sockets() -> frozenset[str]:
    """The cluster DNS Service's TCP ``ip:port``s (`kube-system/kube-dns`, kube-dns's and
    CoreDNS's name; cached): what a `no-network` phase's fence connects to."""
    return _cached("dns", _dns)


def _cluster_ranges() -> frozenset[str]:
    """The nodes' pod CIDRs and addresses, and the Service CIDRs (ServiceCIDR objects)."""
    found: set[str] = set()
    try:
        for node in core().list_node(limit=500).items:
            found.update((node.spec.pod_cidrs or []) if node.spec else [])
            for address in (node.status.addresses or []) if node.status else []:
                if address.type in ("InternalIP", "ExternalIP"):
                    found.add(address.address)
    except ApiException as e:
        if e.status != 403:
            raise
    try:
        for cidr in client.NetworkingV1Api(api_client()).list_service_cidr().items:
            found.update(cidr.spec.cidrs or [] if cidr.spec else [])
    except ApiException as e:
        if e.status not in (403, 404):
            raise
    return frozenset(found)


def cluster_ranges() -> frozenset[str]:
    """What `public` trial pods must not reach besides the apiserver (cached): node addresses,
    pod and Service CIDRs the cluster tells of."""
    return _cached("cluster", _cluster_ranges)


def apply_network_objects(objects: list[dict[str, Any]]) -> None:
    """Create the trial's objects; its own found are kept (a trial's policies never change),
    a deleted namesake's are replaced (`owned.create_owned`: the garbage collector would
    remove them under the new trial's pods)."""
    for obj in objects:
        _apply_owned(obj)


def _apply_owned(obj: dict[str, Any]) -> None:
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    if obj["kind"] == "NetworkPolicy":
        networking = client.NetworkingV1Api(api_client())
        create_owned(
            lambda: networking.create_namespaced_network_policy(namespace, obj),
            lambda: _read_or_none(networking.read_namespaced_network_policy, name, namespace),
            lambda options: networking.delete_namespaced_network_policy(name, namespace,
                                                                        body=options), obj)
        return
    custom = client.CustomObjectsApi(api_client())
    group, version = obj["apiVersion"].split("/")
    plural = CUSTOM_PLURALS[(group, obj["kind"])]
    create_owned(
        lambda: custom.create_namespaced_custom_object(group, version, namespace, plural, obj),
        lambda: _read_or_none(custom.get_namespaced_custom_object, group, version, namespace,
                              plural, name),
        lambda options: custom.delete_namespaced_custom_object(group, version, namespace,
                                                               plural, name, body=options), obj)


def _read_or_none(read: Any, *args: Any) -> Any | None:
    try:
        return read(*args)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


_baselines: dict[tuple[str, str], threading.Lock | None] = {}
_baseline_objects: dict[str, list[dict[str, Any]]] = {}


def forget_baseline(namespace: str) -> list[dict[str, Any]] | None:
    """A shared policy of `namespace` was deleted: the next trial makes them again. Returns
    what was last ensured there (None: nothing), for the caller to ensure again at once."""
    with _lock:
        for key in [k for k in _baselines if k[0] == namespace]:
            del _baselines[key]
        return _baseline_objects.pop(namespace, None)


def baseline_names() -> dict[str, list[str]]:
    """The shared policies this process made or found, by namespace."""
    with _lock:
        return {ns: [o["metadata"]["name"] for o in objs]
                for ns, objs in _baseline_objects.items()}


def ensure_namespace_baseline(objects: list[dict[str, Any]]) -> None:
    """Create a namespace's shared NetworkPolicies, or bring a drifted one back to `objects`
    (settings changed); once per process and content, however many trials ask at once."""
    namespace = objects[0]["metadata"]["namespace"]
    key = (namespace, repr(objects))
    with _lock:
        once = _baselines.setdefault(key, threading.Lock())
    if once is None:
        return
    with once:
        if _baselines.get(key) is None:
            return
        for obj in objects:
            _ensure_policy(obj)
        with _lock:
            _baselines[key] = None
            _baseline_objects[namespace] = objects


def _ensure_policy(obj: dict[str, Any]) -> None:
    """Create the policy, or bring the one found back to `obj`'s spec. Someone deleting or
    changing it at the same moment (a user's cleanup of every shared policy, one by one) is
    met by trying again: a 404 after a 409 once left the namespace without its baseline."""
    networking = client.NetworkingV1Api(api_client())
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    for _ in range(5):
        if create_or_none(networking.create_namespaced_network_policy, namespace,
                          obj) is not None:
            return
        current = _read_or_none(networking.read_namespaced_network_policy, name, namespace)
        if current is None:  # deleted between the create and the read
            continue
        current = api_client().sanitize_for_serialization(current)
        if current.get("spec") == obj["spec"]:
            return
        try:
            networking.replace_namespaced_network_policy(name, namespace, {**obj, "metadata": {
                **obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}})
            return
        except ApiException as e:
            if e.status not in (404, 409):  # gone or changed in between: again
                raise
    raise ApiException(status=409, reason=f"NetworkPolicy {namespace}/{name} changed under "
                       "every attempt to ensure it")


def label_pod(namespace: str, name: str, labels: dict[str, str]) -> bool:
    """Merge `labels` into the pod's labels; False when the pod is gone."""
    try:
        core().patch_namespaced_pod(name, namespace, {"metadata": {"labels": labels}})
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True
