"""An operator older than its CRDs ignores the fields it does not know yet."""

from __future__ import annotations

from shipyard.api.compat import known_fields
from shipyard.api.models import TrialSpec


def test_fields_from_a_newer_crd_are_dropped_at_every_level() -> None:
    spec = {"taskRef": {"name": "t"}, "newTopLevel": 1,
            "agent": {"name": "oracle", "install": "bundle", "env": [{"name": "A", "x": 1}]},
            "pod": {"tolerations": [{"key": "k", "future": True}]}}
    parsed = TrialSpec.model_validate(known_fields(TrialSpec, spec))
    assert parsed.agent.env[0].name == "A"
    assert parsed.pod.tolerations[0].key == "k"
    assert known_fields(TrialSpec, spec)["agent"] == {"name": "oracle",
                                                       "env": [{"name": "A"}]}
