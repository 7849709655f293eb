"""Network modes, the allowlist entry grammar (docs/harbor.md §a.4) and the run-level merge rule
(§a.5)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from ipaddress import ip_address, ip_network
from typing import Literal

NetworkMode = Literal["no-network", "public", "allowlist"]

_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")

NOT_HOSTNAME = (
    "allowed_hosts entries must be hostnames, IP addresses, or IP CIDR ranges, "
    "not URLs, ports, or paths."
)
ONLY_WITH_ALLOWLIST = "allowed_hosts is only valid when network_mode='allowlist'."


class AllowlistEntryType(StrEnum):
    """The kind of an already normalized allowlist entry."""

    HOSTNAME = "hostname"
    WILDCARD_HOSTNAME = "wildcard-hostname"
    IPV4_ADDRESS = "ipv4-address"
    IPV6_ADDRESS = "ipv6-address"
    IPV4_CIDR = "ipv4-cidr"
    IPV6_CIDR = "ipv6-cidr"


def _ipv6(host: str) -> str | None:
    if "%" in host:
        return None
    try:
        address = ip_address(host)
    except ValueError:
        return None
    return address.compressed if address.version == 6 else None


def _cidr(host: str) -> str | None:
    if "%" in host:
        return None
    try:
        return ip_network(host, strict=True).compressed
    except ValueError:
        return None


def _is_ip(text: str) -> bool:
    try:
        ip_address(text)
    except ValueError:
        return False
    return True


def normalize_allowed_host(entry: str) -> str:
    """Validate one entry and return its normal form, raising ValueError with Harbor's text."""
    host = entry.strip().lower().rstrip(".")
    if not host:
        raise ValueError("allowed_hosts entries must be non-empty hostnames.")
    if "/" in host:
        network = _cidr(host)
        if network is None:
            raise ValueError(NOT_HOSTNAME)
        return network
    if ":" in host:
        address = _ipv6(host)
        if address is None:
            raise ValueError(NOT_HOSTNAME)
        return address
    if "[" in host or "]" in host:
        raise ValueError(NOT_HOSTNAME)
    if host.startswith("*."):
        # Harbor also has "wildcard entries must include a hostname suffix." here, but it is
        # unreachable: trailing dots are already stripped, so "*." arrives as "*".
        name = host[2:]
        if _is_ip(name):
            raise ValueError(
                "allowed_hosts wildcard entries must target hostnames, not IP address literals."
            )
    elif "*" in host:
        raise ValueError("allowed_hosts wildcard entries must use a leading '*.' prefix.")
    else:
        name = host
    if not all(_LABEL.match(label) for label in name.split(".")):
        raise ValueError(
            "allowed_hosts entries must be IP addresses, IP CIDR ranges, or valid hostnames or "
            "leading wildcard host patterns containing only letters, digits, hyphens, and dots."
        )
    return host


def normalize_allowed_hosts(entries: Iterable[str]) -> list[str]:
    """Normalize every entry, keeping order and duplicates as Harbor does."""
    return [normalize_allowed_host(entry) for entry in entries]


def classify_allowlist_entry(entry: str) -> AllowlistEntryType:
    """Classify a normalized entry (IPs/CIDRs and hostnames are enforced differently)."""
    if entry.startswith("*."):
        return AllowlistEntryType.WILDCARD_HOSTNAME
    if "/" in entry:
        network = ip_network(entry, strict=True)
        return (
            AllowlistEntryType.IPV4_CIDR if network.version == 4 else AllowlistEntryType.IPV6_CIDR
        )
    try:
        address = ip_address(entry)
    except ValueError:
        return AllowlistEntryType.HOSTNAME
    if address.version == 4:
        return AllowlistEntryType.IPV4_ADDRESS
    return AllowlistEntryType.IPV6_ADDRESS


@dataclass(frozen=True)
class NetworkPolicy:
    """A resolved network policy for one phase; ``allowed_hosts`` only for ``allowlist``."""

    mode: NetworkMode
    allowed_hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.mode != "allowlist" and self.allowed_hosts:
            raise ValueError(ONLY_WITH_ALLOWLIST)


def _dedupe(hosts: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(hosts))


def merge_extra_allowlists(
    policy: NetworkPolicy, extras: Sequence[str]
) -> tuple[NetworkPolicy, list[str]]:
    """Merge run-level extra hosts into ``policy`` (Harbor `merge_extra_allowlists`).

    ``extras`` must already be normalized. Returns the merged policy and any notices.
    """
    if not extras:
        return policy, []
    if policy.mode == "public":
        notice = (
            f"Run-specific allowlist host(s) {list(extras)!r} are ignored because the "
            "effective network policy is public."
        )
        return policy, [notice]
    if policy.mode == "no-network":
        return NetworkPolicy("allowlist", _dedupe(extras)), []
    return NetworkPolicy("allowlist", _dedupe([*policy.allowed_hosts, *extras])), []
