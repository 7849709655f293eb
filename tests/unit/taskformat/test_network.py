"""The allowlist entry grammar, classification and run-level merge (docs/harbor.md §a.4, a.5)."""

from __future__ import annotations

import ipaddress
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shipyard.taskformat import (
    AllowlistEntryType,
    NetworkPolicy,
    classify_allowlist_entry,
    merge_extra_allowlists,
    normalize_allowed_hosts,
)
from shipyard.taskformat.network import normalize_allowed_host

NON_EMPTY = "allowed_hosts entries must be non-empty hostnames."
NOT_HOSTNAME = (
    "allowed_hosts entries must be hostnames, IP addresses, or IP CIDR ranges, not URLs, ports, "
    "or paths."
)
WILDCARD_IP = "allowed_hosts wildcard entries must target hostnames, not IP address literals."
WILDCARD_PREFIX = "allowed_hosts wildcard entries must use a leading '*.' prefix."
BAD_LABELS = (
    "allowed_hosts entries must be IP addresses, IP CIDR ranges, or valid hostnames or leading "
    "wildcard host patterns containing only letters, digits, hyphens, and dots."
)


def test_verified_normalization_example() -> None:
    hosts = ["Example.COM.", "*.github.com", "10.0.0.0/8", "2001:DB8::1", "192.0.2.1"]
    assert normalize_allowed_hosts([*hosts, "2001:db8::/32"]) == [
        "example.com",
        "*.github.com",
        "10.0.0.0/8",
        "2001:db8::1",
        "192.0.2.1",
        "2001:db8::/32",
    ]


@pytest.mark.parametrize(
    ("entry", "normal"),
    [
        ("  API.Example.com  ", "api.example.com"),
        ("example.com...", "example.com"),
        ("2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1"),
        ("::FFFF:1.2.3.4", "::ffff:102:304"),
        ("192.168.1.0/24", "192.168.1.0/24"),
        ("2001:DB8:0::/48", "2001:db8::/48"),
        ("10.0.0.1/32", "10.0.0.1/32"),
        ("localhost", "localhost"),
        ("1.2.3.4", "1.2.3.4"),
        ("*.a-b.example", "*.a-b.example"),
        ("x" * 63 + ".com", "x" * 63 + ".com"),
        ("a", "a"),
    ],
)
def test_valid_entries(entry: str, normal: str) -> None:
    assert normalize_allowed_host(entry) == normal


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("", NON_EMPTY),
        ("   ", NON_EMPTY),
        (".", NON_EMPTY),
        ("https://x.com", NOT_HOSTNAME),
        ("x.com/path", NOT_HOSTNAME),
        ("x.com:443", NOT_HOSTNAME),
        ("10.0.0.1/8", NOT_HOSTNAME),
        ("[::1]", NOT_HOSTNAME),
        ("[x.com]", NOT_HOSTNAME),
        ("fe80::1%eth0", NOT_HOSTNAME),
        ("1.2.3.4:80", NOT_HOSTNAME),
        ("*.", WILDCARD_PREFIX),  # "*." loses its dot first, as in Harbor
        ("*..", WILDCARD_PREFIX),
        ("*.1.2.3.4", WILDCARD_IP),
        ("*.::1", NOT_HOSTNAME),
        ("foo*.com", WILDCARD_PREFIX),
        ("*", WILDCARD_PREFIX),
        ("*example.com", WILDCARD_PREFIX),
        ("a.*.com", WILDCARD_PREFIX),
        ("*.*.com", BAD_LABELS),
        ("exa_mple.com", BAD_LABELS),
        ("-a.com", BAD_LABELS),
        ("a-.com", BAD_LABELS),
        ("a..com", BAD_LABELS),
        ("x" * 64 + ".com", BAD_LABELS),
        ("ünicode.com", BAD_LABELS),
        ("a b.com", BAD_LABELS),
    ],
)
def test_invalid_entries(entry: str, reason: str) -> None:
    with pytest.raises(ValueError) as info:
        normalize_allowed_host(entry)
    assert str(info.value) == reason


def test_duplicates_are_kept_in_order() -> None:
    assert normalize_allowed_hosts(["b.com", "A.com", "a.com"]) == ["b.com", "a.com", "a.com"]


@pytest.mark.parametrize(
    ("entry", "kind"),
    [
        ("example.com", AllowlistEntryType.HOSTNAME),
        ("*.example.com", AllowlistEntryType.WILDCARD_HOSTNAME),
        ("192.0.2.1", AllowlistEntryType.IPV4_ADDRESS),
        ("2001:db8::1", AllowlistEntryType.IPV6_ADDRESS),
        ("10.0.0.0/8", AllowlistEntryType.IPV4_CIDR),
        ("2001:db8::/32", AllowlistEntryType.IPV6_CIDR),
    ],
)
def test_classification(entry: str, kind: AllowlistEntryType) -> None:
    assert classify_allowlist_entry(entry) is kind
    assert kind.value == kind  # a str enum, e.g. "ipv4-cidr"


