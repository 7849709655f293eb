"""Pure builders for the objects a trial owns: its pods (the agent environment and separate
verifiers), the runner ConfigMap and the logs ConfigMap. Each returns a plain dict ready for
the API; `build_trial_pod` is the one place a trial pod is built."""

from __future__ import annotations

from importlib import resources
from typing import Any

from shipyard.api import conventions
from shipyard.api.conventions import (
    FENCE_INIT_CONTAINER,
    LABEL_COMPONENT,
    LABEL_NETWORK,
    LABEL_TASK,
    MANAGED_BY,
    PROBE_CONTAINER,
    PROBE_PORT,
    PROBE_SUBDIR,
    RUNNER_INIT_CONTAINER,
    RUNNER_MOUNT,
    RUNNER_PATH,
    SECRETS_CONTAINER,
    Component,
    Role,
    label_value,
    trial_selector,
)
from shipyard.api.models import API_VERSION
from shipyard.plan.agents import AGENTS_ROOT, BUNDLE_SOURCE
from shipyard.plan.network import Fence
from shipyard.plan.phases import PodPlan, TrialPlan
from shipyard.render.accelerators import apply_scheduling
from shipyard.render.compose import apply_compose
from shipyard.render.phase_scripts import fence_message, start_fence_seconds
from shipyard.render.runner_parts import RunnerConfigMaps, runner_parts_volume

SECRETS_MOUNT = "/run/shipyard-secrets"
"""Where the agent's Secrets are mounted, in the `secrets` container only."""
MAIN_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
                     "NET_BIND_SERVICE", "SYS_CHROOT", "MKNOD")
"""What a trial's main container keeps of Linux capabilities (all others dropped): what task
images need to install packages as root, chown/chmod files, switch to the agent or verifier
user (su), kill their own processes (the runner's sweep), serve on low ports and chroot (sshd's
privilege separation, a jail: Harbor's containers have it). MKNOD (harmless: the device cgroup
still decides what opens) is the one no other container of the pod holds, so that the kernel
refuses a root compose sidecar /proc/PID/environ, root and ptrace access to a root agent (a
process may only inspect another whose permitted capabilities are a subset of its own, without
SYS_PTRACE): the agent's keys are in its environment. Dropped from the container runtime's
default set: NET_RAW (raw sockets, spoofing), SETPCAP, SETFCAP, AUDIT_WRITE."""
SECRETS_CAPABILITIES = ("SETPCAP",)
"""The `secrets` container's capabilities: one that no other container of the pod holds, so that
the kernel refuses main's processes and the compose sidecars (root, task code) its
/proc/PID/root, environ and ptrace (a process may only inspect another whose permitted
capabilities are a subset of its own, without SYS_PTRACE). Its runner processes are not
dumpable either, but only from their first instruction: a root sidecar that held all of this
container's capabilities read the mounted Secrets through /proc/PID/root of a `put-secrets`
exec in the moment it started, on a loaded node."""
PROBE_PERIOD_SEC = 1
"""The HTTP probe's period: a GET the kubelet makes itself, cheap enough to make often (a
phase's end is seen within this)."""
PROBE_INITIAL_DELAY_SEC = 2
"""Below the runner's launch grace (3 s) less a period: a phase not over within its launch has
been seen busy, so its end is a readiness change."""


def runner_script() -> str:
    return resources.files("shipyard.render").joinpath("runner.sh").read_text()


def runner_configmap_name() -> str:
    return conventions.runner_configmap_name(runner_script())


def build_runner_configmap(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": runner_configmap_name(),
            "namespace": namespace,
            "labels": {**MANAGED_BY, LABEL_COMPONENT: Component.RUNNER.value},
        },
        "immutable": True,  # named by its content: a change is a new name
        "data": {"runner": runner_script()},
    }


