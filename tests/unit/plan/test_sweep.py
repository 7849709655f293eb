"""The Sweep's plan: Harbor's expansion order, deterministic names, Trial bodies."""

from __future__ import annotations

from shipyard.api.conventions import (
    ANNOTATION_DATASET,
    LABEL_AGENT,
    LABEL_ATTEMPT,
    LABEL_RETRY,
    LABEL_SWEEP,
    label_value,
    sweep_selector,
)
from shipyard.api.models import TrialSpec
from shipyard.api.sweep import SweepSpec
from shipyard.plan.sweep import duplicate_agents, eval_key, expand, trial_body, trial_name

SWEEP = {"metadata": {"name": "bench", "namespace": "ns", "uid": "u-1"}}


def spec(**extra) -> SweepSpec:
    return SweepSpec.model_validate({"tasks": {"names": ["a", "b"]},
                                     "agents": [{"name": "oracle"}, {"name": "nop"}],
                                     "attempts": 2, **extra})


def test_expansion_is_harbors_order_attempts_tasks_agents() -> None:
    slots = expand(["a", "b"], spec())
    assert [(s.attempt, s.task, s.agent_key) for s in slots] == [
        (1, "a", "oracle"), (1, "a", "nop"), (1, "b", "oracle"), (1, "b", "nop"),
        (2, "a", "oracle"), (2, "a", "nop"), (2, "b", "oracle"), (2, "b", "nop"),
    ]
    assert [s.index for s in slots] == list(range(8))


def test_names_are_deterministic_distinct_and_retries_suffixed() -> None:
    slots = expand(["a", "b"], spec())
    names = [trial_name("bench", s) for s in slots]
    assert names == [trial_name("bench", s) for s in expand(["a", "b"], spec())]
    assert len(set(names)) == len(names)
    assert all(n.startswith("bench-") and len(n) == len("bench-") + 10 for n in names)
    assert trial_name("bench", slots[0], 2) == names[0] + "-r2"
    assert trial_name("other", slots[0]) != names[0]
    long = trial_name("x" * 200, slots[0])
    assert len(long) <= 40 + 11


def test_trial_body_is_the_template_with_task_agent_labels_and_owner() -> None:
    s = spec(trialTemplate={"retries": 2, "environment": {"image": "img"}},
             agents=[{"name": "command", "command": "true", "model": "org/m-1",
                      "parallelism": 3}])
    slot = expand(["a"], s)[0]
    body = trial_body(SWEEP, s, slot, 1)
    meta = body["metadata"]
    assert meta["name"] == trial_name("bench", slot, 1)
    assert meta["labels"][LABEL_SWEEP] == "bench"
    assert meta["labels"][LABEL_ATTEMPT] == "1"
    assert meta["labels"][LABEL_RETRY] == "1"
    assert meta["labels"][LABEL_AGENT] == "command__org_m-1"
    assert meta["annotations"][ANNOTATION_DATASET] == "bench"
    assert sweep_selector("bench").items() <= meta["labels"].items()
    assert meta["ownerReferences"][0]["kind"] == "Sweep"
    assert meta["ownerReferences"][0]["uid"] == "u-1"
    assert body["spec"]["taskRef"] == {"name": "a"}
    assert body["spec"]["retries"] == 2
    assert body["spec"]["environment"] == {"image": "img"}
    assert "parallelism" not in body["spec"]["agent"]
    assert {"name": "SHIPYARD_MODEL", "value": "org/m-1"} in body["spec"]["agent"]["env"]
    assert body["spec"]["agent"]["model"] == "org/m-1"
    TrialSpec.model_validate(body["spec"])  # a valid Trial spec


def test_eval_keys_name_the_model_without_its_provider_as_harbor() -> None:
    assert eval_key("codex", "openai/gpt-5", "tb2") == "codex__gpt-5__tb2"
    assert eval_key("oracle", None, "tb2") == "oracle__tb2"


def test_duplicate_agents_are_found() -> None:
    assert duplicate_agents(spec(agents=[{"name": "nop"}, {"name": "nop"}])) == ["nop"]
    assert duplicate_agents(spec(agents=[{"name": "nop", "model": "a"},
                                         {"name": "nop", "model": "b"}])) == []


def test_label_values_are_valid() -> None:
    assert label_value("a/b:c") == "a_b_c"
    assert len(label_value("x" * 100)) <= 63
    assert label_value("command__org/m-1") == "command__org_m-1"