def test_policy_rejects_hosts_without_allowlist() -> None:
    with pytest.raises(ValueError, match="only valid when network_mode='allowlist'"):
        NetworkPolicy("public", ("a.com",))


class TestMerge:
    def test_public_ignores_extras_with_a_notice(self) -> None:
        policy, notices = merge_extra_allowlists(NetworkPolicy("public"), ["pypi.org"])
        assert policy == NetworkPolicy("public")
        assert notices == [
            "Run-specific allowlist host(s) ['pypi.org'] are ignored because the effective "
            "network policy is public."
        ]

    def test_no_network_becomes_an_allowlist_of_the_extras(self) -> None:
        policy, notices = merge_extra_allowlists(NetworkPolicy("no-network"), ["a", "b", "a"])
        assert (policy, notices) == (NetworkPolicy("allowlist", ("a", "b")), [])

    def test_allowlist_appends_without_duplicates(self) -> None:
        policy, _ = merge_extra_allowlists(NetworkPolicy("allowlist", ("a", "b")), ["b", "c"])
        assert policy == NetworkPolicy("allowlist", ("a", "b", "c"))

    def test_no_extras_changes_nothing(self) -> None:
        for mode in ("public", "no-network", "allowlist"):
            assert merge_extra_allowlists(NetworkPolicy(mode), []) == (NetworkPolicy(mode), [])


# Property-based tests of the grammar.

LABEL_CHARS = string.ascii_lowercase + string.digits
labels = st.builds(
    lambda first, middle, last: first + middle + last if middle or last else first,
    st.sampled_from(LABEL_CHARS),
    st.text(alphabet=LABEL_CHARS + "-", max_size=20),
    st.sampled_from(LABEL_CHARS),
).filter(lambda label: len(label) <= 63)
hostnames = (
    st.lists(labels, min_size=1, max_size=5).map(".".join).filter(lambda host: not _is_ip(host))
)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _mangle_case(text: str, flips: list[bool]) -> str:
    flips = (flips + [False] * len(text))[: len(text)]
    return "".join(c.upper() if flip else c for c, flip in zip(text, flips, strict=True))


@given(hostnames, st.lists(st.booleans()), st.sampled_from(["", " ", "\t"]), st.booleans())
def test_hostnames_normalize_to_lowercase_without_trailing_dot(
    host: str, flips: list[bool], space: str, trailing_dot: bool
) -> None:
    written = space + _mangle_case(host, flips) + ("." if trailing_dot else "") + space
    assert normalize_allowed_host(written) == host


@given(hostnames)
def test_wildcards_of_hostnames_are_accepted(host: str) -> None:
    assert normalize_allowed_host("*." + host) == "*." + host
    assert classify_allowlist_entry("*." + host) is AllowlistEntryType.WILDCARD_HOSTNAME


@given(hostnames, st.integers(min_value=0, max_value=65535))
def test_ports_and_urls_are_rejected(host: str, port: int) -> None:
    for entry in (f"{host}:{port}", f"https://{host}", f"{host}/index.html"):
        with pytest.raises(ValueError) as info:
            normalize_allowed_host(entry)
        assert str(info.value) == NOT_HOSTNAME


@given(st.ip_addresses())
def test_ip_addresses(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    normal = normalize_allowed_host(address.exploded.upper())
    assert ipaddress.ip_address(normal) == address
    expected = (
        AllowlistEntryType.IPV4_ADDRESS if address.version == 4 else AllowlistEntryType.IPV6_ADDRESS
    )
    assert classify_allowlist_entry(normal) is expected


@given(st.ip_addresses(), st.data())
def test_cidrs_must_have_zero_host_bits(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, data: st.DataObject
) -> None:
    prefix = data.draw(st.integers(min_value=0, max_value=address.max_prefixlen))
    network = ipaddress.ip_network(f"{address}/{prefix}", strict=False)
    assert normalize_allowed_host(str(network)) == network.compressed
    if network.network_address != address:
        with pytest.raises(ValueError) as info:
            normalize_allowed_host(f"{address}/{prefix}")
        assert str(info.value) == NOT_HOSTNAME


@given(st.text(max_size=40))
def test_any_text_is_normalized_idempotently_or_rejected_with_a_known_reason(text: str) -> None:
    try:
        normal = normalize_allowed_host(text)
    except ValueError as exc:
        assert str(exc) in {
            NON_EMPTY,
            NOT_HOSTNAME,
            WILDCARD_IP,
            WILDCARD_PREFIX,
            BAD_LABELS,
        }
    else:
        assert normalize_allowed_host(normal) == normal
        classify_allowlist_entry(normal)
