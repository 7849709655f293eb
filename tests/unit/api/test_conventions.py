"""Names, label values and selectors: whatever the length of a Trial's name, every selector a
trial's objects use matches the labels its pods carry (issue 11's long-name bug)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from shipyard.api import conventions as c
from shipyard.api.models import Condition
from shipyard.plan.network import NetworkSettings
from shipyard.render.network_policy import build_network_objects
from shipyard.render.pod import build_logs_configmap, build_trial_pod
from shipyard.taskformat import NetworkPolicy
from tests.unit.helpers import HELLO_TOML, plan_for, task, trial_body

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
RFC1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAMES = ["short", "a" * 63, "b" * 64, "sweep-" + "c" * 94, ".".join(["d" * 62] * 4) + ".e"]


@pytest.mark.parametrize("name", NAMES)
def test_every_selector_matches_the_pods_labels(name: str) -> None:
    assert len(name) <= 253
    body = trial_body(name=name, task_name="t" * 200)
    toml = HELLO_TOML + 'network_mode = "allowlist"\nallowed_hosts = ["192.0.2.1"]\n'
    plan = plan_for(task(toml))
    pod = build_trial_pod(body, plan, "env", None, c.pod_name(name, "env", None, 1))
    labels = pod["metadata"]["labels"]
    assert all(len(v) <= 63 and LABEL_VALUE.match(v) for v in labels.values())
    assert RFC1123_LABEL.match(pod["metadata"]["name"]) and len(pod["metadata"]["name"]) <= 63
    policies = [NetworkPolicy("public"), NetworkPolicy("no-network"),
                NetworkPolicy("allowlist", ("192.0.2.1", "example.com"))]
    objects = build_network_objects(body, policies, NetworkSettings(fqdn_backend="cilium"))
    assert len(objects) == 4  # deny-all, public, allowlist, its Cilium FQDN policy
    for obj in objects:
        assert len(obj["metadata"]["name"]) <= 63
        spec = obj["spec"]
        selector = (spec.get("podSelector") or spec["endpointSelector"])["matchLabels"]
        assert selector[c.LABEL_TRIAL] == labels[c.LABEL_TRIAL]
        assert all(len(v) <= 63 and LABEL_VALUE.match(v) for v in selector.values())
        assert obj["metadata"]["labels"][c.LABEL_TRIAL] == labels[c.LABEL_TRIAL]
    assert c.trial_selector(name).items() <= labels.items()
    logs = build_logs_configmap(body, {})
    assert logs["metadata"]["labels"][c.LABEL_TRIAL] == labels[c.LABEL_TRIAL]


def test_label_values_keep_short_values_and_hash_long_ones() -> None:
    assert c.label_value("hello") == "hello"
    assert c.label_value("a" * 63) == "a" * 63
    long = c.label_value("a" * 64)
    assert len(long) <= 63 and long != c.label_value("a" * 65)
    assert c.label_value("x" * 53 + "." + "y" * 20).count(".") == 0  # no trailing separator


def test_derived_names() -> None:
    assert c.pod_name("t", "env", None, 1) == "t-env"
    assert c.pod_name("t", "verifier", 2, 3) == "t-verifier-s2-a3"
    assert c.pod_name("t", c.Role.VERIFIER, None, 1) == "t-verifier"
    assert c.logs_configmap_name("t") == "t-logs"
    assert c.deny_all_policy_name("t") == "t-net-deny"
    assert c.allow_policy_name("t", "public") == "t-net-public"
    assert c.fqdn_policy_name("t", "allowlist-1") == "t-fqdn-allowlist-1"
    bundle = c.bundle_configmap_name("hello", b"one")
    assert re.fullmatch(r"hello-bundle-[0-9a-f]{10}", bundle)
    assert len(c.bundle_configmap_name("x" * 253, b"one")) <= 63
    assert RFC1123_LABEL.match(c.bundle_configmap_name("y" * 44 + "-.z", b"one").split(".")[0])


@pytest.mark.parametrize("name", NAMES)
def test_event_names_are_fixed_by_what_they_record(name: str) -> None:
    """An operator restarted before its status write posts a transition's Events again under
    the same names (the apiserver answers 409): each Event once."""
    first = c.event_name(name, "uid-1", "1/agent/Normal/AgentStarted/agent started")
    assert first == c.event_name(name, "uid-1", "1/agent/Normal/AgentStarted/agent started")
    others = {c.event_name(name, "uid-1", "2/agent/Normal/AgentStarted/agent started"),
              c.event_name(name, "uid-2", "1/agent/Normal/AgentStarted/agent started"),
              c.event_name(name, "uid-1", "1/verifier/Normal/VerifierStarted/verifier started")}
    assert first not in others and len(others) == 3
    assert len(first) <= 253
    assert all(RFC1123_LABEL.match(part) for part in first.split("."))


def test_roles_and_components() -> None:
    assert c.Role("env").component == "environment"
    assert c.Role.VERIFIER.component == "verifier"
    assert c.Role.ENV == "env"
    assert "environment" in c.POD_COMPONENTS


def test_condition_lookup_on_dicts_and_models() -> None:
    dicts = [{"type": "Running", "status": "False", "reason": "WaitingForTask"},
             {"type": "Failed", "status": "True", "reason": "PodLost"}]
    assert c.condition(dicts, "Complete", "Failed")["reason"] == "PodLost"
    assert c.condition(dicts, "Running") is None
    assert c.condition(dicts, "Running", status=None)["reason"] == "WaitingForTask"
    assert c.condition(dicts, "Running", status=None, reason="Other") is None
    models = [Condition(type="Complete", status="True", reason="RewardRecorded")]
    assert c.condition(models, "Complete", "Failed").reason == "RewardRecorded"
    assert c.condition(None, "Ready") is None
    assert c.condition(c.object_conditions({"status": {"conditions": dicts}}), "Failed")


def test_finished_phases() -> None:
    assert c.is_finished_phase("Completed") and c.is_finished_phase("Failed")
    assert not c.is_finished_phase("Running") and not c.is_finished_phase(None)


def test_times() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert c.iso(when) == "2026-01-02T03:04:05Z"
    assert c.parse_time("2026-01-02T03:04:05Z") == when
    assert c.parse_time("2026-01-02T03:04:05") == when  # no zone: UTC
    assert c.parse_time("") is None and c.parse_time(None) is None
    assert c.parse_time("yesterday") is None


@pytest.mark.parametrize(("value", "expected"), [
    ("true", True), ("yes", True), ("", False), ("false", False), ("0", False)])
def test_cancel_annotation(value: str, expected: bool) -> None:
    assert c.cancel_requested({c.CANCEL_ANNOTATION: value}) is expected
    assert c.cancel_requested(None) is False
