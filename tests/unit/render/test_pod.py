"""Pure builders: the environment pod, ConfigMaps, names, log truncation, phase bundles.

Golden file: `golden/hello-world-oracle-pod.yaml` is the pod rendered for
examples/hello-world with the oracle agent. After an intended change, regenerate it with

    SHIPYARD_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/render/test_pod.py -k golden

and review the diff. The runner ConfigMap's name there is written as `shipyard-runner-<digest>`
(it changes with every edit of runner.sh; `test_runner_configmap_is_named_by_content` checks it).
"""

from __future__ import annotations

import base64
import io
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from shipyard.api.conventions import (
    PROBE_CONTAINER,
    PROBE_PORT,
    RUNNER_MOUNT,
    RUNNER_PATH,
    Role,
    dns_name,
    pod_name,
)
from shipyard.plan.phases import PhaseSpec, TrialPlan
from shipyard.plan.settings import LOCAL_PROBE_IMAGE
from shipyard.render.phase_bundle import build_phase_bundle
from shipyard.render.pod import (
    LOG_LIMIT_BYTES,
    PROBE_CONTAINER_AFTER_SEC,
    build_logs_configmap,
    build_runner_configmap,
    build_trial_pod,
    probe_image_for,
    runner_configmap_name,
    runner_script,
    truncate_log,
)
from shipyard.render.runner_parts import (
    RunnerConfigMaps,
    runner_configmap_names,
    runner_configmaps,
)
from shipyard.taskformat import load_task_dir
from tests.golden import assert_golden
from tests.unit.helpers import HELLO_TOML, REPO, hello_world, plan_for, task, trial_body

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_HEADER = (
    "# The environment pod of examples/hello-world with the oracle agent\n"
    "# (tests/unit/render/test_pod.py).\n"
    "# Regenerate: SHIPYARD_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/render/test_pod.py"
    " -k golden\n"
)
RFC1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def build_environment_pod(body: dict[str, Any], plan: TrialPlan,
                          probe_image: str | None = LOCAL_PROBE_IMAGE) -> dict[str, Any]:
    """The environment pod of a trial's first attempt, as the operator creates it for a trial
    that gets the probe container (`probe_image_for`; None: the exec probe)."""
    name = pod_name(body["metadata"]["name"], Role.ENV, None, 1)
    return build_trial_pod(body, plan, Role.ENV, None, name, probe_image)


def render(body: dict[str, Any]) -> dict[str, Any]:
    """The environment pod of a Trial body (its task: helpers.task())."""
    spec = {k: v for k, v in body["spec"].items() if k != "taskRef"}
    return build_environment_pod(body, plan_for(**spec))


def container(pod: dict[str, Any], name: str = "main") -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod["spec"]["volumes"]}


def mounts(pod: dict[str, Any], name: str = "main") -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in container(pod, name)["volumeMounts"]}


# ---------------------------------------------------------------- the environment pod


def test_with_a_runner_image_an_init_container_puts_the_go_runner_into_a_read_only_volume(
) -> None:
    """The static runner is copied by itself (`runner install`, no shell) into an emptyDir
    that every container of the trial mounts read-only at the runner's path."""
    body = trial_body()
    plan = plan_for(agent={"name": "oracle", "envFrom": [{"secretRef": {"name": "keys"}}]})
    name = pod_name(body["metadata"]["name"], Role.ENV, None, 1)
    pod = build_trial_pod(body, plan, Role.ENV, None, name, None, "reg/runner:1")
    init = pod["spec"]["initContainers"][0]
    assert init["image"] == "reg/runner:1"
    assert init["command"] == ["/runner", "install", RUNNER_PATH]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert volumes(pod)["runner"] == {"name": "runner", "emptyDir": {"sizeLimit": "32Mi"}}
    for c in ("main", "secrets"):
        assert mounts(pod, c)["runner"] == {"name": "runner", "mountPath": RUNNER_MOUNT,
                                            "readOnly": True}
    assert "configMap" in volumes(render(trial_body()))["runner"]  # no image: runner.sh


