"""The artifacts kept for the last step's separate verifier once the environment pod is gone."""

from __future__ import annotations

from shipyard.api.task_source import PART_BYTES
from shipyard.render.artifacts_store import artifacts_configmaps, part_bytes, parts_of
from tests.unit.helpers import trial_body


def test_artifacts_are_kept_in_configmap_sized_parts_owned_by_the_trial():
    tar = bytes(range(256)) * (PART_BYTES // 256 * 2 + 10)
    cms = artifacts_configmaps(trial_body(), tar)
    assert len(cms) == 3 and parts_of(cms[0]) == 3
    assert [c["metadata"]["name"] for c in cms] == [
        "hello-oracle-artifacts-0", "hello-oracle-artifacts-1", "hello-oracle-artifacts-2"]
    assert b"".join(part_bytes(c) for c in cms) == tar
    owner = cms[0]["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Trial" and owner["name"] == "hello-oracle"
    small = artifacts_configmaps(trial_body(), b"x")
    assert len(small) == 1 and parts_of(small[0]) == 1 and part_bytes(small[0]) == b"x"
