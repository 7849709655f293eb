"""The artifacts kept in ConfigMaps of the trial: for the last step's separate verifier once the
environment pod is gone, and for the export (each step's of a multi-step trial)."""

from __future__ import annotations

from shipyard.api.task_source import PART_BYTES
from shipyard.render.artifacts_store import (
    artifacts_configmaps,
    kept_entries,
    kept_refusal,
    kept_step,
    part_bytes,
    parts_of,
)
from shipyard.taskformat import ArtifactConfig
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


def test_the_first_part_keeps_the_collection_set_step_and_refusal_for_the_export():
    entries = [ArtifactConfig(source="/logs/artifacts"),
               ArtifactConfig(source="/app/r", destination="res", exclude=["*.tmp"])]
    tar = b"y" * (PART_BYTES + 1)
    cms = artifacts_configmaps(trial_body(), tar, "build", entries)
    assert kept_entries(cms[0]) == entries and kept_step(cms[0]) == "build"
    assert kept_refusal(cms[0]) is None and parts_of(cms[1]) == 2
    refused = artifacts_configmaps(trial_body(), b"", None, entries, "over the limit")
    assert len(refused) == 1 and part_bytes(refused[0]) == b""
    assert kept_refusal(refused[0]) == "over the limit" and kept_step(refused[0]) is None
    assert kept_entries({"metadata": {}}) is None  # kept by an older operator


def test_an_earlier_steps_artifacts_are_kept_under_names_of_their_own():
    """A multi-step trial keeps each step's: an earlier step's under names with its index, so
    the next step's do not replace them (the last step's keep the trial's own names)."""
    first = artifacts_configmaps(trial_body(), b"a", "first", (), None, 1)
    last = artifacts_configmaps(trial_body(), b"b", "second")
    assert first[0]["metadata"]["name"] == "hello-oracle-artifacts-s1-0"
    assert last[0]["metadata"]["name"] == "hello-oracle-artifacts-0"
    assert kept_step(first[0]) == "first" and kept_step(last[0]) == "second"