def test_with_the_runner_s_configmaps_no_init_container_and_the_parts_mounted_read_only(
) -> None:
    """Delivered in ConfigMaps (`render.runner_parts`), the runner needs no init container:
    its parts and loader are one projected volume, read-only and executable, in every
    container of the pod; each ConfigMap is immutable, under the API's 1 MiB, and the parts
    join to the runner byte for byte."""
    runner, loader = bytes(range(256)) * 9000, b"\x7fELF loader"
    names = runner_configmap_names(runner, loader)
    body = trial_body()
    plan = plan_for(agent={"name": "oracle", "envFrom": [{"secretRef": {"name": "keys"}}]})
    pod = build_trial_pod(body, plan, Role.ENV, None, "p", None, names)
    assert "initContainers" not in pod["spec"]
    assert volumes(pod)["runner"] == {"name": "runner", "projected": {
        "defaultMode": 0o555, "sources": [{"configMap": {"name": n}} for n in names.names]}}
    for c in ("main", "secrets"):
        assert mounts(pod, c)["runner"] == {"name": "runner", "mountPath": RUNNER_MOUNT,
                                            "readOnly": True}
    configmaps = runner_configmaps("ns", runner, loader)
    assert tuple(cm["metadata"]["name"] for cm in configmaps) == names.names
    assert len(configmaps) == 3
    joined = b""
    for i, cm in enumerate(configmaps):
        assert cm["immutable"] is True and cm["metadata"]["namespace"] == "ns"
        data = {k: base64.b64decode(v) for k, v in cm["binaryData"].items()}
        assert sum(len(v) for v in data.values()) < 1024 * 1024
        joined += data[f"runner.{i}"]
        assert (data.get("runner") == loader) == (i == 0)
    assert joined == runner
    # Named by content: another runner or loader, other ConfigMaps.
    assert runner_configmap_names(runner + b"x", loader).names[0] != names.names[0]
    assert runner_configmap_names(runner, loader + b"x").names[0] != names.names[0]


def test_the_loader_looks_for_the_parts_where_the_pod_mounts_them() -> None:
    """runner/loader/loader.c has the parts' path built in: the runner's path and `.N`."""
    source = (Path(__file__).resolve().parents[3] / "runner" / "loader" / "loader.c").read_text()
    assert f'#define DIR "{RUNNER_PATH}."' in source


def test_pod_is_owned_by_the_trial_as_its_controller() -> None:
    pod = render(trial_body())
    (owner,) = pod["metadata"]["ownerReferences"]
    assert owner == {"apiVersion": "shipyard.dev/v1alpha1", "kind": "Trial",
                     "name": "hello-oracle", "uid": "6c0ffee0-0000-4000-8000-000000000001",
                     "controller": True, "blockOwnerDeletion": True}
    assert pod["metadata"]["namespace"] == "ns"


def test_pod_labels() -> None:
    labels = render(trial_body())["metadata"]["labels"]
    assert labels == {
        "app.kubernetes.io/managed-by": "shipyard",
        "app.kubernetes.io/name": "shipyard",
        "app.kubernetes.io/component": "environment",
        "shipyard.dev/trial": "hello-oracle",
        "shipyard.dev/task": "hello",
        "shipyard.dev/network": "public",  # the real pod: under its network baseline
    }


def test_pod_name_is_derived_from_the_trial() -> None:
    assert render(trial_body())["metadata"]["name"] == "hello-oracle-env"


def test_pod_runs_the_image_kept_alive_with_sleep_and_its_entrypoint_kept() -> None:
    pod = render(trial_body())
    main = container(pod)
    assert main["image"] == "python:3.12-slim"
    assert main["args"] == ["sleep", "infinity"]
    assert "command" not in main  # ENTRYPOINT kept, as Harbor does
    assert main["workingDir"] == "/app"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False


def test_readiness_is_an_http_get_of_the_runner_s_busy_file_served_by_the_probe_container(
        ) -> None:
    """No exec per probe: the kubelet GETs /busy from busybox httpd in the `probe` container,
    which serves (read-only) the folder where the runner keeps that file."""
    pod = render(trial_body())
    assert "readinessProbe" not in container(pod)
    probe_c = container(pod, PROBE_CONTAINER)
    assert probe_c["image"] == LOCAL_PROBE_IMAGE
    assert probe_c["command"] == ["httpd", "-f", "-p", str(PROBE_PORT), "-h", "/probe"]
    assert probe_c["volumeMounts"] == [{"name": "shipyard", "mountPath": "/probe",
                                        "subPath": "probe", "readOnly": True}]
    security = probe_c["securityContext"]
    assert security["runAsUser"] == 65534 and security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    probe = probe_c["readinessProbe"]
    assert probe["httpGet"] == {"path": "/busy", "port": PROBE_PORT}
    assert probe["failureThreshold"] == probe["successThreshold"] == 1
    assert probe["periodSeconds"] == 1
    assert pod["spec"]["containers"][0]["name"] == "main"


