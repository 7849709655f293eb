"""Every example that can run on the local cluster, applied with kubectl as a user would:
`kubectl apply -f examples/<name>/` gives reward 1 with the oracle and 0 with nop (issue 7).

gpu and tpu need accelerator nodes; tests/e2e/test_accelerators.py covers how they schedule.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import ROOT, condition

RUNNABLE = {
    # name: extra checks on the oracle trial's status
    "hello-world": {},
    "multi-step": {"steps": ["scaffold", "greet-all"]},
    "separate-verifier": {"rewards": {"reward": 1.0, "isolated": 1.0}},
    "no-network": {},
    "allowlist": {},
    "compose": {},
}


@pytest.mark.parametrize("name", sorted(RUNNABLE))
def test_example_rewards_oracle_1_and_nop_0(cluster, operator, shipyard, name):
    ns = shipyard.namespace
    cluster.kubectl_run("-n", ns, "apply", "-f", str(ROOT / "examples" / name))
    oracle = shipyard.wait(f"{name}-oracle", timeout=240)
    nop = shipyard.wait(f"{name}-nop", timeout=240)
    for trial in (oracle, nop):
        assert condition(trial, "Complete") is not None, trial["status"]
    assert oracle["status"]["reward"] == 1.0
    assert nop["status"]["reward"] == 0.0
    expected = RUNNABLE[name]
    if "steps" in expected:
        steps = oracle["status"]["steps"]
        assert [s["name"] for s in steps] == expected["steps"]
        assert all(s["rewards"] == {"reward": 1.0} for s in steps)
        # nop fails the gated first step: the second is skipped.
        assert [s["state"] for s in nop["status"]["steps"]][1] == "Skipped"
    if "rewards" in expected:
        assert oracle["status"]["rewards"] == expected["rewards"]
    printed = cluster.kubectl_run("-n", ns, "get", "trials").stdout
    assert f"{name}-oracle" in printed and "Completed" in printed
