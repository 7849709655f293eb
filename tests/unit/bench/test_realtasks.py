"""bench/realtasks.py's verdicts on what real tasks did (no cluster)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

import realtasks

TASK = SimpleNamespace(files={"task.toml": "", "solution/solve.sh": "", "tests/test.sh": ""})


def outcome(oracle: list[str], events: list[str]) -> realtasks.Outcome:
    result = realtasks.Outcome("t", "/t", runs=[
        realtasks.Run("oracle", "Completed", 0.0, evidence=oracle),
        realtasks.Run("nop", "Completed", 0.0)])
    realtasks.classify(result, TASK, [], events)
    return result


def test_a_sidecars_probe_failing_while_it_starts_is_not_a_missing_internet():
    probe = ("Unhealthy: Startup probe failed: Traceback (most recent call last): "
             "ConnectionRefusedError: [Errno 111] Connection refused")
    assert outcome([], [probe]).verdict == "shipyard"  # unexplained: to be looked at
    refused = "curl: (7) Failed to connect to example.com port 443: Connection refused"
    assert outcome([refused], [probe]).verdict == "environment"


def test_a_solution_importing_what_its_unpinned_dependency_dropped_is_the_tasks():
    gone = ("ImportError: cannot import name 'streamablehttp_client' from "
            "'mcp.client.streamable_http' (/root/.cache/uv/archive-v0/x/mcp/client.py)")
    result = outcome(["agent exited with code 1", gone], [])
    assert result.verdict == "task" and "streamablehttp_client" in result.evidence
    # ... unless a name did not resolve: then the dependency may simply not have installed
    offline = outcome([gone, "Could not resolve host: pypi.org"], [])
    assert offline.verdict == "environment"
