"""An installed agent inside a trial: its phase, its bundle's init container, the model
endpoint allowed for the agent phase alone, and what the trial records from its output."""

from __future__ import annotations

from typing import Any

import pytest

from shipyard.api.conventions import Role
from shipyard.plan.agents import USAGE_FILE
from shipyard.plan.network import NetworkSettings
from shipyard.plan.phases import PlanError, TrialPlan
from shipyard.reconcile import trial_machine as m
from shipyard.render.network_policy import build_network_objects
from shipyard.render.phase_bundle import build_phase_bundle
from shipyard.render.phase_scripts import phase_scripts
from shipyard.render.pod import build_trial_pod
from tests.unit.helpers import HELLO_TOML, T0, done, plan_for, task, trial_body
from tests.unit.reconcile.test_agent_result import sample

NO_NETWORK = HELLO_TOML.replace("[environment]\n", '[environment]\nnetwork_mode = "no-network"\n')
CLAUDE = {"name": "claude-code", "model": "stub-solve",
          "baseURL": "http://10.96.0.50:8000",
          "envFrom": [{"secretRef": {"name": "model-key"}}]}
STUB = {"podSelector": {"app": "llmstub"}, "port": 8000}


def agent_phase(plan: TrialPlan):
    return plan.phase("agent")


def agent_command(plan: TrialPlan) -> str:
    return phase_scripts(agent_phase(plan)).command


def build_environment_pod(body: dict[str, Any], plan: TrialPlan) -> dict[str, Any]:
    return build_trial_pod(body, plan, Role.ENV, None, "hello-oracle-env")


def test_the_agent_phase_gets_the_secrets_and_the_instruction_file() -> None:
    plan = plan_for(agent=CLAUDE)
    phase = agent_phase(plan)
    assert phase.secrets and plan.secret_names == ("model-key",)
    assert phase.installed_agent == "claude-code" and phase.model == "stub-solve"
    assert phase.payload == {"instruction.md": b"Write hello to /app/hello.txt\n"}
    assert USAGE_FILE in phase.collect
    assert phase.log_files == ("/logs/agent/claude-code.txt",)
    # Only the agent phase sees the keys.
    assert [p.id for p in plan.phases if p.secrets] == ["agent"]
    # The phase bundle carries no instruction text in its command.
    assert b"Write hello" not in build_phase_bundle("agent", phase).split(b"payload/")[0]


def test_trial_env_overrides_the_agents_defaults() -> None:
    plan = plan_for(agent={**CLAUDE, "env": [{"name": "IS_SANDBOX", "value": "0"}]})
    assert agent_phase(plan).env["IS_SANDBOX"] == "0"


def test_the_bundle_is_copied_by_an_init_container() -> None:
    image = "localhost/shipyard/agent-claude-code:2.1.330@sha256:" + "a" * 64
    plan = plan_for(agent={**CLAUDE, "bundleImage": image})
    pod = build_environment_pod(trial_body(), plan)
    (init,) = pod["spec"]["initContainers"]
    assert init["image"] == image
    assert "cp -a /bundle/claude-code /shipyard/agents/claude-code" in init["command"][-1]
    assert init["volumeMounts"] == [{"name": "shipyard", "mountPath": "/shipyard"}]


def test_oracle_pods_have_no_init_container() -> None:
    pod = build_environment_pod(trial_body(), plan_for())
    assert "initContainers" not in pod["spec"]


def test_bad_agent_spec_is_trial_invalid() -> None:
    with pytest.raises(PlanError) as e:
        plan_for(agent={"name": "codex"})
    assert e.value.reason == "TrialInvalid" and "spec.agent.model" in e.value.message


def test_base_url_host_is_allowed_for_the_agent_phase_only() -> None:
    plan = plan_for(task(NO_NETWORK), agent=CLAUDE)
    net = plan.network
    assert net is not None
    agent_key = agent_phase(plan).network
    assert list(net.policies[agent_key].allowed_hosts) == ["10.96.0.50"]
    assert plan.phase("environment").network == "no-network"
    assert plan.phase("verifier").network == "no-network"


