"""The operator-wide trial settings the Helm chart passes as environment variables."""

from __future__ import annotations

import pytest

from shipyard.api.conventions import OPERATOR_LEASE
from shipyard.plan.accelerators import (
    DEFAULT_LOG_LIMIT_BYTES,
    NO_ACCELERATORS,
    PodOverrides,
    SchedulingSettings,
)
from shipyard.plan.settings import (
    DEFAULT_TTL_ENV,
    PROBE_IMAGE_ENV,
    LeaderSettings,
    OperatorSettings,
)
from shipyard.render.accelerators import apply_scheduling


def pod(requests: dict[str, str]) -> dict:
    return {"spec": {"containers": [{"name": "main", "resources": {"requests": requests}}]}}


def test_default_requests_fill_only_what_the_task_leaves_unset():
    settings = SchedulingSettings.from_env(
        {"SHIPYARD_TRIAL_DEFAULT_CPU": "500m", "SHIPYARD_TRIAL_DEFAULT_MEMORY": " 1Gi "})
    assert settings.pod_defaults.default_requests == {"cpu": "500m", "memory": "1Gi"}
    rendered = apply_scheduling(pod({"cpu": "2"}), NO_ACCELERATORS,
                                settings.pod_defaults.under(PodOverrides()))
    assert rendered["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "2", "memory": "1Gi"}


def test_no_default_requests_when_unset():
    settings = SchedulingSettings.from_env({"SHIPYARD_TRIAL_DEFAULT_CPU": ""})
    assert settings.pod_defaults.default_requests == {}


def test_log_limit_from_env_with_a_clear_error():
    assert SchedulingSettings.from_env({}).log_limit_bytes == DEFAULT_LOG_LIMIT_BYTES
    assert SchedulingSettings.from_env({"SHIPYARD_LOG_LIMIT_BYTES": "1024"}).log_limit_bytes \
        == 1024
    with pytest.raises(ValueError, match="SHIPYARD_LOG_LIMIT_BYTES='lots' is not a whole"):
        SchedulingSettings.from_env({"SHIPYARD_LOG_LIMIT_BYTES": "lots"})


def test_ttl_from_the_trial_else_the_operator_default():
    ttl_seconds = OperatorSettings.from_env({}).ttl_seconds
    assert ttl_seconds({}) is None
    assert ttl_seconds({"ttlSecondsAfterFinished": 0}) == 0
    ttl_seconds = OperatorSettings.from_env({DEFAULT_TTL_ENV: "3600"}).ttl_seconds
    assert ttl_seconds({}) == 3600
    assert ttl_seconds({"ttlSecondsAfterFinished": 5}) == 5


def test_operator_settings_are_read_once_from_every_variable():
    settings = OperatorSettings.from_env({
        "SHIPYARD_TASK_WAIT_SEC": "10", "SHIPYARD_NETWORK_SETTLE_SEC": "0.5",
        "SHIPYARD_TASK_ENV_ALLOW": "HF_*, EXTRA", "HF_TOKEN": "t", "EXTRA": "e", "HOME": "/root",
        "SHIPYARD_FQDN_BACKEND": "cilium", "SHIPYARD_IP_FAMILIES": "IPv4",
        "SHIPYARD_LOG_LIMIT_BYTES": "2048", "SHIPYARD_TRIAL_RUNTIME_CLASS": "gvisor",
    })
    assert settings.error is None
    assert (settings.task_wait_sec, settings.network_settle_sec) == (10.0, 0.5)
    assert settings.task_env == {"HF_TOKEN": "t", "EXTRA": "e"}
    network = settings.network.resolve(discovered=(), node_families=("IPv4", "IPv6"))
    assert network.fqdn_backend == "cilium" and network.ip_families == {"IPv4"}
    assert settings.scheduling.log_limit_bytes == 2048
    assert settings.scheduling.pod_defaults.runtime_class_name == "gvisor"
    # Unreadable durations fall back to their defaults, as before.
    assert OperatorSettings.from_env({"SHIPYARD_TASK_WAIT_SEC": "soon"}).task_wait_sec == 60.0


def test_a_bad_setting_is_kept_as_the_error_every_trial_reports():
    settings = OperatorSettings.from_env({"SHIPYARD_FQDN_BACKEND": "calico",
                                          "SHIPYARD_LOG_LIMIT_BYTES": "lots"})
    assert "SHIPYARD_FQDN_BACKEND='calico'" in settings.error
    assert "SHIPYARD_LOG_LIMIT_BYTES='lots'" in settings.error


def test_leader_election_is_on_by_default_with_client_go_timings():
    leader = OperatorSettings.from_env({}).leader
    assert leader == LeaderSettings()
    assert leader.enabled and leader.lease_name == OPERATOR_LEASE
    assert (leader.lease_sec, leader.renew_deadline_sec, leader.retry_sec) == (15, 10, 2)
    assert leader.namespace is None and leader.identity is None


def test_leader_settings_from_env():
    leader = LeaderSettings.from_env({
        "SHIPYARD_LEADER_ELECTION": "false", "SHIPYARD_LEADER_LEASE_NAME": "shipyard-operator-tl",
        "SHIPYARD_LEADER_LEASE_NAMESPACE": "default", "SHIPYARD_LEADER_IDENTITY": "a",
        "SHIPYARD_LEADER_LEASE_SEC": "6", "SHIPYARD_LEADER_RENEW_DEADLINE_SEC": "4",
        "SHIPYARD_LEADER_RETRY_SEC": "1"})
    assert leader == LeaderSettings(enabled=False, lease_name="shipyard-operator-tl",
                                    namespace="default", identity="a", lease_sec=6,
                                    renew_deadline_sec=4, retry_sec=1)


def test_leader_timings_must_leave_the_holder_time_to_stop_first():
    with pytest.raises(ValueError, match="RETRY_SEC < SHIPYARD_LEADER_RENEW_DEADLINE_SEC <"):
        LeaderSettings.from_env({"SHIPYARD_LEADER_RENEW_DEADLINE_SEC": "20"})
    with pytest.raises(ValueError, match="SHIPYARD_LEADER_LEASE_SEC='x': not a number"):
        LeaderSettings.from_env({"SHIPYARD_LEADER_LEASE_SEC": "x"})
    settings = OperatorSettings.from_env({"SHIPYARD_LEADER_ELECTION": "maybe"})
    assert settings.leader == LeaderSettings()  # the safe defaults: elected
    assert "SHIPYARD_LEADER_ELECTION='maybe': not a boolean" in (settings.error or "")


def test_the_probe_container_is_opted_into_and_none_means_an_exec_probe():
    assert OperatorSettings.from_env({}).probe_image is None
    assert OperatorSettings.from_env({PROBE_IMAGE_ENV: " mirror/busybox:1.37 "}).probe_image \
        == "mirror/busybox:1.37"
    assert OperatorSettings.from_env({PROBE_IMAGE_ENV: "None"}).probe_image is None


def test_the_go_runner_comes_with_its_image_and_sh_stays_available():
    from shipyard.plan.settings import RUNNER_ENV, RUNNER_IMAGE_ENV

    assert OperatorSettings.from_env({}).runner_image is None  # runner.sh
    image = "registry.example/shipyard/runner:abc"
    assert OperatorSettings.from_env({RUNNER_IMAGE_ENV: image}).runner_image == image
    assert OperatorSettings.from_env({RUNNER_IMAGE_ENV: image, RUNNER_ENV: "go"}).runner_image \
        == image
    assert OperatorSettings.from_env({RUNNER_IMAGE_ENV: image, RUNNER_ENV: "sh"}).runner_image \
        is None
    bad = OperatorSettings.from_env({RUNNER_IMAGE_ENV: image, RUNNER_ENV: "perl"})
    assert bad.runner_image is None and "SHIPYARD_RUNNER='perl'" in (bad.error or "")


def test_the_runner_s_files_come_in_configmaps_unless_sh_or_none():
    from shipyard.plan.settings import RUNNER_ENV, RUNNER_FILES_ENV

    assert OperatorSettings.from_env({}).runner_files is None
    assert OperatorSettings.from_env({RUNNER_FILES_ENV: " /opt/r "}).runner_files == "/opt/r"
    assert OperatorSettings.from_env({RUNNER_FILES_ENV: "none"}).runner_files is None
    assert OperatorSettings.from_env({RUNNER_FILES_ENV: "/opt/r", RUNNER_ENV: "sh"}
                                     ).runner_files is None


def test_an_operator_run_by_hand_takes_the_clusters_published_defaults_under_its_own():
    from shipyard.plan.settings import with_cluster_defaults

    published = {"SHIPYARD_BUILD_BACKEND": "buildkit", "SHIPYARD_BUILD_REGISTRY": "r:5/x",
                 "OTHER": "ignored"}
    mine = with_cluster_defaults({"SHIPYARD_BUILD_REGISTRY": "mine/y"}, published)
    assert mine == {"SHIPYARD_BUILD_BACKEND": "buildkit", "SHIPYARD_BUILD_REGISTRY": "mine/y"}
    settings = OperatorSettings.from_env(mine)
    assert settings.images.backend == "buildkit" and settings.images.registry == "mine/y"
    # In a pod the chart's environment alone counts.
    in_pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    assert with_cluster_defaults(in_pod, published) == in_pod


def test_the_default_lease_is_named_from_the_namespaces_served():
    leader = LeaderSettings.from_env({})
    assert leader.lease_for([]) == OPERATOR_LEASE  # every namespace
    assert leader.lease_for(["team-b", "team-a", "team-a"]) == "shipyard-operator.team-a.team-b"
    assert leader.lease_for(["team-a"]) != leader.lease_for(["team-b"])
    many = [f"namespace-{i:03d}" for i in range(30)]
    name = leader.lease_for(many)
    assert len(name) <= 253 and name.startswith("shipyard-operator-")
    assert name == leader.lease_for(reversed(many))


def test_an_explicit_lease_name_wins_whatever_is_served():
    leader = LeaderSettings.from_env({"SHIPYARD_LEADER_LEASE_NAME": "shipyard-operator"})
    assert leader.named and leader.lease_for(["team-a"]) == "shipyard-operator"
