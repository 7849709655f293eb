"""bench/chaos.py as opt-in tests
(`SHIPYARD_RUN_OPTIN=1 bash hack/test.sh tests/e2e/test_chaos.py`):

- the operator SIGKILLed every 5-15 s during SHIPYARD_CHAOS_TRIALS (default 20) concurrent
  trials: none lost, none with a phase run twice, all with reward 1;
- the cluster's own parts crashed during as many trials (the local cluster only: it restarts
  the apiserver, etcd and the kubelet, `localcluster.py restart NAME --kill`, and has the
  kubelet evict a trial pod): the same, the evicted trial retried (PodLost) and rewarded.
  It disturbs every user of the cluster for a minute or two: never on a shared cluster in use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.e2e.conftest import ROOT


def run_chaos(cluster, tmp_path, *args: str) -> tuple[dict, subprocess.CompletedProcess]:
    n = os.environ.get("SHIPYARD_CHAOS_TRIALS", "20")
    out = tmp_path / "chaos.json"
    env = dict(os.environ, KUBECONFIG=cluster.kubeconfig, SHIPYARD_USE_EXISTING_CLUSTER="1")
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "chaos.py"), "-n", n,
                          "--json", str(out), *args], env=env, capture_output=True, text=True,
                         timeout=3500, stdin=subprocess.DEVNULL)
    print(run.stdout)
    assert out.exists(), run.stdout + run.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert (figures["lost"], figures["duplicated phases"], figures["failed"]) == (0, 0, 0), \
        run.stdout + run.stderr[-3000:]
    assert figures["completed with reward 1"] == int(n)
    assert run.returncode == 0
    return figures, run


@pytest.mark.optin
@pytest.mark.timeout(3600)
def test_operator_sigkilled_at_random_loses_and_repeats_nothing(cluster, crds, tmp_path) -> None:
    figures, run = run_chaos(cluster, tmp_path)
    assert figures["kills"] >= 1, run.stdout


@pytest.mark.optin
@pytest.mark.timeout(3600)
def test_apiserver_etcd_kubelet_crashed_and_a_pod_evicted_mid_run_lose_nothing(
        cluster, crds, tmp_path) -> None:
    if not cluster.local or os.geteuid() != 0:
        pytest.skip("crashes the apiserver, etcd and kubelet with `localcluster.py restart`: "
                    "only on the project's local cluster, as root (another cluster's control "
                    "plane is not ours to restart)")
    # Each arm in turn every 15-25 s; the trials outlast one turn of the four (their agents
    # sleep two minutes), the eviction first, while every agent runs.
    figures, run = run_chaos(cluster, tmp_path, "--arms", "eviction", "apiserver", "etcd",
                             "kubelet", "--restart-every", "15", "25", "--agent-sleep", "120")
    assert all(figures["restarts"].get(arm, 0) >= 1 for arm in ("apiserver", "etcd", "kubelet")), \
        run.stdout
    assert not figures["restart errors"], run.stdout
    assert figures["pods evicted"] >= 1, run.stdout + run.stderr[-3000:]
    # The evicted pod's trial was retried for that reason, and still rewarded (above).
    assert figures["retry reasons"].get("PodLost", 0) >= 1, run.stdout
