"""The operator's network settings against the cluster: what it says about the fence."""

from __future__ import annotations

import logging

import pytest

from shipyard.kube import network as kube_network
from shipyard.plan.network import NetworkConfig
from shipyard.runtime import config


@pytest.mark.parametrize("sockets, level, words", [
    (frozenset({"10.96.0.1:443"}), logging.INFO, "waits up to 30 s for its policy"),
    (frozenset(), logging.WARNING, "network fence off: the apiserver's addresses could not"),
])
def test_the_operator_says_once_whether_trial_pods_get_the_fence(
        monkeypatch, caplog, sockets, level, words) -> None:
    for name, value in (("discovered_fqdn_apis", frozenset()),
                        ("node_ip_families", frozenset({"IPv4"})),
                        ("apiserver_addresses", frozenset({"10.96.0.1"})),
                        ("cluster_ranges", frozenset()), ("apiserver_sockets", sockets),
                        ("dns_sockets", frozenset())):
        monkeypatch.setattr(kube_network, name, lambda value=value: value)
    monkeypatch.setattr(config, "_fence_told", False)
    with caplog.at_level(logging.INFO, logger="shipyard.network"):
        first = config.cluster_network_settings(NetworkConfig())
        config.cluster_network_settings(NetworkConfig())
    said = [r for r in caplog.records if r.name == "shipyard.network"]
    assert len(said) == 1 and said[0].levelno == level and words in said[0].getMessage()
    assert (first.fence is not None) == bool(sockets)