def test_in_cluster_model_server_is_allowed_by_selector_in_the_agent_phase_only() -> None:
    plan = plan_for(task(NO_NETWORK), agent={**CLAUDE, "modelEndpoint": STUB})
    net = plan.network
    assert net is not None
    assert agent_phase(plan).network == "no-network-model"
    assert plan.phase("verifier").network == "no-network"
    objects = build_network_objects(trial_body(), list(net.policies.values()), NetworkSettings(),
                                    net.model_policies, net.model_peer)
    by_name = {o["metadata"]["name"]: o for o in objects}
    model = by_name["hello-oracle-net-no-network-model"]
    assert model["spec"]["podSelector"]["matchLabels"]["shipyard.dev/network"] == (
        "no-network-model")
    assert model["spec"]["egress"] == [{
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ns"}},
                "podSelector": {"matchLabels": {"app": "llmstub"}}}],
        "ports": [{"protocol": "TCP", "port": 8000}],
    }]
    # Nothing else is opened: the only other object is the deny-all.
    assert set(by_name) == {"hello-oracle-net-deny", "hello-oracle-net-no-network-model"}


def test_public_tasks_need_no_model_rule() -> None:
    plan = plan_for(agent={**CLAUDE, "modelEndpoint": STUB})
    assert agent_phase(plan).network == "public"


def test_install_script_is_refused_for_a_no_network_task() -> None:
    with pytest.raises(PlanError) as e:
        plan_for(task(NO_NETWORK), agent={**CLAUDE, "install": "script"})
    assert e.value.reason == "TrialInvalid"
    assert "spec.agent.install" in e.value.message and "no-network" in e.value.message


def test_install_script_runs_before_the_agent_as_root_without_a_bundle() -> None:
    plan = plan_for(agent={**CLAUDE, "install": "script"})
    prepare = phase_scripts(agent_phase(plan)).prepare or ""
    assert "npm install -g @anthropic-ai/claude-code@" in prepare
    assert plan.environment.agent_bundles == ()


def finish_agent(plan: TrialPlan, rc: int, files: dict[str, bytes]) -> Any:
    status = m.start(m.TrialStatus(), plan, "sha256:d", 3, T0)
    status, _ = m.on_result(status, plan, "agent", done(rc, files=files), T0)
    return status


def test_agent_result_is_recorded_from_the_usage_line() -> None:
    plan = plan_for(agent=CLAUDE)
    status = finish_agent(plan, 0, {USAGE_FILE: sample("claude-code-result.jsonl").encode()})
    assert status.agent_result is not None
    assert (status.agent_result.input_tokens, status.agent_result.output_tokens) == (240, 60)
    assert status.agent_result.cost_usd == 0.0027
    assert status.error is None


@pytest.mark.parametrize(("name", "expected"), [
    ("claude-code-429.jsonl", "ApiRateLimitError"),
    ("claude-code-401.jsonl", "AgentAuthenticationError"),
])
def test_agent_failures_get_harbors_error_type(name: str, expected: str) -> None:
    plan = plan_for(agent=CLAUDE)
    status = finish_agent(plan, 1, {USAGE_FILE: sample(name).encode(),
                                    "/logs/agent/claude-code.txt": sample(name).encode()})
    assert status.error is not None and status.error.type == expected
    assert status.agent_result is not None and status.agent_result.cost_usd == 0


def test_codex_failure_classified_from_its_log() -> None:
    plan = plan_for(agent={"name": "codex", "model": "stub-429"})
    status = finish_agent(plan, 1, {"/logs/agent/codex.txt": sample("codex-429.txt").encode()})
    assert status.error is not None and status.error.type == "ApiRateLimitError"


