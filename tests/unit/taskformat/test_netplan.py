"""The network plan per phase, with run-level extra hosts (docs/harbor.md §a.5)."""

from __future__ import annotations

import pytest

from shipyard.taskformat import NetworkPolicy, TaskFormatError, resolve_network_plan

from .helpers import config

PUBLIC = NetworkPolicy("public")
NONE = NetworkPolicy("no-network")


def allow(*hosts: str) -> NetworkPolicy:
    return NetworkPolicy("allowlist", hosts)


def test_defaults_are_public_and_shared() -> None:
    plan = resolve_network_plan(config())
    assert (plan.agent_env_baseline, plan.agent_phase) == (PUBLIC, PUBLIC)
    assert (plan.verifier_env_baseline, plan.verifier_phase) == (None, PUBLIC)
    assert plan.notices == []


def test_verified_example_agent_override_on_no_network_baseline() -> None:
    c = config(
        """
        [environment]
        network_mode = "no-network"
        [agent]
        network_mode = "allowlist"
        allowed_hosts = ["pypi.org"]
        """
    )
    plan = resolve_network_plan(c)
    assert plan.agent_env_baseline == NONE
    assert plan.agent_phase == allow("pypi.org")
    assert plan.verifier_phase == NONE


def test_empty_allowlist_denies_all() -> None:
    c = config('[environment]\nnetwork_mode = "allowlist"')
    assert resolve_network_plan(c).agent_env_baseline == allow()


def test_extras_on_public_are_ignored_with_a_notice() -> None:
    plan = resolve_network_plan(
        config(), extra_environment_hosts=["Env.example."], extra_agent_hosts=["pypi.org"]
    )
    assert (plan.agent_env_baseline, plan.agent_phase) == (PUBLIC, PUBLIC)
    assert plan.notices == [
        "Run-specific allowlist host(s) ['env.example'] are ignored because the effective "
        "network policy is public.",
        "Run-specific allowlist host(s) ['pypi.org'] are ignored because the effective network "
        "policy is public.",
    ]


def test_extras_on_no_network_and_allowlist() -> None:
    c = config('[environment]\nnetwork_mode = "no-network"')
    plan = resolve_network_plan(
        c,
        extra_environment_hosts=["deb.debian.org"],
        extra_agent_hosts=["pypi.org"],
        extra_verifier_hosts=["grader.example"],
    )
    assert plan.agent_env_baseline == allow("deb.debian.org")
    assert plan.agent_phase == allow("deb.debian.org", "pypi.org")
    assert plan.verifier_env_baseline is None
    assert plan.verifier_phase == allow("deb.debian.org", "grader.example")
    assert plan.notices == []


def test_explicit_agent_policy_does_not_get_environment_extras() -> None:
    c = config(
        """
        [environment]
        network_mode = "no-network"
        [agent]
        network_mode = "no-network"
        """
    )
    plan = resolve_network_plan(c, extra_environment_hosts=["a.com"], extra_agent_hosts=["b.com"])
    assert plan.agent_phase == allow("b.com")


def test_step_overrides_win_over_task_overrides() -> None:
    c = config(
        """
        [environment]
        network_mode = "no-network"
        [agent]
        network_mode = "public"
        [verifier]
        network_mode = "allowlist"
        allowed_hosts = ["task.example"]
        [[steps]]
        name = "a"
        [[steps]]
        name = "b"
        [steps.agent]
        network_mode = "allowlist"
        allowed_hosts = ["step.example"]
        [steps.verifier]
        network_mode = "no-network"
        """
    )
    a, b = resolve_network_plan(c, "a"), resolve_network_plan(c, "b")
    assert (a.agent_phase, a.verifier_phase) == (PUBLIC, allow("task.example"))
    assert (b.agent_phase, b.verifier_phase) == (allow("step.example"), NONE)
    assert a.agent_env_baseline == b.agent_env_baseline == NONE


def test_separate_verifier_inheriting_environment_gets_environment_extras() -> None:
    c = config(
        """
        [verifier]
        environment_mode = "separate"
        [environment]
        network_mode = "no-network"
        """
    )
    plan = resolve_network_plan(
        c, extra_environment_hosts=["env.example"], extra_verifier_hosts=["v.example"]
    )
    assert plan.verifier_env_baseline == allow("env.example", "v.example")
    assert plan.verifier_phase == allow("env.example", "v.example")


def test_separate_verifier_with_own_environment_does_not_get_environment_extras() -> None:
    c = config(
        """
        [environment]
        network_mode = "no-network"
        [verifier.environment]
        network_mode = "allowlist"
        allowed_hosts = ["grader.example"]
        """
    )
    plan = resolve_network_plan(
        c, extra_environment_hosts=["env.example"], extra_verifier_hosts=["v.example"]
    )
    assert plan.agent_env_baseline == allow("env.example")
    assert plan.verifier_env_baseline == allow("grader.example", "v.example")
    assert plan.verifier_phase == allow("grader.example", "v.example")


def test_separate_verifier_public_baseline_with_explicit_phase() -> None:
    c = config(
        """
        [verifier]
        network_mode = "no-network"
        [verifier.environment]
        docker_image = "grader"
        """
    )
    plan = resolve_network_plan(c, extra_verifier_hosts=["v.example"])
    assert plan.verifier_env_baseline == PUBLIC
    assert plan.verifier_phase == allow("v.example")
    assert plan.notices == [
        "Run-specific allowlist host(s) ['v.example'] are ignored because the effective network "
        "policy is public."
    ]


def test_per_step_separate_verifier_baseline() -> None:
    c = config(
        """
        [environment]
        network_mode = "no-network"
        [[steps]]
        name = "build"
        [[steps]]
        name = "grade"
        [steps.verifier.environment]
        network_mode = "public"
        """
    )
    assert resolve_network_plan(c, "build").verifier_env_baseline is None
    grade = resolve_network_plan(c, "grade")
    assert (grade.verifier_env_baseline, grade.verifier_phase) == (PUBLIC, PUBLIC)


def test_invalid_extra_hosts_name_the_option() -> None:
    with pytest.raises(TaskFormatError) as info:
        resolve_network_plan(config(), extra_agent_hosts=["https://pypi.org"])
    assert info.value.field == "extra_agent_hosts"
    assert "not URLs, ports, or paths" in info.value.reason
