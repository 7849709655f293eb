"""What real public tasks met on the local cluster (issue 23), each reproduced by a small task
of the project's own: a failed build that explains itself, ..."""

from __future__ import annotations

import os
import sys
import uuid

import pytest

from tests.conftest import TEST_NAMESPACE_PREFIX
from tests.e2e.conftest import (
    ROOT,
    TASK_IMAGE,
    OperatorProcess,
    Shipyard,
    brief,
    condition,
    lease_env,
    task_files,
)
from tests.e2e.test_build_network import WEB_STAND_IN
from tests.e2e.test_cli import ok, shipyard_cli
from tests.e2e.test_image_builds import condition_any, simple_task, wait_images

FETCHING_STEP = """\
FROM python:3.12-slim
RUN echo {nonce} && python -c "\\
print('fetching the model weights'); \\
import urllib.request; \\
urllib.request.urlopen('https://weights.invalid/model.bin', timeout=5)"
RUN echo never-here
"""


@pytest.fixture(scope="module")
def local_builds(cluster) -> None:
    if not cluster.local:
        pytest.skip("needs the local cluster's registry and buildkitd")


@pytest.mark.usefixtures("local_builds")
def test_a_failed_run_step_shows_its_own_output_and_where_the_whole_log_is(
        shipyard, cluster, namespace):
    nonce = uuid.uuid4().hex
    shipyard.task("fetch", simple_task(nonce, dockerfile=FETCHING_STEP.format(nonce=nonce)))
    shipyard.trial("fetch-oracle", "fetch")
    task = wait_images(shipyard, "fetch", timeout=240)
    cond = condition_any(task, "ImagesReady")
    assert cond["status"] == "False" and cond["reason"] == "ImageBuildFailed", cond
    message = cond["message"]
    # The step's own words (the traceback's last line), not only buildkit's Dockerfile excerpt.
    assert "its last output lines:" in message, message
    assert "urllib.error.URLError" in message, message
    assert "fetching the model weights" in message, message
    job = task["status"]["images"]["environment"]["build"]
    assert f"kubectl logs -n {namespace} job/{job}" in message, message
    events = [e.message for e in shipyard.events("fetch") if e.reason == "ImageBuildFailed"]
    assert any("urllib.error.URLError" in m for m in events), events
    trial = shipyard.wait("fetch-oracle", timeout=120)
    failed = condition(trial, "Failed")
    assert failed["reason"] == "ImageBuildFailed" and "urllib.error.URLError" in failed["message"]
    watched = shipyard_cli(cluster, "watch", "fetch-oracle", "-n", namespace, "--timeout", "30")
    assert "urllib.error.URLError" in watched.stdout + watched.stderr, watched
    # The whole log, from its first line (the nonce the step echoed first).
    log = ok(shipyard_cli(cluster, "logs", "--build", job, "-n", namespace))
    assert nonce in log and "ERROR" in log


# ---------------------------------------------------------------- cluster DNS, pip, mirrors

