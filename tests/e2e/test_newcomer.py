"""A newcomer never waits in silence (issue 13).

- In a namespace no operator serves, `shipyard run --watch` and `shipyard watch` say so within
  seconds, with the fix, instead of printing "trial created" and then nothing forever; `run`
  creates no Trial on a Task no operator validated, and refuses an invalid Task.
- `--timeout` ends the following with the trial's name and last phase.
- Hints are never broken in the middle of a command, however narrow the terminal.
- The README's local-cluster Helm commands, extracted from README.md and run as written (so the
  two cannot drift), install an operator that serves the namespace they run in and reach a
  reward.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import TEST_NAMESPACE_LABEL, TEST_NAMESPACE_PREFIX
from tests.e2e.conftest import ROOT, task_files

HELLO_TASK = ROOT / "examples" / "hello-world" / "task"
README = ROOT / "README.md"
NEWCOMER_MARK = "<!-- newcomer:"


def cli(cluster, *args: str, timeout: float = 120, columns: int = 40,
        extra_env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    """The CLI in a narrow terminal (COLUMNS=40): no hint may be wrapped mid-command."""
    env = dict(os.environ, KUBECONFIG=cluster.kubeconfig, COLUMNS=str(columns))
    env.pop("SHIPYARD_OPERATOR_GRACE", None)
    env.update(extra_env or {})
    began = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "shipyard", *args], capture_output=True,
                            text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    return result, time.monotonic() - began


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: "), result.stderr
    return lines[-1]


def create_namespace(core_v1, name: str) -> None:
    from kubernetes import client

    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={TEST_NAMESPACE_LABEL: "true"})))


@pytest.fixture
def unserved(core_v1) -> Iterator[str]:
    """A namespace no operator serves: not `<prefix>-*` (the checkout operator's), not one a
    chart release serves (the chart serves its release namespace only)."""
    name = f"unserved-{TEST_NAMESPACE_PREFIX}-{uuid.uuid4().hex[:6]}"
    create_namespace(core_v1, name)
    yield name
    core_v1.delete_namespace(name, propagation_policy="Background")


def trials_in(custom_objects, namespace: str) -> list[str]:
    found = custom_objects.list_namespaced_custom_object("shipyard.dev", "v1alpha1", namespace,
                                                         "trials")["items"]
    return [t["metadata"]["name"] for t in found]


def test_run_watch_where_no_operator_serves_says_so_within_seconds(cluster, crds, unserved,
                                                                  custom_objects):
    result, took = cli(cluster, "run", str(HELLO_TASK), "--agent", "oracle", "--watch",
                       "-n", unserved)
    line = error_line(result)
    print(f"run --watch in an unserved namespace: exit {result.returncode} after {took:.1f}s")
    # The default grace is 12 s; the rest is the CLI's start and push (≈ 4 s on an idle
    # machine, more on a loaded shared one).
    assert took < 45, took
    assert line.startswith(
        f"error: no Shipyard operator serves namespace {unserved}: after 12s task hello-world is "
        "still not validated (no Ready condition); no trial was created. Fix: "), line
    # (an operator installed elsewhere on the cluster, e.g. by hack/demo.sh, is named between)
    assert line.endswith(
        f"install one that serves it: `helm install shipyard charts/shipyard -n {unserved}` "
        f"(README, Install with Helm); or run one from a checkout: "
        f"`shipyard operator -n {unserved}`"), line
    assert trials_in(custom_objects, unserved) == []
    # Without --watch too: no Trial on a Task no operator ever validated. The grace is a setting.
    result, took = cli(cluster, "run", "hello-world", "-n", unserved,
                       extra_env={"SHIPYARD_OPERATOR_GRACE": "3"})
    assert "after 3s task hello-world is still not validated" in error_line(result)
    assert took < 15 and trials_in(custom_objects, unserved) == []
    # The fix it names works: an operator from this checkout serving the namespace.
    fix = re.search(r"`(shipyard operator -n \S+)`", line).group(1).split()
    env = dict(os.environ, KUBECONFIG=cluster.kubeconfig, PYTHONUNBUFFERED="1")
    fixer = subprocess.Popen([sys.executable, "-m", *fix, "--liveness", ""], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        result, _ = cli(cluster, "run", "hello-world", "--agent", "oracle", "--watch",
                        "-n", unserved, timeout=240)
        assert result.returncode == 0, result.stderr
        assert "Completed: reward 1" in result.stdout
    finally:
        os.killpg(fixer.pid, signal.SIGTERM)
        fixer.wait(30)


def test_watch_of_a_trial_no_operator_drives_says_so(cluster, crds, unserved):
    cluster.kubectl_run("-n", unserved, "apply", "-f", str(ROOT / "examples" / "hello-world"))
    result, took = cli(cluster, "watch", "hello-world-oracle", "-n", unserved,
                       "--operator-grace", "6")
    line = error_line(result)
    assert took < 40, took
    assert re.match(
        rf"error: no Shipyard operator serves namespace {unserved}: after [6-9]s trial "
        r"hello-world-oracle still has no status and task hello-world was never validated\. "
        r"Fix: ", line), line
    assert f"`shipyard operator -n {unserved}`" in line
    # With the check off, --timeout still ends it, naming the trial and where it was.
    result, took = cli(cluster, "watch", "hello-world-oracle", "-n", unserved,
                       "--operator-grace", "0", "--timeout", "3")
    assert error_line(result) == (
        "error: trial hello-world-oracle did not finish within 3s (last phase: no status yet); "
        f"it goes on running: `shipyard watch hello-world-oracle -n {unserved} --timeout 0`")
    assert took < 15


def test_run_refuses_an_invalid_task(cluster, shipyard, custom_objects):
    ns = shipyard.namespace
    shipyard.task("broken", task_files("echo 1 > /logs/verifier/reward.txt\n", agent_timeout=-5))
    result, _ = cli(cluster, "run", "broken", "-n", ns)
    line = error_line(result)
    assert line.startswith("error: task broken is not Ready: TaskInvalid: "), line
    assert "agent.timeout_sec" in line
    assert trials_in(custom_objects, ns) == []


def test_timeout_names_the_trial_and_its_last_phase(cluster, shipyard):
    ns = shipyard.namespace
    shipyard.task("slow", task_files("echo 1 > /logs/verifier/reward.txt\n", agent_timeout=300))
    result, _ = cli(cluster, "run", "slow", "--name", "slow-one", "--agent-command", "sleep 300",
                    "--watch", "--timeout", "25", "-n", ns, timeout=90)
    line = error_line(result)
    assert re.fullmatch(
        r"error: trial slow-one did not finish within 25s \(last phase: Running"
        r"(, (environment|setup|agent))?\); it goes on running: "
        rf"`shipyard watch slow-one -n {ns} --timeout 0`", line), line
    # The trial goes on: it was only the following that stopped.
    assert shipyard.get("trials", "slow-one")["status"]["phase"] == "Running"
    cli(cluster, "cancel", "slow-one", "-n", ns)
    shipyard.wait("slow-one", timeout=60)


def test_hints_are_never_wrapped_mid_command(cluster, shipyard):
    """`run` without --watch prints how to follow the trial: one line even at 40 columns."""
    ns = shipyard.namespace
    result, _ = cli(cluster, "run", str(HELLO_TASK), "--name", "hint-check", "-n", ns)
    assert result.returncode == 0, result.stderr
    assert f"follow it with: shipyard watch hint-check -n {ns}" in result.stdout.splitlines()[-1]
    shipyard.wait("hint-check", timeout=120)


# ---------------------------------------------------------------- the README, verbatim


def readme_newcomer_block() -> str:
    """The shell block that follows the `<!-- newcomer: ... -->` mark in README.md."""
    text = README.read_text()
    assert text.count(NEWCOMER_MARK) == 1, "README.md must mark exactly one newcomer block"
    after = text[text.index(NEWCOMER_MARK):]
    match = re.search(r"```sh\n(.*?)```", after, re.S)
    assert match, "no ```sh block after the newcomer mark"
    return match.group(1)


def test_readme_block_is_what_a_newcomer_runs():
    block = readme_newcomer_block()
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == [
        "python3 hack/localcluster/operator_image.py import",
        "bash hack/helm.sh install shipyard charts/shipyard --wait",
        "shipyard run examples/hello-world/task --agent oracle --watch",
    ]


@pytest.mark.timeout(960)
def test_readme_helm_commands_verbatim_reach_a_reward(cluster, crds, core_v1, tmp_path,
                                                      unserved):
    """The block runs as written in bash from the repository root, with the local cluster's
    kubectl and the CLI on PATH and a kubeconfig whose current namespace is a fresh one (the
    README: "your kubeconfig's current namespace"), so that it neither collides with other
    releases nor is served by the checkout's operator."""
    if not cluster.local:
        pytest.skip("the README block builds the operator image for the local cluster")
    block = readme_newcomer_block()
    ns = f"newcomer-{TEST_NAMESPACE_PREFIX}-{uuid.uuid4().hex[:6]}"
    create_namespace(core_v1, ns)
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copy(cluster.kubeconfig, kubeconfig)
    subprocess.run([cluster.kubectl, "--kubeconfig", str(kubeconfig), "config", "set-context",
                    "--current", f"--namespace={ns}"], check=True, capture_output=True)
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), COLUMNS="80",
               PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                     str(Path(cluster.kubectl).parent), os.environ["PATH"]]))
    env.pop("SHIPYARD_OPERATOR_GRACE", None)
    began = time.monotonic()
    try:
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=900,
                                stdin=subprocess.DEVNULL)
        took = time.monotonic() - began
        print(f"README newcomer block: exit {result.returncode} in {took:.1f}s")
        assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        assert re.search(r"trial hello-world-oracle-\w+ Completed: reward 1\b", result.stdout), (
            result.stdout[-2000:])
        trials = json.loads(cluster.kubectl_run("-n", ns, "get", "trials", "-o", "json").stdout)
        assert [t["status"]["reward"] for t in trials["items"]] == [1.0]
        # The chart's operator serves exactly its release namespace, from it.
        deployment = json.loads(cluster.kubectl_run(
            "-n", ns, "get", "deployment", "shipyard", "-o", "json").stdout)
        pod_template = deployment["spec"]["template"]
        assert pod_template["metadata"]["annotations"]["shipyard.dev/watch"] == ns
        assert pod_template["spec"]["containers"][0]["args"][-2:] == ["--namespace", ns]
        assert cluster.kubectl_run("-n", ns, "get", "rolebinding", "shipyard").returncode == 0
        # The dead end: a namespace other than the one the operator serves. The error
        # names where the installed operator serves.
        result, _ = cli(cluster, "run", str(HELLO_TASK), "-n", unserved,
                        extra_env={"SHIPYARD_OPERATOR_GRACE": "3"})
        line = error_line(result)
        # other operators installed on the cluster (hack/demo.sh's) may be named with it
        named = re.search(r"the installed operators? \(([^)]*)\) serves? ([^:]*): run there "
                          r"with `-n ([^`]*)`", line)
        assert named, line
        assert f"{ns}/shipyard" in named.group(1).split(", "), line
        assert ns in named.group(2).split(", "), line
    finally:
        subprocess.run(["bash", str(ROOT / "hack" / "helm.sh"), "uninstall", "shipyard",
                        "--namespace", ns, "--wait"], capture_output=True, text=True,
                       timeout=300, stdin=subprocess.DEVNULL,
                       env=dict(os.environ, KUBECONFIG=cluster.kubeconfig))
        cluster.kubectl_run("delete", "namespace", ns, "--wait=false", check=False)
