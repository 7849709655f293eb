"""Objects read from the cluster: fields the models do not know (a newer CRD's defaults,
kopf's status bookkeeping) are dropped at every level instead of failing the object."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shipyard.api.compat import known_fields
from shipyard.api.models import TrialSpec, TrialStatus
from shipyard.api.sweep import SweepSpec


def test_fields_from_a_newer_crd_are_dropped_at_every_level() -> None:
    spec = {"taskRef": {"name": "t"}, "newTopLevel": 1,
            "agent": {"name": "oracle", "futureDefault": "x", "env": [{"name": "A", "x": 1}]},
            "pod": {"tolerations": [{"key": "k", "future": True}]}}
    with pytest.raises(ValidationError):
        TrialSpec.model_validate(spec)
    parsed = TrialSpec.model_validate(known_fields(TrialSpec, spec))
    assert parsed.agent.env[0].name == "A"
    assert parsed.pod.tolerations[0].key == "k"
    assert known_fields(TrialSpec, spec)["agent"] == {"name": "oracle",
                                                       "env": [{"name": "A"}]}


def test_kopfs_status_bookkeeping_is_dropped() -> None:
    status = {"phase": "Running", "kopf": {"progress": {}}, "run_trial": {"x": 1},
              "conditions": [{"type": "Running", "status": "True", "extra": 1}]}
    parsed = TrialStatus.model_validate(known_fields(TrialStatus, status))
    assert parsed.phase == "Running" and parsed.conditions[0].type == "Running"


def test_a_sweep_agent_keeps_its_own_and_its_trial_agent_fields() -> None:
    spec = {"tasks": {"names": ["a"]}, "future": 1,
            "agents": [{"name": "codex", "model": "openai/gpt-5", "parallelism": 2, "new": 0}]}
    parsed = SweepSpec.model_validate(known_fields(SweepSpec, spec))
    assert parsed.agents[0].parallelism == 2 and parsed.agents[0].model == "openai/gpt-5"