PIP_SOLVE = """#!/bin/bash
getent hosts kubernetes.default.svc.cluster.local | tee /app/dns.txt
getent hosts pypi.org || echo "pypi.org: not resolved"
pip install --retries 0 --timeout 10 --no-deps --target /app/lib six==1.16.0
"""
PIP_TEST = """#!/bin/bash
if grep -q 10.96.0.1 /app/dns.txt && PYTHONPATH=/app/lib python -c 'import six'; then
  echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""


def pip_task(network: str) -> dict[str, str]:
    return {
        "task.toml": 'schema_version = "1.4"\n[agent]\ntimeout_sec = 180\n[verifier]\n'
                     'timeout_sec = 60\n[environment]\nbuild_timeout_sec = 300\n'
                     f'workdir = "/app"\nnetwork_mode = "{network}"\n',
        "instruction.md": "Install six into /app/lib.\n",
        "environment/Dockerfile": "FROM python:3.12-slim\nWORKDIR /app\n",
        "solution/solve.sh": PIP_SOLVE,
        "tests/test.sh": PIP_TEST,
    }


@pytest.mark.usefixtures("local_builds")
def test_a_solution_resolves_names_and_pip_installs_under_public_but_not_no_network(
        shipyard, cluster):
    shipyard.task("pip-public", pip_task("public"))
    shipyard.task("pip-offline", pip_task("no-network"))
    shipyard.trial("pip-public-oracle", "pip-public")
    shipyard.trial("pip-offline-oracle", "pip-offline")
    public = shipyard.wait("pip-public-oracle", timeout=480)
    assert public["status"].get("reward") == 1, brief(public["status"])
    offline = shipyard.wait("pip-offline-oracle", timeout=480)
    assert offline["status"]["phase"] == "Completed", brief(offline["status"])
    assert offline["status"].get("reward") == 0, brief(offline["status"])
    log = shipyard.core.read_namespaced_config_map(
        offline["status"]["logsConfigMap"], shipyard.namespace).data or {}
    agent = "\n".join(v for k, v in log.items() if "agent" in k)
    assert "pypi.org: not resolved" in agent and "Successfully installed" not in agent, agent
    log = shipyard.core.read_namespaced_config_map(
        public["status"]["logsConfigMap"], shipyard.namespace).data or {}
    agent = "\n".join(v for k, v in log.items() if "agent" in k)
    assert "not resolved" not in agent and "Successfully installed six" in agent, agent


def test_a_prebuilt_ubuntu_image_is_pulled_through_the_registry_mirror(shipyard):
    files = task_files("grep -q ok /app/out && echo 1 > /logs/verifier/reward.txt "
                       "|| echo 0 > /logs/verifier/reward.txt\n",
                       "echo ok > /app/out\n")
    files["task.toml"] = files["task.toml"].replace(TASK_IMAGE, "ubuntu:24.04")
    files["tests/test.sh"] = files["tests/test.sh"].replace("#!/bin/bash\n", "#!/bin/bash\n"
                                                            "mkdir -p /app\n")
    files["solution/solve.sh"] = "#!/bin/bash\nmkdir -p /app && echo ok > /app/out\n"
    shipyard.task("ubuntu", files)
    shipyard.trial("ubuntu-oracle", "ubuntu")
    shipyard.trial("ubuntu-nop", "ubuntu", agent={"name": "nop"})
    oracle = shipyard.wait("ubuntu-oracle", timeout=300)
    assert oracle["status"].get("reward") == 1, brief(oracle["status"])
    nop = shipyard.wait("ubuntu-nop", timeout=300)
    assert nop["status"].get("reward") == 0, brief(nop["status"])


# ---------------------------------------------------------------- astral.sh's installer

UV_TEST = """#!/bin/bash
apt-get update -qq
apt-get install -y -qq curl >/dev/null
curl -LsSf https://astral.sh/uv/0.9.7/install.sh | sh
source $HOME/.local/bin/env
uvx --with pytest==8.4.1 pytest /tests/test_state.py -rA
if [ $? -eq 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""
PROBE = f"""for port in 443 6443 10250 20244; do
  if timeout 5 bash -c "exec 3<>/dev/tcp/{WEB_STAND_IN}/$port" 2>/dev/null; then
    [ $port = 443 ] && echo "{WEB_STAND_IN}:$port reached" || echo "{WEB_STAND_IN}:$port REACHED"
  else echo "{WEB_STAND_IN}:$port refused"; fi
done
"""
UV_STATE = """from pathlib import Path


def test_hello():
    assert Path("/app/hello.txt").read_text().strip() == "Hello, world!"
"""


@pytest.mark.usefixtures("local_builds")
def test_tests_that_install_uv_from_astral_sh_score_oracle_1_and_nop_0(shipyard):
    """Most public tasks' tests start with `curl https://astral.sh/uv/<v>/install.sh | sh`:
    the local cluster's stand-in (hack/localcluster/webstandins.py) answers it for pods."""
    shipyard.task("uv-task", uv_task("FROM ubuntu:24.04\nWORKDIR /app\n", UV_TEST, PROBE))
    oracle, nop = oracle_and_nop(shipyard, "uv-task")
    log = shipyard.core.read_namespaced_config_map(
        oracle["status"]["logsConfigMap"], shipyard.namespace).data or {}
    verifier = "\n".join(v for k, v in log.items() if "verifier" in k)
    assert "local stand-in for astral.sh" in verifier and "1 passed" in verifier, verifier
    # The stand-in's address is the host's: only its 443 answers (not the apiserver, the
    # kubelet or kube-router's health port, which listen on every address of the host).
    agent = "\n".join(v for k, v in log.items() if "agent" in k)
    assert all(f"{WEB_STAND_IN}:{p} refused" in agent for p in (6443, 10250, 20244)), agent
    assert f"{WEB_STAND_IN}:443 reached" in agent and "REACHED" not in agent, agent
    assert nop["status"].get("reward") == 0, brief(nop["status"])


def uv_task(dockerfile: str, test_sh: str, solution_extra: str = "") -> dict[str, str]:
    """A task whose oracle writes /app/hello.txt and whose tests run pytest through `uvx`."""
    return {
        "task.toml": 'schema_version = "1.4"\n[agent]\ntimeout_sec = 120\n[verifier]\n'
                     'timeout_sec = 400\n[environment]\nbuild_timeout_sec = 400\n',
        "instruction.md": "Write 'Hello, world!' to /app/hello.txt.\n",
        "environment/Dockerfile": dockerfile,
        "solution/solve.sh": "#!/bin/bash\necho 'Hello, world!' > /app/hello.txt\n"
                             + solution_extra,
        "tests/test.sh": test_sh,
        "tests/test_state.py": UV_STATE,
    }


def oracle_and_nop(shipyard: Shipyard, task: str) -> tuple[dict, dict]:
    """Both trials of the task, once done; the oracle's reward checked to be 1."""
    shipyard.trial(f"{task}-oracle", task)
    shipyard.trial(f"{task}-nop", task, agent={"name": "nop"})
    oracle = shipyard.wait(f"{task}-oracle", timeout=900)
    assert oracle["status"].get("reward") == 1, (brief(oracle["status"]),
                                                  phase_logs(shipyard, oracle, "verifier"))
    return oracle, shipyard.wait(f"{task}-nop", timeout=600)


def phase_logs(shipyard: Shipyard, trial: dict, phase: str) -> str:
    """What the trial's `phase` printed (from its logs ConfigMap)."""
    name = trial["status"].get("logsConfigMap")
    log = (shipyard.core.read_namespaced_config_map(name, shipyard.namespace).data or {}
           ) if name else {}
    return "\n".join(v for k, v in log.items() if phase in k)


UV_IN_BUILD = """FROM ubuntu:24.04
RUN echo {nonce} && apt-get update -qq && apt-get install -y -qq curl >/dev/null
RUN curl -LsSf https://astral.sh/uv/0.9.7/install.sh | env UV_UNMANAGED_INSTALL=/usr/local/bin sh
RUN for port in 6443 10250 5055; do \\
      if timeout 5 bash -c "exec 3<>/dev/tcp/{address}/$port"; then \\
        echo "{address}:$port REACHED from a build"; exit 1; fi; done
WORKDIR /app
"""


@pytest.mark.usefixtures("local_builds")
def test_a_dockerfile_that_installs_uv_from_astral_sh_builds_and_scores(shipyard):
    """`RUN curl -LsSf https://astral.sh/uv/<v>/install.sh | sh` in a Dockerfile: builds name
    the stand-in through the operator's extra hosts (SHIPYARD_BUILD_ADD_HOSTS, which the local
    cluster sets), and the build network reaches its 443 only, not the host's other ports."""
    dockerfile = UV_IN_BUILD.format(nonce=uuid.uuid4().hex, address=WEB_STAND_IN)
    test_sh = ("#!/bin/bash\nuvx --with pytest==8.4.1 pytest /tests/test_state.py -rA\n"
               "if [ $? -eq 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
    shipyard.task("uv-build", uv_task(dockerfile, test_sh))
    _, nop = oracle_and_nop(shipyard, "uv-build")
    assert nop["status"].get("reward") == 0, brief(nop["status"])


UV_313_TEST = UV_TEST.replace("uvx --with", "uvx -p 3.13 --with")
UV_313_STATE = UV_STATE + """

def test_the_tests_run_on_python_3_13_from():
    import sys
    assert sys.version_info[:2] == (3, 13)
    assert sys.base_prefix.startswith("{prefix}"), sys.base_prefix
"""


@pytest.mark.usefixtures("local_builds")
@pytest.mark.parametrize(("base", "prefix"), [
    ("python:3.13-slim", "/usr/local"),  # the image's own 3.13
    ("ubuntu:24.04", "/root/.local/share/uv/python/cpython-3.13"),  # uv's download of it
])
def test_uvx_asking_for_python_3_13_gets_it_as_upstream(shipyard, base, prefix):
    """terminal-bench's tests run `uvx -p 3.13 ... pytest`: on a `python:3.13` base uv finds
    the image's /usr/local/bin/python3.13; on another it downloads a 3.13, which upstream comes
    from GitHub and here from the stand-in for astral.sh (hack/localcluster/cpython.py: this
    machine's pyenv builds, in both cases)."""
    sys.path.insert(0, str(ROOT / "hack" / "localcluster"))
    try:
        import cpython
    finally:
        sys.path.pop(0)
    if cpython.pyenv_cpython("3.13") is None:
        pytest.skip("this machine has no CPython 3.13 built by pyenv (~/.pyenv/versions/3.13.*), "
                    "the only 3.13 the local cluster can put in python:3.13 or give uv here "
                    "(docs/local-cluster.md)")
    name = f"uv-313-{base.split(':')[0]}"
    # Built afresh: a task image cached from before a change of the stand-ins keeps the old.
    files = uv_task(f"FROM {base}\n# {uuid.uuid4().hex}\nWORKDIR /app\n", UV_313_TEST)
    files["tests/test_state.py"] = UV_313_STATE.replace("{prefix}", prefix)
    shipyard.task(name, files)
    oracle, nop = oracle_and_nop(shipyard, name)
    log = shipyard.core.read_namespaced_config_map(
        oracle["status"]["logsConfigMap"], shipyard.namespace).data or {}
    verifier = "\n".join(v for k, v in log.items() if "verifier" in k)
    assert "2 passed" in verifier and "Python 3.13" in verifier, verifier
    assert nop["status"].get("reward") == 0, brief(nop["status"])


# ---------------------------------------------------------------- lint's verdicts, Ready

WINDOWS_TOML = """schema_version = "1.4"
[agent]
timeout_sec = 60
[verifier]
timeout_sec = 60
[environment]
os = "windows"
workdir = 'C:\\app'
"""


def windows_task() -> dict[str, str]:
    return {"task.toml": WINDOWS_TOML, "instruction.md": "Say hello.\n",
            "environment/Dockerfile": "FROM mcr.microsoft.com/windows/servercore:ltsc2025\n",
            "solution/solve.bat": "echo hello > hello.txt\n",
            "tests/test.bat": "echo 1 > C:\\logs\\verifier\\reward.txt\n"}


def test_lint_and_ready_say_what_will_happen(shipyard, cluster, tmp_path):
    for path, text in windows_task().items():
        (tmp_path / "win" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "win" / path).write_text(text)
    linted = shipyard_cli(cluster, "task", "lint", str(tmp_path / "win"))
    assert linted.returncode == 1 and "Traceback" not in linted.stderr
    assert "refused:" in linted.stdout and "Linux containers only" in linted.stdout
    assert "will not run it" in linted.stderr
    shipyard.task("win", windows_task())
    ready = condition(shipyard.wait_task("win"), "Ready")
    assert ready["status"] == "False" and ready["reason"] == "TaskInvalid", ready
    assert "Linux containers only" in ready["message"]
    shipyard.trial("win-oracle", "win")
    failed = condition(shipyard.wait("win-oracle", timeout=60), "Failed")
    assert failed["reason"] == "TaskInvalid" and "Linux containers only" in failed["message"]
    shipyard.core.list_namespaced_pod(shipyard.namespace)  # no pod was needed to say so
    typed = task_files("echo 1 > /logs/verifier/reward.txt\n", "true\n",
                       toml_extra='type = "cloudlab"\n')
    shipyard.task("typed", typed)
    ready = condition(shipyard.wait_task("typed"), "Ready")
    assert ready["status"] == "True" and "'cloudlab' is not a Harbor environment" in \
        ready["message"], ready


# ------------------------------------------- an operator run by hand, CPU requests, verifiers

@pytest.fixture
def by_hand(cluster, core_v1, tmp_path):
    """An operator started like `shipyard operator` by hand: no SHIPYARD_BUILD_* or probe
    image in its environment (it takes the local cluster's from the cluster), CPU requests at
    half the declared cpus; on a namespace of its own (not the session operator's)."""
    from kubernetes import client

    if not cluster.local:
        pytest.skip("the local cluster publishes the defaults an operator run by hand takes")
    name = f"{TEST_NAMESPACE_PREFIX}hand-{uuid.uuid4().hex[:6]}"
    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SHIPYARD_BUILD", "SHIPYARD_BUILDER", "SHIPYARD_BUILDKIT",
                                "SHIPYARD_PROBE"))}
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        op = OperatorProcess(
            cluster.kubeconfig, tmp_path / "operator.log",
            {**lease_env(f"shipyard-operator-{TEST_NAMESPACE_PREFIX}hand",
                         f"{TEST_NAMESPACE_PREFIX}-hand-operator"),
             "SHIPYARD_TRIAL_CPU_REQUEST_RATIO": "0.5", "SHIPYARD_RELEASE_ENVIRONMENT": "1"},
            namespaces=(f"{TEST_NAMESPACE_PREFIX}hand-*",))
        op.start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        yield name, op
    finally:
        op.stop()
        core_v1.delete_namespace(name, propagation_policy="Background")