def owner_reference(trial: dict[str, Any]) -> dict[str, Any]:
    meta = trial["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": "Trial",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def trial_labels(trial: dict[str, Any], component: str) -> dict[str, str]:
    return {
        **MANAGED_BY,
        LABEL_COMPONENT: str(component),
        **trial_selector(trial["metadata"]["name"]),
        LABEL_TASK: label_value(trial["spec"]["taskRef"]["name"]),
    }


def pod_name_for(trial: dict[str, Any], role: Role, step_index: int | None, attempt: int) -> str:
    return conventions.pod_name(trial["metadata"]["name"], role, step_index, attempt)


def resources_for(plan: PodPlan) -> dict[str, Any]:
    """Requests and limits from the task's cpus, memory_mb and storage_mb (or the Trial's
    overrides): a trial gets what it declares and no more (an agent over its memory is
    OOM-killed, over its storage evicted)."""
    amounts: dict[str, str] = {}
    if plan.cpus is not None:
        amounts["cpu"] = str(plan.cpus)
    if plan.memory_mb is not None:
        amounts["memory"] = f"{plan.memory_mb}Mi"
    if plan.storage_mb is not None:
        amounts["ephemeral-storage"] = f"{plan.storage_mb}Mi"
    return {"requests": amounts, "limits": dict(amounts)} if amounts else {}


def container_security(capabilities: tuple[str, ...]) -> dict[str, Any]:
    """Root (task images expect it), no privilege escalation (NoNewPrivs), only `capabilities`."""
    return {
        "runAsUser": 0,
        "runAsGroup": 0,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": list(capabilities)},
    }


def secrets_container(plan: PodPlan, secret_names: tuple[str, ...], go_runner: bool
                      ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The container that alone mounts the agent's Secrets, and their volumes. It only waits
    (the Go runner's `idle`: no program of the task's image, whose `sleep` a task may replace,
    runs beside the Secrets; runner.sh needs the image's `sleep`); the operator runs `runner
    put-secrets PHASE` in it before a phase that needs them. The runner reads them from
    SECRETS_MOUNT (its default in a trial pod)."""
    # optional: a missing Secret does not hold the pod in ContainerCreating until the start
    # timeout; `put-secrets` finds its folder empty and the trial fails with SecretNotFound.
    volumes = [{"name": f"secret-{i}", "secret": {"secretName": n, "defaultMode": 0o400,
                                                  "optional": True}}
               for i, n in enumerate(secret_names)]
    container = {
        "name": SECRETS_CONTAINER,
        "image": plan.image,
        "imagePullPolicy": plan.image_pull_policy,
        "command": [RUNNER_PATH, "idle"] if go_runner else ["sleep", "infinity"],
        "securityContext": container_security(SECRETS_CAPABILITIES),
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                      "limits": {"cpu": "100m", "memory": "64Mi"}},
        "volumeMounts": [
            {"name": "shipyard", "mountPath": "/shipyard"},
            {"name": "runner", "mountPath": RUNNER_MOUNT, "readOnly": True},
            *({"name": f"secret-{i}", "mountPath": f"{SECRETS_MOUNT}/{i}", "readOnly": True}
              for i in range(len(secret_names))),
        ],
    }
    return container, volumes


PROBE_CONTAINER_AFTER_SEC = 120.0
"""A trial gets the probe container when one of its task phases (agent, verifier, setup…) may
run longer than this. Below, its pods have no readiness probe at all: a phase that outlasts its
launch is waited for by a `result` exec that returns when it ends (`runner.sh`), one exec per
`trial_machine.RESULT_WAIT_SEC`, where the probe container costs a container start and stop per
pod and an exec probe (what pods had before) a runtime exec every period for the pod's whole
life (bench/concurrent_trials.py, 30 trivial trials: 1.0 node CPU s per trial in the pods)."""


def probe_image_for(plan: TrialPlan, image: str | None) -> str | None:
    """The probe container's image for this trial (the operator's `probe_image`), or None: no
    readiness probe, for trials whose every task phase ends within PROBE_CONTAINER_AFTER_SEC
    (the environment phase, Shipyard's own, is quick whatever it declares)."""
    if image is None:
        return None
    task_phases = [p for p in plan.phases if p.name not in ("environment", "verifier-environment")]
    if any(p.timeout_sec is None or p.timeout_sec > PROBE_CONTAINER_AFTER_SEC
           for p in task_phases):
        return image
    return None


def probe_container(image: str) -> dict[str, Any]:
    """The container whose readiness tells a phase runs: busybox httpd serving the runner's
    probe folder (read-only), so the probe is a plain HTTP GET of /busy (200 while a phase runs,
    404 otherwise) and not an exec in the task's container every period. Ready while busy, so
    the probe fails (a kubelet Event each time) only between phases, not for a whole phase; the
    operator reads this container's readiness (`reconcile.pod_observation`). It runs as nobody
    without capabilities; the task's own image needs no tool for it."""
    return {
        "name": PROBE_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["httpd", "-f", "-p", str(PROBE_PORT), "-h", "/probe"],
        "securityContext": {"runAsUser": 65534, "runAsGroup": 65534, "runAsNonRoot": True,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "resources": {"requests": {"cpu": "1m", "memory": "4Mi"},
                      "limits": {"cpu": "50m", "memory": "16Mi"}},
        "volumeMounts": [{"name": "shipyard", "mountPath": "/probe", "subPath": PROBE_SUBDIR,
                          "readOnly": True}],
        "readinessProbe": {
            "httpGet": {"path": "/busy", "port": PROBE_PORT},
            # Not probed (so not failing, each failure an Event) before a phase can have run
            # long: a phase still running at the end of its launch (3 s) has been probed busy.
            "initialDelaySeconds": PROBE_INITIAL_DELAY_SEC,
            "periodSeconds": PROBE_PERIOD_SEC,
            "timeoutSeconds": 1,
            "successThreshold": 1,
            "failureThreshold": 1,
        },
    }


def runner_init_container(image: str) -> dict[str, Any]:
    """The init container that puts the static Go runner into the pod's `runner` volume
    (`runner install`: the binary copies itself; no shell, no program of any image). Task
    containers mount that volume read-only, so no task code can change the runner; it depends
    on nothing of the trial (a pod made ahead of its trial gets it too)."""
    return {
        "name": RUNNER_INIT_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/runner", "install", RUNNER_PATH],
        "securityContext": {"runAsUser": 0, "runAsGroup": 0, "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                      "limits": {"cpu": "200m", "memory": "32Mi"}},
        "volumeMounts": [{"name": "runner", "mountPath": RUNNER_MOUNT}],
    }


def fence_start(container: dict[str, Any], init: list[dict[str, Any]], plan: PodPlan,
                fence: Fence) -> None:
    """No program of the task's image runs before the pod's policy is in force: a CNI programs
    it a moment after the pod starts (kube-router: about a second, more when many pods
    start), and an image's ENTRYPOINT reached the apiserver in that moment. Where the image's
    ENTRYPOINT is known, the main container's command is the runner's `fence`, which then
    becomes that ENTRYPOINT with the container's arguments (even `sleep` is the image's own
    program); else, and where docker-compose sidecars start with the pod, an init container
    fences them all (`fence_init_container`), which makes the pod's start about a second
    slower (the kubelet sees an init container end at its next relist)."""
    if plan.entrypoint is None or (plan.compose is not None and plan.compose.sidecars):
        init.append(fence_init_container(plan.image, plan.image_pull_policy, fence))
        return
    container["command"] = [*_fence_command(fence, "Nothing of the task's image started."),
                            "--", *plan.entrypoint]


def _fence_command(fence: Fence, not_run: str) -> list[str]:
    return [RUNNER_PATH, "fence", str(start_fence_seconds(fence)),
            fence_message(fence, not_run, start_fence_seconds(fence)), *fence.sockets]


def fence_init_container(image: str, pull_policy: str | None, fence: Fence) -> dict[str, Any]:
    """The pod's first init container after the runner's (`fence_start`): the runner's
    `fence`, run from the task's image with `command` set, so that the image's ENTRYPOINT
    does not run and nothing else of it does: no container of the task's image starts before
    it has seen the pod's policy in force. Its failure is its termination message."""
    container: dict[str, Any] = {
        "name": FENCE_INIT_CONTAINER,
        "image": image,
        "command": _fence_command(fence, "No container of the task's image started."),
        "securityContext": {"runAsUser": 0, "runAsGroup": 0, "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                      "limits": {"cpu": "200m", "memory": "32Mi"}},
        "volumeMounts": [{"name": "runner", "mountPath": RUNNER_MOUNT, "readOnly": True}],
    }
    if pull_policy:
        container["imagePullPolicy"] = pull_policy
    return container


Runner = str | RunnerConfigMaps | None
"""How the runner reaches a pod: the static Go runner's image (copied by an init container),
its ConfigMaps (`render.runner_parts`, mounted), or None: runner.sh from its ConfigMap."""


def runner_volume(runner: Runner) -> dict[str, Any]:
    """The pod's `runner` volume: the Go runner's ConfigMaps, an emptyDir the init container
    fills with the Go runner, else the runner.sh ConfigMap."""
    if isinstance(runner, RunnerConfigMaps):
        return runner_parts_volume(runner)
    if runner is not None:
        return {"name": "runner", "emptyDir": {"sizeLimit": "32Mi"}}
    return {"name": "runner",
            "configMap": {"name": runner_configmap_name(), "defaultMode": 0o755}}


def build_trial_pod(trial: dict[str, Any], plan: TrialPlan, role: Role, step: str | None,
                    name: str, probe_image: str | None = None,
                    runner: Runner = None) -> dict[str, Any]:
    """The pod as the operator creates it: the environment pod (`role` ``env``) or a step's
    separate verifier pod, under its network policy baseline, with its scheduling
    (accelerators and the Trial's and operator's pod settings). With `probe_image` (the
    operator's `probe_image`) the `probe` container's readiness (an HTTP probe) says a phase
    runs; without, the pod has no readiness probe (a phase's end is waited for by an exec).
    With `runner` (`Runner`, from the operator's settings) the pod runs the static Go runner,
    else runner.sh."""
    # The Go runner only: runner.sh cannot connect without the image's bash.
    fence = plan.network.fence if plan.network is not None and runner is not None else None
    if role == Role.ENV:
        pod_plan = plan.environment
        pod = _base_pod(trial, pod_plan, Role.ENV, name, plan.secret_names, probe_image,
                        runner, fence)
    else:
        verifier = plan.step(step).verifier_pod
        assert verifier is not None
        pod_plan = verifier
        pod = _base_pod(trial, pod_plan, Role.VERIFIER, name, probe_image=probe_image,
                        runner=runner, fence=fence)
    if plan.network is not None:
        pod["metadata"]["labels"][LABEL_NETWORK] = plan.network.baseline(role, step)
    return apply_scheduling(pod, pod_plan.accelerators, plan.pod_overrides)


def _base_pod(trial: dict[str, Any], plan: PodPlan, role: Role, name: str,
              secret_names: tuple[str, ...] = (), probe_image: str | None = None,
              runner: Runner = None, fence: Fence | None = None) -> dict[str, Any]:
    """A trial pod (the agent environment, or a separate verifier): the image kept alive with
    a sleep (ENTRYPOINT kept, as Harbor does), the runner mounted (`build_trial_pod` for the
    readiness probe). Secrets are mounted only into the
    environment pod's `secrets` container (see `secrets_container`), never into the main
    container. The pod shares one PID namespace so that the pause container, as PID 1, reaps
    the processes the phases leave behind and `sleep` gets SIGTERM's default action on
    deletion."""
    meta = trial["metadata"]
    volumes: list[dict[str, Any]] = [
        {"name": "shipyard", "emptyDir": {}},
        runner_volume(runner),
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "shipyard", "mountPath": "/shipyard"},
        {"name": "runner", "mountPath": RUNNER_MOUNT, "readOnly": True},
    ]
    container: dict[str, Any] = {
        "name": "main",
        "image": plan.image,
        "imagePullPolicy": plan.image_pull_policy,
        "args": ["sleep", "infinity"],
        "env": [{"name": k, "value": v} for k, v in plan.container_env.items()],
        "securityContext": container_security(MAIN_CAPABILITIES),
        "resources": resources_for(plan),
        "volumeMounts": mounts,
    }
    if plan.workdir:
        container["workingDir"] = plan.workdir
    spec_extra: dict[str, Any] = {}
    init = [runner_init_container(runner)] if isinstance(runner, str) else []
    if fence is not None and fence.containers:
        fence_start(container, init, plan, fence)
    init += [agent_bundle_container(n, image) for n, image in plan.agent_bundles]
    if init:
        spec_extra["initContainers"] = init
    containers = [container]
    if secret_names:
        sidecar, secret_volumes = secrets_container(plan, secret_names, runner is not None)
        containers.append(sidecar)
        volumes += secret_volumes
    if probe_image is not None:
        containers.append(probe_container(probe_image))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": trial_labels(trial, Role(role).component),
            "ownerReferences": [owner_reference(trial)],
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 5,
            "shareProcessNamespace": True,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            **spec_extra,
            "containers": containers,
            "volumes": volumes,
        },
    }
    if plan.compose is not None:
        apply_compose(pod["spec"], container, plan.compose, plan.image_pull_policy)
    return pod


def agent_bundle_container(agent: str, image: str) -> dict[str, Any]:
    """An init container copying an agent bundle (the agent's files under BUNDLE_SOURCE/<name>
    in a small image with a static busybox) into the pod's /shipyard/agents/<name>."""
    target = f"{AGENTS_ROOT}/{agent}"
    return {
        "name": f"agent-{agent}",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c",
                    f"rm -rf {target} && mkdir -p {AGENTS_ROOT} && "
                    f"cp -a {BUNDLE_SOURCE}/{agent} {target} && chmod 755 {AGENTS_ROOT}"],
        "securityContext": container_security(MAIN_CAPABILITIES),
        "volumeMounts": [{"name": "shipyard", "mountPath": "/shipyard"}],
    }


LOG_LIMIT_BYTES = 256 * 1024
TRUNCATED_MARKER = "[... truncated by shipyard: showing the last {kept} of {total} bytes ...]\n"


def truncate_log(text: str, total: int, limit: int = LOG_LIMIT_BYTES) -> str:
    """Keep the tail of a log, with a visible marker when anything was cut."""
    data = text.encode()
    if total <= limit and len(data) <= limit:
        return text
    kept = data[-limit:].decode(errors="replace")
    return TRUNCATED_MARKER.format(kept=min(limit, len(data)), total=total) + kept


def logs_configmap_name(trial: dict[str, Any]) -> str:
    return conventions.logs_configmap_name(trial["metadata"]["name"])


def build_logs_configmap(trial: dict[str, Any], logs: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": logs_configmap_name(trial),
            "namespace": trial["metadata"]["namespace"],
            "labels": trial_labels(trial, Component.LOGS),
            "ownerReferences": [owner_reference(trial)],
        },
        "data": logs,
    }
