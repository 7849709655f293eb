"""Pure builders for the objects a trial owns: the environment pod, the runner ConfigMap and
the logs ConfigMap. Each returns a plain dict ready for the API."""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from typing import Any

from shipyard.api.models import API_VERSION
from shipyard.plan.phases import PodPlan, TrialPlan

RUNNER_MOUNT = "/shipyard/bin"
RUNNER_PATH = f"{RUNNER_MOUNT}/runner"
SECRETS_MOUNT = "/run/shipyard-secrets"
"""Where the agent's Secrets are mounted, in the `secrets` container only."""
SECRETS_CONTAINER = "secrets"
MAIN_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
                     "NET_BIND_SERVICE")
"""What a trial's main container keeps of Linux capabilities (all others dropped): what task
images need to install packages as root, chown/chmod files, switch to the agent or verifier
user (su), kill their own processes (the runner's sweep) and serve on low ports. Dropped from
the container runtime's default set: NET_RAW (raw sockets, spoofing), MKNOD, SYS_CHROOT,
SETPCAP, SETFCAP, AUDIT_WRITE."""
SECRETS_CAPABILITIES = ("AUDIT_WRITE",)
"""The `secrets` container's capabilities: one the main container lacks, so that the kernel
refuses main's processes /proc/PID/root, environ and ptrace access to it (a process may only
inspect another whose permitted capabilities are a subset of its own, without SYS_PTRACE)."""
READINESS_PERIOD_SEC = 2
LABEL_TRIAL = "shipyard.dev/trial"
LABEL_TASK = "shipyard.dev/task"
LABEL_COMPONENT = "app.kubernetes.io/component"
MANAGED_BY = {"app.kubernetes.io/managed-by": "shipyard", "app.kubernetes.io/name": "shipyard"}


def runner_script() -> str:
    return resources.files("shipyard.render").joinpath("runner.sh").read_text()


def runner_configmap_name() -> str:
    """Named by content, so every trial in a namespace shares one and upgrades never clash."""
    digest = hashlib.sha256(runner_script().encode()).hexdigest()[:10]
    return f"shipyard-runner-{digest}"


def build_runner_configmap(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": runner_configmap_name(),
            "namespace": namespace,
            "labels": {**MANAGED_BY, LABEL_COMPONENT: "runner"},
        },
        "data": {"runner": runner_script()},
    }


def dns_name(name: str, suffix: str = "") -> str:
    """An RFC 1123 name of at most 63 characters, with a hash when it had to be shortened."""
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "shipyard"
    full = f"{base}-{suffix}" if suffix else base
    if len(full) <= 63:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    keep = 63 - len(digest) - len(suffix) - 2
    return f"{base[:keep].rstrip('-')}-{digest}" + (f"-{suffix}" if suffix else "")


def label_value(value: str) -> str:
    """A valid label value (at most 63 characters), shortened with a hash when needed."""
    if len(value) <= 63:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    return f"{value[:54].rstrip('-._')}-{digest}"


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
        LABEL_COMPONENT: component,
        LABEL_TRIAL: label_value(trial["metadata"]["name"]),
        LABEL_TASK: label_value(trial["spec"]["taskRef"]["name"]),
    }


def pod_name_for(trial: dict[str, Any], role: str, step_index: int | None, attempt: int) -> str:
    """`<trial>-env`, `<trial>-verifier[-s<i>]`, with `-a<n>` from the second attempt on."""
    suffix = "env" if role == "env" else "verifier"
    if role != "env" and step_index is not None:
        suffix += f"-s{step_index}"
    if attempt > 1:
        suffix += f"-a{attempt}"
    return dns_name(trial["metadata"]["name"], suffix)


def environment_pod_name(trial: dict[str, Any]) -> str:
    return pod_name_for(trial, "env", None, 1)


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


def secrets_container(plan: PodPlan, secret_names: tuple[str, ...]) -> tuple[
        dict[str, Any], list[dict[str, Any]]]:
    """The container that alone mounts the agent's Secrets, and their volumes. It only sleeps;
    the operator runs `runner put-secrets PHASE` in it before a phase that needs them."""
    # optional: a missing Secret does not hold the pod in ContainerCreating until the start
    # timeout; `put-secrets` finds its folder empty and the trial fails with SecretNotFound.
    volumes = [{"name": f"secret-{i}", "secret": {"secretName": n, "defaultMode": 0o400,
                                                  "optional": True}}
               for i, n in enumerate(secret_names)]
    container = {
        "name": SECRETS_CONTAINER,
        "image": plan.image,
        "imagePullPolicy": plan.image_pull_policy,
        "command": ["sleep", "infinity"],
        "env": [{"name": "SHIPYARD_SECRETS_SRC", "value": SECRETS_MOUNT}],
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


def build_environment_pod(trial: dict[str, Any], plan: TrialPlan) -> dict[str, Any]:
    return build_pod(trial, plan.environment, "env", environment_pod_name(trial),
                     plan.secret_names)


def build_pod(trial: dict[str, Any], plan: PodPlan, role: str, name: str,
              secret_names: tuple[str, ...] = ()) -> dict[str, Any]:
    """A trial pod (the agent environment, or a separate verifier): the image kept alive with
    a sleep (ENTRYPOINT kept, as Harbor does), the runner mounted, readiness = "no phase is
    running". Secrets are mounted only into the environment pod's `secrets` container (see
    `secrets_container`), never into the main container. The pod
    shares one PID namespace so that the pause container, as PID 1, reaps the processes the
    phases leave behind and `sleep` gets SIGTERM's default action on deletion."""
    meta = trial["metadata"]
    volumes: list[dict[str, Any]] = [
        {"name": "shipyard", "emptyDir": {}},
        {
            "name": "runner",
            "configMap": {"name": runner_configmap_name(), "defaultMode": 0o755},
        },
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
        "readinessProbe": {
            "exec": {"command": ["/bin/sh", RUNNER_PATH, "ready"]},
            "periodSeconds": READINESS_PERIOD_SEC,
            "timeoutSeconds": 5,
            "successThreshold": 1,
            "failureThreshold": 1,
        },
    }
    if plan.workdir:
        container["workingDir"] = plan.workdir
    containers = [container]
    if secret_names:
        sidecar, secret_volumes = secrets_container(plan, secret_names)
        containers.append(sidecar)
        volumes += secret_volumes
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": trial_labels(trial, "environment" if role == "env" else "verifier"),
            "ownerReferences": [owner_reference(trial)],
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 5,
            "shareProcessNamespace": True,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": containers,
            "volumes": volumes,
        },
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
    return dns_name(trial["metadata"]["name"], "logs")


def build_logs_configmap(trial: dict[str, Any], logs: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": logs_configmap_name(trial),
            "namespace": trial["metadata"]["namespace"],
            "labels": trial_labels(trial, "logs"),
            "ownerReferences": [owner_reference(trial)],
        },
        "data": logs,
    }