def cpu_task(cpus: int, separate: bool) -> dict[str, str]:
    verifier = 'environment_mode = "separate"\n' if separate else ""
    return {
        "task.toml": f'schema_version = "1.4"\nartifacts = ["/app/out"]\n[agent]\n'
                     f'timeout_sec = 120\n[verifier]\ntimeout_sec = 120\n{verifier}'
                     f'[environment]\nbuild_timeout_sec = 300\nworkdir = "/app"\n'
                     f"cpus = {cpus}\nmemory_mb = 256\n",
        "instruction.md": "Write ok to /app/out.\n",
        "environment/Dockerfile": "FROM debian:bookworm\nWORKDIR /app\n",
        "solution/solve.sh": "#!/bin/bash\nnproc > /dev/null; echo ok > /app/out\n",
        "tests/test.sh": "#!/bin/bash\ngrep -q ok /app/out && echo 1 > /logs/verifier/reward.txt"
                         " || echo 0 > /logs/verifier/reward.txt\n",
    }


def test_by_hand_a_two_cpu_task_and_a_separate_verifier_asking_for_every_cpu_are_rewarded(
        by_hand, custom_objects, core_v1):
    namespace, op = by_hand
    node = core_v1.read_node("localhost")
    cpus = int(node.status.allocatable["cpu"])  # all of the node's CPUs
    hand = Shipyard(custom_objects, core_v1, namespace)
    hand.task("two", cpu_task(2, separate=False))
    hand.task("every", cpu_task(cpus, separate=True))
    for task in ("two", "every"):
        hand.trial(f"{task}-oracle", task)
        hand.trial(f"{task}-nop", task, agent={"name": "nop"})
    for task in ("two", "every"):
        oracle = hand.wait(f"{task}-oracle", timeout=900)
        assert oracle["status"].get("reward") == 1, (task, brief(oracle["status"]))
        nop = hand.wait(f"{task}-nop", timeout=300)
        assert nop["status"].get("reward") == 0, (task, brief(nop["status"]))
    # Requests are the operator's share; limits stay as declared. The environment pod was gone
    # before the separate verifier's was created (together they exceed the node).
    assert "settings from the cluster's kube-public/shipyard-localcluster" in op.log()
    events = [(e.reason, e.message, e.first_timestamp or e.event_time)
              for e in hand.events("every-oracle")]
    assert not any(r == "Unschedulable" for r, _, _ in events), events
    too_big = cpu_task(cpus * 4, separate=False)
    hand.task("too-big", too_big)
    hand.trial("too-big-oracle", "too-big")
    failed = condition(hand.wait("too-big-oracle", timeout=600), "Failed")
    assert failed["reason"] == "Unschedulable", failed
    assert f"requests cpu {cpus * 2}010m" in failed["message"], failed  # + the probe's 10m
    assert f"cpus = {cpus * 4}" in failed["message"], failed
    assert "SHIPYARD_TRIAL_CPU_REQUEST_RATIO" in failed["message"], failed