def test_the_probe_container_is_for_trials_whose_task_phases_may_run_long() -> None:
    quick = plan_for(task(HELLO_TOML.replace("timeout_sec = 120.0", "timeout_sec = 60.0")))
    assert max(p.timeout_sec or 0 for p in quick.phases) <= PROBE_CONTAINER_AFTER_SEC
    assert probe_image_for(quick, LOCAL_PROBE_IMAGE) is None
    long = plan_for(task(HELLO_TOML.replace("timeout_sec = 120.0", "timeout_sec = 600.0")))
    assert probe_image_for(long, LOCAL_PROBE_IMAGE) == LOCAL_PROBE_IMAGE
    assert probe_image_for(long, None) is None  # the operator's `none`


def test_without_a_probe_image_there_is_no_readiness_probe() -> None:
    """No exec every period for the pod's life: a phase's end is waited for by an exec."""
    pod = build_environment_pod(trial_body(), plan_for(), probe_image=None)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["main"]
    assert "readinessProbe" not in container(pod)


def test_runner_configmap_is_mounted_read_only_next_to_a_scratch_dir() -> None:
    pod = render(trial_body())
    assert volumes(pod)["runner"]["configMap"]["name"] == runner_configmap_name()
    assert mounts(pod)["runner"] == {"name": "runner", "mountPath": "/shipyard/bin",
                                     "readOnly": True}
    assert RUNNER_PATH.startswith("/shipyard/bin/")
    assert volumes(pod)["shipyard"] == {"name": "shipyard", "emptyDir": {}}
    assert mounts(pod)["shipyard"]["mountPath"] == "/shipyard"


def test_secrets_are_mounted_only_into_the_secrets_container_one_folder_each() -> None:
    spec = {"agent": {"name": "command", "command": "run",
                      "envFrom": [{"secretRef": {"name": "openai"}},
                                  {"secretRef": {"name": "anthropic"}}]}}
    pod = render(trial_body(**spec))
    for i, name in enumerate(["openai", "anthropic"]):
        assert volumes(pod)[f"secret-{i}"]["secret"] == {"secretName": name,
                                                         "defaultMode": 0o400, "optional": True}
        assert mounts(pod, "secrets")[f"secret-{i}"] == {
            "name": f"secret-{i}", "readOnly": True, "mountPath": f"/run/shipyard-secrets/{i}"}
        assert f"secret-{i}" not in mounts(pod)
    env_names = [e["name"] for e in container(pod)["env"]]
    assert not any("secret" in n.lower() for n in env_names)  # files, never env of the pod
    # The kernel denies /proc access to a process whose capabilities are not a subset.
    main_caps = set(container(pod)["securityContext"]["capabilities"]["add"])
    side_caps = set(container(pod, "secrets")["securityContext"]["capabilities"]["add"])
    assert side_caps - main_caps


def test_nothing_of_the_tasks_image_runs_beside_the_secrets() -> None:
    """The `secrets` container runs the task's image (already pulled) with the Secrets mounted:
    its command is the Go runner's `idle`, never the image's `sleep` (which a task replaced
    with a program that copied the Secrets into the pod's shared folder), and the runner
    reads no setting from its environment there (the image's)."""
    spec = {"agent": {"name": "command", "command": "run",
                      "envFrom": [{"secretRef": {"name": "openai"}}]}}
    body = trial_body(**spec)
    plan = plan_for(**{k: v for k, v in body["spec"].items() if k != "taskRef"})
    name = pod_name(body["metadata"]["name"], Role.ENV, None, 1)
    pod = build_trial_pod(body, plan, Role.ENV, None, name, None, "reg/runner:1")
    secrets = container(pod, "secrets")
    assert secrets["command"] == [RUNNER_PATH, "idle"]
    assert "args" not in secrets and "env" not in secrets
    # runner.sh (the fallback) needs the image's programs anyway.
    assert container(render(body), "secrets")["command"] == ["sleep", "infinity"]


