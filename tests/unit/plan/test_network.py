"""The network plan of a trial as `build_plan` resolves it: a policy key per phase, pod
baselines, the Trial's extra hosts, refusals (issue 6)."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from shipyard.api.models import TrialSpec
from shipyard.plan.network import NetworkSettings, policy_key
from shipyard.plan.phases import PlanError, TrialPlan, build_plan
from shipyard.taskformat import NetworkPolicy, load_task_files

BASE = """\
[agent]
timeout_sec = 60.0
[verifier]
timeout_sec = 60.0
[environment]
docker_image = "debian:bookworm"
"""


def task(toml: str) -> Any:
    files = {
        "task.toml": textwrap.dedent(toml),
        "instruction.md": "Do it.\n",
        "solution/solve.sh": "#!/bin/bash\ntrue\n",
        "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    }
    return load_task_files({k: v.encode() for k, v in files.items()}, name="t")


def plan(toml: str, settings: NetworkSettings | None = None, **spec: Any) -> TrialPlan:
    trial = TrialSpec.model_validate({"taskRef": {"name": "t"}, **spec})
    return build_plan(task(toml), trial, {}, settings)


def keys(p: TrialPlan) -> dict[str, str | None]:
    return {ph.id: ph.network for ph in p.phases}


def with_section(section: str, body: str) -> str:
    return BASE.replace(f"[{section}]\n", f"[{section}]\n{body}\n")


def test_public_task_runs_every_phase_public() -> None:
    p = plan(BASE)
    assert set(keys(p).values()) == {"public"}
    assert p.network is not None and not p.network.restricted
    assert p.network.baseline("env", None) == "public"


def test_no_network_baseline_with_an_agent_allowlist() -> None:
    toml = with_section("environment", 'network_mode = "no-network"')
    toml = toml.replace("[agent]\n", '[agent]\nnetwork_mode = "allowlist"\n'
                                     'allowed_hosts = ["192.0.2.10"]\n')
    p = plan(toml)
    agent_key = policy_key(NetworkPolicy("allowlist", ("192.0.2.10",)))
    assert keys(p) == {"environment": "no-network", "agent": agent_key,
                       "verifier": "no-network"}
    assert p.network is not None
    assert p.network.baseline("env", None) == "no-network"
    assert p.network.policies[agent_key].allowed_hosts == ("192.0.2.10",)


def test_trial_extra_hosts_merge_like_harbor() -> None:
    toml = with_section("environment", 'network_mode = "no-network"')
    p = plan(toml, network={"extraAllowedHosts": {"agent": ["10.1.2.3"],
                                                  "verifier": ["10.9.9.9"]}})
    assert p.network is not None
    agent = p.network.policies[p.phase("agent").network or ""]
    verifier = p.network.policies[p.phase("verifier").network or ""]
    assert agent == NetworkPolicy("allowlist", ("10.1.2.3",))
    assert verifier == NetworkPolicy("allowlist", ("10.9.9.9",))
    assert p.phase("environment").network == "no-network"
    # Extras on a public policy are ignored, with Harbor's notice.
    public = plan(BASE, network={"extraAllowedHosts": {"environment": ["10.0.0.1"]}})
    assert public.network is not None
    assert set(keys(public).values()) == {"public"}
    assert "ignored because the effective network policy is public" in public.network.notices[0]


def test_invalid_extra_host_is_a_trial_error_naming_the_field() -> None:
    with pytest.raises(PlanError) as caught:
        plan(BASE, network={"extraAllowedHosts": {"agent": ["https://x.com"]}})
    assert caught.value.reason == "TrialInvalid"
    assert caught.value.message.startswith("spec.network.extraAllowedHosts.agent: ")
    assert "not URLs" in caught.value.message


def test_hostnames_are_refused_without_backend_and_planned_with_one() -> None:
    toml = with_section("environment", 'network_mode = "allowlist"\n'
                                       'allowed_hosts = ["pypi.org", "*.github.com", "10.0.0.1"]')
    with pytest.raises(PlanError) as caught:
        plan(toml)
    assert caught.value.reason == "NetworkPolicyUnenforceable"
    assert "environment baseline: pypi.org, *.github.com" in caught.value.message
    assert "10.0.0.1" not in caught.value.message
    p = plan(toml, NetworkSettings(fqdn_backend="cilium"))
    assert p.phase("agent").network == policy_key(
        NetworkPolicy("allowlist", ("pypi.org", "*.github.com", "10.0.0.1")))
    # A hostname only in an extra host is refused too.
    with pytest.raises(PlanError, match=r"agent phase: example\.org"):
        plan(with_section("environment", 'network_mode = "no-network"'),
             network={"extraAllowedHosts": {"agent": ["example.org"]}})


def test_separate_verifier_gets_its_own_baseline() -> None:
    toml = BASE + textwrap.dedent("""
        [verifier.environment]
        docker_image = "debian:bookworm"
        network_mode = "allowlist"
        allowed_hosts = ["198.51.100.7"]
        """)
    toml = toml.replace("[environment]\n", '[environment]\nnetwork_mode = "no-network"\n', 1)
    p = plan(toml)
    verifier_key = policy_key(NetworkPolicy("allowlist", ("198.51.100.7",)))
    assert p.network is not None
    assert p.network.baseline("verifier", None) == verifier_key
    assert p.network.baseline("env", None) == "no-network"
    assert keys(p)["verifier-environment"] == verifier_key
    assert keys(p)["verifier"] == verifier_key
    assert keys(p)["collect"] == "no-network"
    assert keys(p)["agent"] == "no-network"


def test_multi_step_overrides_per_step() -> None:
    toml = textwrap.dedent("""
        schema_version = "1.4"
        [environment]
        docker_image = "debian:bookworm"
        network_mode = "no-network"
        [[steps]]
        name = "one"
        [steps.agent]
        network_mode = "allowlist"
        allowed_hosts = ["192.0.2.1"]
        [[steps]]
        name = "two"
        """)
    files = {"task.toml": toml, "instruction.md": "x\n",
             "steps/one/instruction.md": "one\n", "steps/two/instruction.md": "two\n",
             "steps/one/tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
             "steps/two/tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
             "steps/one/solution/solve.sh": "#!/bin/bash\ntrue\n",
             "steps/two/solution/solve.sh": "#!/bin/bash\ntrue\n"}
    loaded = load_task_files({k: v.encode() for k, v in files.items()}, name="t")
    p = build_plan(loaded, TrialSpec.model_validate({"taskRef": {"name": "t"}}), {})
    agents = {ph.step: ph.network for ph in p.phases if ph.name == "agent"}
    assert agents["one"] == policy_key(NetworkPolicy("allowlist", ("192.0.2.1",)))
    assert agents["two"] == "no-network"


def test_the_apiserver_is_blocked_by_default_with_an_opt_out() -> None:
    from shipyard.plan.network import settings_from_env

    addresses = {"10.96.0.1", "10.88.0.1", "fd00::1"}
    blocked = settings_from_env({}, apiserver=addresses).blocked_cidrs
    assert {"10.96.0.1/32", "10.88.0.1/32", "fd00::1/128"} <= set(blocked)
    assert "169.254.0.0/16" in blocked  # the metadata servers stay blocked
    # The apiserver is part of the cluster: both opt-outs let it through.
    opted_out = settings_from_env({"SHIPYARD_BLOCK_APISERVER": "false",
                                   "SHIPYARD_BLOCK_CLUSTER_EGRESS": "false"}, apiserver=addresses)
    assert "10.96.0.1/32" not in opted_out.blocked_cidrs
    assert "10.96.0.1/32" in settings_from_env(
        {"SHIPYARD_BLOCK_APISERVER": "false"}, apiserver=addresses).blocked_cidrs
    with pytest.raises(ValueError, match="SHIPYARD_BLOCK_APISERVER"):
        settings_from_env({"SHIPYARD_BLOCK_APISERVER": "maybe"}, apiserver=addresses)


def test_public_is_kept_out_of_the_clusters_ranges_by_default_with_an_opt_out() -> None:
    from shipyard.plan.network import settings_from_env

    cluster = {"192.0.2.2", "10.88.0.0/16", "10.96.0.0/12"}
    settings = settings_from_env({"SHIPYARD_CLUSTER_CIDRS": "10.89.0.0/16"},
                                 apiserver={"10.88.0.1"}, cluster=cluster)
    assert settings.block_cluster
    assert {"192.0.2.2/32", "10.88.0.0/16", "10.96.0.0/12", "10.89.0.0/16", "10.88.0.1/32",
            "169.254.0.0/16"} <= set(settings.blocked_cidrs)
    opted_out = settings_from_env({"SHIPYARD_BLOCK_CLUSTER_EGRESS": "false",
                                   "SHIPYARD_CLUSTER_CIDRS": "10.89.0.0/16"},
                                  apiserver={"10.88.0.1"}, cluster=cluster)
    assert not opted_out.block_cluster
    assert not {"192.0.2.2/32", "10.88.0.0/16", "10.89.0.0/16"} & set(opted_out.blocked_cidrs)
    assert "10.88.0.1/32" in opted_out.blocked_cidrs  # the apiserver still, on its own setting
    with pytest.raises(ValueError, match="SHIPYARD_CLUSTER_CIDRS"):
        settings_from_env({"SHIPYARD_CLUSTER_CIDRS": "10.89.0.0/33"})
    with pytest.raises(ValueError, match="SHIPYARD_BLOCK_CLUSTER_EGRESS"):
        settings_from_env({"SHIPYARD_BLOCK_CLUSTER_EGRESS": "perhaps"})


def test_node_addresses_are_never_reached_but_pod_ranges_may_be_allowlisted() -> None:
    from shipyard.plan.network import settings_from_env

    settings = settings_from_env({}, apiserver={"10.96.0.1"},
                                 cluster={"192.0.2.2", "10.88.0.0/16", "10.96.0.0/12"})
    assert "192.0.2.2/32" in settings.never_cidrs and "10.96.0.1/32" in settings.never_cidrs
    assert "10.88.0.0/16" not in settings.never_cidrs  # a model server's pod IP may be named
    opted_out = settings_from_env({"SHIPYARD_BLOCK_CLUSTER_EGRESS": "false"},
                                  apiserver={"10.96.0.1"}, cluster={"192.0.2.2"})
    assert "192.0.2.2/32" not in opted_out.never_cidrs


def test_the_fence_is_the_apiserver_s_sockets_unless_the_apiserver_is_open_or_it_is_off() -> None:
    from shipyard.plan.network import Fence, settings_from_env

    sockets = {"10.96.0.1:443", "192.0.2.9:6443"}
    settings = settings_from_env({}, apiserver={"10.96.0.1", "192.0.2.9"},
                                 apiserver_sockets=sockets)
    assert settings.fence == Fence(("10.96.0.1:443", "192.0.2.9:6443"), 30.0)
    assert settings_from_env({"SHIPYARD_NETWORK_FENCE_SEC": "4.5"},
                             apiserver_sockets=sockets).fence == Fence(tuple(sorted(sockets)), 4.5)
    assert settings_from_env({"SHIPYARD_NETWORK_FENCE_SEC": "0"},
                             apiserver_sockets=sockets).fence is None
    assert settings_from_env({"SHIPYARD_BLOCK_APISERVER": "false",
                              "SHIPYARD_BLOCK_CLUSTER_EGRESS": "false"},
                             apiserver_sockets=sockets).fence is None  # trial pods may reach it
    assert settings_from_env({}).fence is None  # no apiserver found (not allowed to look)
    for bad in ("soon", "-1", "nan", "inf", "7200"):
        with pytest.raises(ValueError, match="SHIPYARD_NETWORK_FENCE_SEC"):
            settings_from_env({"SHIPYARD_NETWORK_FENCE_SEC": bad})
    # Before any program of the task's image starts with the pod too, unless turned off.
    assert settings.fence is not None and settings.fence.containers
    off = settings_from_env({"SHIPYARD_NETWORK_FENCE_CONTAINERS": "false"},
                            apiserver_sockets=sockets).fence
    assert off is not None and not off.containers
    with pytest.raises(ValueError, match="SHIPYARD_NETWORK_FENCE_CONTAINERS"):
        settings_from_env({"SHIPYARD_NETWORK_FENCE_CONTAINERS": "maybe"})


def test_each_pod_s_first_phase_makes_the_fence_and_no_other_phase_does() -> None:
    from shipyard.plan.network import Fence
    from shipyard.plan.phases import EnvironmentScript, VerifierEnvironmentScript

    fence = Fence(("10.96.0.1:443",), 30.0)
    toml = BASE.replace("[verifier]\n", '[verifier]\nenvironment_mode = "separate"\n')
    p = plan(toml, NetworkSettings(fence=fence))
    fenced = {ph.id for ph in p.phases if ph.fence == fence}
    assert fenced == {"environment", "verifier-environment"}
    assert isinstance(p.phase("environment").script, EnvironmentScript)
    assert isinstance(p.phase("verifier-environment").script, VerifierEnvironmentScript)
    assert p.network is not None and p.network.fence == fence
    unfenced = plan(toml, NetworkSettings())
    assert all(ph.fence is None for ph in unfenced.phases)


def test_an_offline_phase_on_a_pod_with_dns_proves_its_switch_and_none_other_does() -> None:
    from shipyard.plan.network import Fence

    fence, dns = Fence(("10.96.0.1:443",)), Fence(("10.96.0.10:53",), 30.0, "the cluster DNS")
    settings = NetworkSettings(fence=fence, dns_fence=dns)
    offline_agent = with_section("agent", 'network_mode = "no-network"')
    fences = {ph.id: ph.fence for ph in plan(offline_agent, settings).phases}
    assert fences == {"environment": fence, "agent": dns, "verifier": None}
    # Offline throughout: nothing switches; a public agent on an offline pod loosens.
    offline = with_section("environment", 'network_mode = "no-network"')
    assert {ph.id: ph.fence for ph in plan(offline, settings).phases} == {
        "environment": fence, "agent": None, "verifier": None}
    loosened = with_section("agent", 'network_mode = "public"').replace(
        "[environment]\n", '[environment]\nnetwork_mode = "no-network"\n')
    assert plan(loosened, settings).phase("agent").fence is None
    # An allowlist has DNS: no fence can tell its switch (the settle time stays).
    allow = with_section("agent", 'network_mode = "allowlist"\nallowed_hosts = ["192.0.2.1"]')
    assert plan(allow, settings).phase("agent").fence is None