# ------------------------------------------- build contexts with same-sized files (corpus find)

def marker_task(marker: str) -> dict[str, str]:
    """A built image that holds `marker`; the verifier checks the image is this task's."""
    return {
        "task.toml": 'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n[verifier]\n'
                     'timeout_sec = 60\n[environment]\nbuild_timeout_sec = 300\n',
        "instruction.md": "Nothing to do.\n",
        "environment/Dockerfile": "FROM debian:bookworm\nCOPY marker.txt /marker.txt\n",
        "environment/marker.txt": marker + "\n",
        "solution/solve.sh": "#!/bin/bash\ntrue\n",
        "tests/test.sh": '#!/bin/bash\nif [ "$(cat /marker.txt)" = "$(cat /tests/expected.txt)" ]; '
                         "then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
        "tests/expected.txt": marker + "\n",
    }


@pytest.mark.usefixtures("local_builds")
def test_contexts_whose_files_differ_only_in_content_each_build_their_own_image(shipyard):
    """Two Harbor example tasks (verifier-mode-matrix separate-explicit and -implicit) have a
    tests/test.sh of the same size; built at the same time, one image got the other's file
    (buildkitd reuses what it was sent for a `context` and skips files of the same size and
    mtime, and the contexts were unpacked with the bundle's fixed mtimes), so its verifier
    graded the other task: reward 0 for a right answer. Four such builds at once: without the
    fix two of four were wrong here."""
    nonce = uuid.uuid4().hex[:12]
    names = ("first", "second", "third", "fourth")
    for i, name in enumerate(names):
        shipyard.task(name, marker_task(f"{i}{nonce}"))
        shipyard.trial(f"{name}-oracle", name)
    for name in names:
        trial = shipyard.wait(f"{name}-oracle", timeout=400)
        assert trial["status"].get("reward") == 1, (name, brief(trial["status"]))


