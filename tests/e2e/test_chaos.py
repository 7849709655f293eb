"""bench/chaos.py as an opt-in test
(`SHIPYARD_RUN_OPTIN=1 bash hack/test.sh tests/e2e/test_chaos.py`): the operator SIGKILLed
every 5-15 s during SHIPYARD_CHAOS_TRIALS (default 20) concurrent trials; none lost, none with
a phase run twice, all with reward 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.e2e.conftest import ROOT


@pytest.mark.optin
@pytest.mark.timeout(3600)
def test_operator_sigkilled_at_random_loses_and_repeats_nothing(cluster, crds, tmp_path) -> None:
    n = int(os.environ.get("SHIPYARD_CHAOS_TRIALS", "20"))
    out = tmp_path / "chaos.json"
    env = dict(os.environ, KUBECONFIG=cluster.kubeconfig, SHIPYARD_USE_EXISTING_CLUSTER="1")
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "chaos.py"), "-n", str(n),
                          "--json", str(out)], env=env, capture_output=True, text=True,
                         timeout=3500, stdin=subprocess.DEVNULL)
    print(run.stdout)
    figures = json.loads(out.read_text())
    assert figures["kills"] >= 1, run.stdout
    assert (figures["lost"], figures["duplicated phases"], figures["failed"]) == (0, 0, 0), \
        run.stdout + run.stderr[-3000:]
    assert figures["completed with reward 1"] == n
    assert run.returncode == 0