def test_the_claude_code_example_plans() -> None:
    import yaml

    from shipyard.api.models import TrialSpec
    from shipyard.plan.phases import build_plan
    from tests.unit.helpers import REPO, hello_world

    doc = yaml.safe_load((REPO / "examples" / "claude-code" / "trial.yaml").read_text())
    plan = build_plan(hello_world(), TrialSpec.model_validate(doc["spec"]), {},
                      bundle_repository="us-docker.pkg.dev/p/r/shipyard")
    assert plan.environment.agent_bundles == (
        ("claude-code", "us-docker.pkg.dev/p/r/shipyard/agent-claude-code:2.1.330"),)
    assert "--max-turns 20" in agent_command(plan)
    assert plan.phase("agent").env["ANTHROPIC_MODEL"] == "claude-sonnet-4-5"


def test_the_agents_sweep_example_plans_each_agents_trials() -> None:
    import yaml

    from shipyard.api.models import TrialSpec
    from shipyard.api.sweep import SweepSpec
    from shipyard.plan.phases import build_plan
    from shipyard.plan.sweep import eval_key, expand, trial_body
    from tests.unit.helpers import REPO, hello_world

    doc = yaml.safe_load((REPO / "examples" / "claude-code" / "sweep.yaml").read_text())
    spec = SweepSpec.model_validate(doc["spec"])
    doc["metadata"].update(uid="u", namespace="evals")
    slots = expand(["hello-world"], spec)
    assert len(slots) == 6
    assert {eval_key(a.name, a.model, "hello") for a in spec.agents} == {
        "claude-code__claude-sonnet-4-5__hello", "codex__gpt-5__hello"}
    for slot in slots[:2]:
        trial = TrialSpec.model_validate(trial_body(doc, spec, slot)["spec"])
        plan = build_plan(hello_world(), trial, {},
                          bundle_repository="us-docker.pkg.dev/p/r/shipyard")
        assert plan.environment.agent_bundles[0][0] == spec.agents[slot.agent].name
        assert trial.environment.image == "debian:bookworm-slim"


def test_the_trajectory_is_kept_with_the_logs() -> None:
    import json

    plan = plan_for(agent=CLAUDE)
    status = m.start(m.TrialStatus(), plan, "sha256:d", 3, T0)
    files = {USAGE_FILE: sample("claude-code-result.jsonl").encode(),
             "/logs/agent/claude-code.session.jsonl": sample("claude-code-session.jsonl").encode(),
             "/logs/agent/claude-code.txt": b"{}\n"}
    _, outcome = m.on_result(status, plan, "agent", done(0, files=files), T0)
    trajectory = json.loads(outcome.logs["agent.trajectory.json"])
    assert len(trajectory["steps"]) == 3
    assert outcome.logs["agent.log"] == "{}\n"


def test_web_tools_are_off_when_the_agent_phase_is_restricted() -> None:
    offline = plan_for(task(NO_NETWORK), agent={**CLAUDE, "modelEndpoint": STUB,
                                                "kwargs": {"disallowed_tools": "Task"}})
    assert "--disallowedTools Task,WebSearch,WebFetch" in agent_command(offline)
    public = plan_for(agent=CLAUDE)
    assert "WebSearch" not in agent_command(public)


def test_a_public_agent_kept_out_of_the_cluster_still_reaches_its_model_server() -> None:
    from shipyard.plan.phases import build_plan
    from tests.unit.helpers import trial_spec

    settings = NetworkSettings(block_cluster=True)
    plan = build_plan(task(), trial_spec(agent={**CLAUDE, "modelEndpoint": STUB}), {},
                      network=settings)
    net = plan.network
    assert net is not None and agent_phase(plan).network == "public-model"
    objects = build_network_objects(trial_body(), list(net.policies.values()), settings,
                                    net.model_policies, net.model_peer)
    model = {o["metadata"]["name"]: o for o in objects}["hello-oracle-net-public-model"]
    egress = model["spec"]["egress"]
    assert {"podSelector": {}} in egress[0]["to"]  # public, kept out of the cluster
    assert egress[-1]["to"][0]["podSelector"] == {"matchLabels": {"app": "llmstub"}}