# ---------------------------------------------------------------- services the agent started

# As public system-administration tasks do: the solution starts a service (redis, supervisord,
# nginx) and the tests check that it serves. The service here is a loop that answers through
# a file, so that the test image needs nothing more than sh.
SERVICE_SOLVE = """#!/bin/bash
nohup sh -c 'while :; do date +%s > /tmp/heartbeat; sleep 0.2; done' >/dev/null 2>&1 &
sleep 0.5
"""
# A heartbeat written after the tests began (up to 10 s for it: on a loaded node a loop of
# forks can miss a 1 s window, which once scored the Keep oracle 0 in CI).
SERVICE_TEST = """#!/bin/bash
rm -f /tmp/heartbeat; r=0
for i in $(seq 50); do sleep 0.2; if [ -s /tmp/heartbeat ]; then r=1; break; fi; done
echo $r > /logs/verifier/reward.txt
"""


def test_a_service_the_agent_started_serves_the_tests_with_keep_and_is_named_without(
        shipyard):
    """Harbor leaves what the agent started running for the tests; Shipyard's default ends it
    (the tests never run beside the agent's processes) and says so in the agent's log, and
    `verifier.agentProcesses: Keep` is Harbor's behaviour. Secret-free: the keep-mode sweep of
    processes holding a secret is covered by the runner's unit tests."""
    shipyard.task("service", task_files(SERVICE_TEST, SERVICE_SOLVE))
    keep = {"agentProcesses": "Keep"}
    shipyard.trial("service-keep-oracle", "service", verifier=keep)
    shipyard.trial("service-keep-nop", "service", agent={"name": "nop"}, verifier=keep)
    shipyard.trial("service-end-oracle", "service")
    oracle = shipyard.wait("service-keep-oracle", timeout=240)
    assert oracle["status"].get("reward") == 1, (brief(oracle["status"]),
                                                 shipyard.core.read_namespaced_config_map(
        oracle["status"]["logsConfigMap"], shipyard.namespace).data)
    nop = shipyard.wait("service-keep-nop", timeout=240)
    assert nop["status"].get("reward") == 0, brief(nop["status"])
    ended = shipyard.wait("service-end-oracle", timeout=240)
    assert ended["status"].get("reward") == 0, brief(ended["status"])
    log = shipyard.core.read_namespaced_config_map(
        ended["status"]["logsConfigMap"], shipyard.namespace).data or {}
    agent = "\n".join(v for k, v in log.items() if "agent" in k)
    assert "the phase left processes running, now ended: sh" in agent, log
    assert "verifier.agentProcesses Keep" in agent, agent
    told = [e for e in shipyard.events("service-end-oracle")
            if e.reason == "AgentProcessesEnded"]
    assert len(told) == 1 and told[0].type == "Warning", told
    assert "ended before the verifier: sh" in told[0].message, told[0].message
    assert not [e for e in shipyard.events("service-keep-oracle")
                if e.reason == "AgentProcessesEnded"]