def test_trial_pods_are_hardened() -> None:
    pod = render(trial_body())
    assert pod["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    security = container(pod)["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert "NET_RAW" not in security["capabilities"]["add"]
    assert "SETUID" in security["capabilities"]["add"]  # su to the agent's user
    assert [c["name"] for c in pod["spec"]["containers"]] == ["main", PROBE_CONTAINER]
    probe = container(pod, PROBE_CONTAINER)["securityContext"]
    assert probe["allowPrivilegeEscalation"] is False and probe["runAsNonRoot"] is True


def test_no_secret_volumes_without_env_from() -> None:
    assert not [v for v in volumes(render(trial_body())) if v.startswith("secret-")]


def test_resources_are_requests_and_limits_from_the_task() -> None:
    loaded = task(HELLO_TOML + "cpus = 2\nmemory_mb = 4096\nstorage_mb = 10240\n")
    pod = build_environment_pod(trial_body(), plan_for(loaded))
    amounts = {"cpu": "2", "memory": "4096Mi", "ephemeral-storage": "10240Mi"}
    assert container(pod)["resources"] == {"requests": amounts, "limits": amounts}


def test_no_resources_when_the_task_sets_none() -> None:
    assert container(render(trial_body()))["resources"] == {}


def test_container_env_is_rendered_in_order() -> None:
    pod = render(trial_body(environment={"env": [{"name": "B", "value": "2"},
                                                 {"name": "A", "value": "1"}]}))
    assert container(pod)["env"] == [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]


def test_long_trial_names_still_give_valid_object_names_and_label_values() -> None:
    name = "sweep-" + "a" * 60 + ".claude-code.terminal-bench-hard-task-0042"
    pod = build_environment_pod(trial_body(name=name, task_name="t" * 70), plan_for())
    assert len(pod["metadata"]["name"]) <= 63
    assert RFC1123_LABEL.match(pod["metadata"]["name"])
    bad = {k: v for k, v in pod["metadata"]["labels"].items()
           if len(v) > 63 or not LABEL_VALUE.match(v)}
    assert bad == {}


def test_golden_hello_world_oracle_pod() -> None:
    body = trial_body(name="hello-world-oracle", task_name="hello-world", agent={"name": "oracle"})
    pod = build_environment_pod(body, plan_for(hello_world(), agent={"name": "oracle"}))
    rendered = GOLDEN_HEADER + yaml.safe_dump(pod, sort_keys=False)
    rendered = rendered.replace(runner_configmap_name(), "shipyard-runner-<digest>")
    assert_golden(GOLDEN / "hello-world-oracle-pod.yaml", rendered)


# ---------------------------------------------------------------- ConfigMaps


def test_runner_configmap_is_named_by_content() -> None:
    cm = build_runner_configmap("ns")
    assert cm["data"] == {"runner": runner_script()}
    assert cm["metadata"]["name"] == runner_configmap_name()
    assert re.fullmatch(r"shipyard-runner-[0-9a-f]{10}", runner_configmap_name())
    assert runner_script().startswith("#!/bin/sh")


def test_logs_configmap_is_owned_by_the_trial() -> None:
    cm = build_logs_configmap(trial_body(), {"agent.log": "hi"})
    assert cm["metadata"]["name"] == "hello-oracle-logs"
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "6c0ffee0-0000-4000-8000-000000000001"
    assert cm["metadata"]["labels"]["app.kubernetes.io/component"] == "logs"
    assert cm["data"] == {"agent.log": "hi"}


# ---------------------------------------------------------------- dns_name


def test_dns_name_keeps_short_names() -> None:
    assert dns_name("hello-oracle", "env") == "hello-oracle-env"
    assert dns_name("Hello_World.v2") == "hello-world-v2"
    assert dns_name("---") == "shipyard"


def test_dns_name_shortens_long_names_with_a_stable_hash() -> None:
    long = "x" * 100
    name = dns_name(long, "env")
    assert len(name) == 63
    assert name.endswith("-env")
    assert name == dns_name(long, "env")
    assert dns_name(long + "1", "env") != dns_name(long + "2", "env")


@given(st.text(max_size=300), st.sampled_from(["", "env", "logs", "verifier-s12-a3"]))
def test_dns_name_is_always_a_valid_label(name: str, suffix: str) -> None:
    result = dns_name(name, suffix)
    assert len(result) <= 63
    assert RFC1123_LABEL.match(result), result
    assert result == dns_name(name, suffix)


# ---------------------------------------------------------------- truncate_log


def test_short_log_is_kept_whole_without_marker() -> None:
    assert truncate_log("all of it\n", 10) == "all of it\n"


def test_log_exactly_at_the_limit_is_not_marked() -> None:
    text = "x" * 100
    assert truncate_log(text, 100, limit=100) == text


def test_log_cut_by_the_runner_is_marked_with_its_full_size() -> None:
    tail = "y" * 100
    out = truncate_log(tail, 5000, limit=100)
    assert out == ("[... truncated by shipyard: showing the last 100 of 5000 bytes ...]\n" + tail)


def test_long_log_keeps_its_tail_after_the_marker() -> None:
    text = "head\n" + "z" * LOG_LIMIT_BYTES
    out = truncate_log(text, len(text))
    assert out.startswith("[... truncated by shipyard")
    assert out.endswith("z" * 1000)
    assert "head" not in out


def test_truncation_inside_a_multibyte_character_stays_valid_text() -> None:
    out = truncate_log("é" * 100, 200, limit=51)
    assert out.encode()  # valid UTF-8 after replacement
    assert out.endswith("é" * 25)


# ---------------------------------------------------------------- phase bundles


def bundle_members(data: bytes) -> dict[str, tuple[bytes, int]]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        out = {}
        for m in tar.getmembers():
            f = tar.extractfile(m)
            assert f is not None
            out[m.name] = (f.read(), m.mode)
        return out


def test_bundle_layout() -> None:
    spec = PhaseSpec(name="agent", command="run\n", user="agent", timeout_sec=120.7, cwd="/app",
                     env={"K": "v w"}, prepare="cp x y\n", collect=("/a", "/b c"),
                     payload={"solution/solve.sh": b"#!/bin/sh\n", "solution/data.txt": b"d"},
                     secrets=True)
    members = bundle_members(build_phase_bundle("agent", spec))
    assert sorted(members) == ["collect", "command", "env", "payload/solution/data.txt",
                               "payload/solution/solve.sh", "prepare", "spec"]
    assert members["spec"][0].decode() == (
        "USER_NAME=agent\nTIMEOUT=120\nCWD=/app\nSECRETS=1\nOWN=0\n")
    assert "export K='v w'" in members["env"][0].decode()
    assert members["command"][0] == b"run\n"
    assert members["collect"][0] == b"/a\n/b c\n"
    assert members["prepare"][0].decode().startswith("set -e\n")
    assert members["payload/solution/solve.sh"][1] == 0o755
    assert members["payload/solution/data.txt"][1] == 0o644
    assert members["spec"][1] == members["env"][1] == 0o600


def test_bundle_without_optional_parts() -> None:
    members = bundle_members(build_phase_bundle("x", PhaseSpec(name="agent", command="true")))
    assert sorted(members) == ["command", "env", "spec"]
    assert members["spec"][0].decode() == "USER_NAME=''\nTIMEOUT=\nCWD=''\nSECRETS=0\nOWN=0\n"


def test_only_shipyard_s_own_first_phase_is_marked_own() -> None:
    """OWN=1 spares the runner a sweep: never for a phase that runs task code."""
    plan = plan_for(agent={"name": "oracle"})
    own = {p.id: "OWN=1\n" in bundle_members(build_phase_bundle(p.id, p))["spec"][0].decode()
           for p in plan.phases}
    assert own == {"environment": True, "agent": False, "verifier": False}


@pytest.mark.parametrize(("timeout", "expected"), [(0.2, "1"), (1.9, "1"), (600.0, "600")])
def test_bundle_timeout_is_whole_seconds_and_at_least_one(timeout: float, expected: str) -> None:
    spec = PhaseSpec(name="agent", command="true", timeout_sec=timeout)
    text = bundle_members(build_phase_bundle("x", spec))["spec"][0].decode()
    assert f"TIMEOUT={expected}\n" in text


def test_bundle_is_deterministic() -> None:
    spec = PhaseSpec(name="agent", command="true", payload={"b": b"2", "a": b"1"})
    assert build_phase_bundle("x", spec) == build_phase_bundle("x", spec)


def test_bundle_never_carries_the_instruction_outside_its_payload() -> None:
    loaded = task(extra={"instruction.md": "TOP-SECRET-INSTRUCTION\n"})
    agent = plan_for(loaded, agent={"name": "command", "command": "go"}).phase("agent")
    members = bundle_members(build_phase_bundle(agent.id or "agent", agent))
    holders = [name for name, (content, _) in members.items()
               if b"TOP-SECRET-INSTRUCTION" in content]
    assert holders == ["payload/instruction.md"]


@pytest.mark.parametrize(("example", "role"), [("gpu", Role.ENV),
                                                ("separate-verifier", Role.VERIFIER)])
def test_golden_example_pods(example: str, role: Role) -> None:
    """The pods of two more examples as the operator creates them: a GPU environment (its
    scheduling applied) and a separate verifier (no secrets, its own network baseline)."""
    body = trial_body(name=f"{example}-oracle", task_name=example, agent={"name": "oracle"})
    loaded = load_task_dir(REPO / "examples" / example / "task")
    plan = plan_for(loaded, agent={"name": "oracle"})
    step = plan.steps[-1].name
    pod = build_trial_pod(body, plan, role, step, pod_name(f"{example}-oracle", role, None, 1))
    header = GOLDEN_HEADER.replace("The environment pod of examples/hello-world",
                                   f"The {role.noun} pod of examples/{example}")
    rendered = header + yaml.safe_dump(pod, sort_keys=False)
    rendered = rendered.replace(runner_configmap_name(), "shipyard-runner-<digest>")
    assert_golden(GOLDEN / f"{example}-{role.noun}-pod.yaml", rendered)


def _fenced(plan: TrialPlan) -> TrialPlan:
    from dataclasses import replace

    from shipyard.plan.network import Fence

    assert plan.network is not None
    return replace(plan, network=replace(plan.network, fence=Fence(("10.96.0.1:443",), 30.0,
                                                                      containers=True)))


def test_no_container_of_the_tasks_image_starts_before_the_fence_init_container_passes(
) -> None:
    """An image's ENTRYPOINT runs when its container starts, before any phase: where it is not
    known (its config could not be read), the fence (the pod's policy in force) is the pod's
    first init container after the runner's, run
    from the task's image with `command` set (its ENTRYPOINT does not run), mounting only the
    runner read-only, before the agent bundles and a compose task's sidecars."""
    from shipyard.api.conventions import FENCE_INIT_CONTAINER

    body = trial_body()
    plan = _fenced(plan_for(agent={"name": "oracle"}))
    name = pod_name(body["metadata"]["name"], Role.ENV, None, 1)
    pod = build_trial_pod(body, plan, Role.ENV, None, name, None, "reg/runner:1")
    runner, fence = pod["spec"]["initContainers"][:2]
    assert (runner["name"], fence["name"]) == ("runner", FENCE_INIT_CONTAINER)
    assert fence["image"] == container(pod)["image"] == plan.environment.image
    # It waits longer than a phase's fence: the CNI programs a pod some time after its start.
    assert fence["command"][:3] == [RUNNER_PATH, "fence", "60"]
    assert fence["command"][3].startswith("network policy not in force after 60 s")
    assert "No container of the task's image started." in fence["command"][3]
    assert fence["command"][4:] == ["10.96.0.1:443"]
    assert "args" not in fence
    assert fence["volumeMounts"] == [{"name": "runner", "mountPath": RUNNER_MOUNT,
                                      "readOnly": True}]
    assert fence["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # From ConfigMaps too; never with runner.sh (it cannot connect without the image's bash),
    # nor without a fence.
    parts = build_trial_pod(body, plan, Role.ENV, None, name, None,
                            RunnerConfigMaps(("p-0", "p-1")))
    assert [c["name"] for c in parts["spec"]["initContainers"]] == [FENCE_INIT_CONTAINER]
    assert "initContainers" not in build_trial_pod(body, plan, Role.ENV, None, name, None)["spec"]
    unfenced = build_trial_pod(body, plan_for(agent={"name": "oracle"}), Role.ENV, None, name,
                               None, "reg/runner:1")
    assert [c["name"] for c in unfenced["spec"]["initContainers"]] == ["runner"]
    from dataclasses import replace

    assert plan.network is not None and plan.network.fence is not None
    trusting = replace(plan, network=replace(plan.network, fence=replace(
        plan.network.fence, containers=False)))  # SHIPYARD_NETWORK_FENCE_CONTAINERS off
    trusted = build_trial_pod(body, trusting, Role.ENV, None, name, None, "reg/runner:1")
    assert [c["name"] for c in trusted["spec"]["initContainers"]] == ["runner"]


def test_a_known_entrypoint_runs_after_the_fence_in_the_main_container_itself() -> None:
    """Where the image's ENTRYPOINT is known, the main container's command is the runner's
    fence, then that ENTRYPOINT with the container's arguments (`sleep infinity`, itself a
    program of the image, also after it): no init container, so no slower start. An image
    without ENTRYPOINT is fenced the same way. A compose task's sidecars still start behind
    the init container; and the separate verifier's pod is fenced as the environment's."""
    from dataclasses import replace

    from shipyard.api.conventions import FENCE_INIT_CONTAINER

    body = trial_body()
    plan = _fenced(plan_for(agent={"name": "oracle"}))
    name = pod_name(body["metadata"]["name"], Role.ENV, None, 1)
    for entrypoint in (("/docker-entrypoint.sh", "--flag"), ()):
        known = replace(plan, environment=replace(plan.environment, entrypoint=entrypoint))
        pod = build_trial_pod(body, known, Role.ENV, None, name, None, "reg/runner:1")
        main = container(pod)
        assert [c["name"] for c in pod["spec"]["initContainers"]] == ["runner"]
        assert main["command"][:3] == [RUNNER_PATH, "fence", "60"]
        assert "Nothing of the task's image started." in main["command"][3]
        assert main["command"][4:] == ["10.96.0.1:443", "--", *entrypoint]
        assert main["args"] == ["sleep", "infinity"]
    from shipyard.plan.compose import ComposePod, SidecarPlan

    sidecar = SidecarPlan(name="db", image="postgres:16", command=None, args=None, env=(),
                          working_dir=None, run_as_user=None, run_as_group=None, cpus=None,
                          memory_mb=None, cpus_request=None, memory_request_mb=None,
                          startup_probe=None, one_shot=False, mounts=(), capabilities=())
    composed = replace(plan, environment=replace(
        plan.environment, entrypoint=(), compose=ComposePod((sidecar,), (), (), ("db",))))
    pod = build_trial_pod(body, composed, Role.ENV, None, name, None, "reg/runner:1")
    assert FENCE_INIT_CONTAINER in [c["name"] for c in pod["spec"]["initContainers"]]
    assert "command" not in container(pod)


def test_a_separate_verifiers_pod_is_fenced_by_its_own_images_entrypoint() -> None:
    from dataclasses import replace

    from shipyard.api.conventions import FENCE_INIT_CONTAINER

    body = trial_body(name="separate-verifier-oracle", task_name="separate-verifier")
    loaded = load_task_dir(REPO / "examples" / "separate-verifier" / "task")
    plan = _fenced(plan_for(loaded, agent={"name": "oracle"}))
    step = plan.steps[0]
    assert step.verifier_pod is not None
    name = pod_name("separate-verifier-oracle", Role.VERIFIER, None, 1)
    unknown = build_trial_pod(body, plan, Role.VERIFIER, None, name, None, "reg/runner:1")
    assert FENCE_INIT_CONTAINER in [c["name"] for c in unknown["spec"]["initContainers"]]
    known = replace(plan, steps=(replace(step, verifier_pod=replace(
        step.verifier_pod, entrypoint=("/entry",))),))
    pod = build_trial_pod(body, known, Role.VERIFIER, None, name, None, "reg/runner:1")
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["runner"]
    assert container(pod)["command"][-2:] == ["--", "/entry"]
