"""Shipyard's conventions on the cluster, in one place: label and annotation keys, how names
and label values are derived from a Trial's or Task's name, the finished phases, condition
lookup and the timestamps of status fields.

Every object name and every label value a trial uses comes from the functions here, so a
selector always matches the labels it is meant to match, whatever the length of the name
(resource names may have 253 characters, label values and pod names at most 63).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

DOMAIN = "shipyard.dev"

# ---------------------------------------------------------------- labels and annotations

LABEL_TRIAL = f"{DOMAIN}/trial"
LABEL_TASK = f"{DOMAIN}/task"
LABEL_SWEEP = f"{DOMAIN}/sweep"
LABEL_AGENT = f"{DOMAIN}/agent"
"""A sweep Trial's agent key (`name` or `name__model`)."""
LABEL_ATTEMPT = f"{DOMAIN}/attempt"
"""A sweep Trial's attempt, from 1."""
LABEL_RETRY = f"{DOMAIN}/retry"
"""The retry generation of a sweep plan slot: 0 for its first Trial, n for its n-th retry."""
LABEL_NETWORK = f"{DOMAIN}/network"
"""The network policy key a trial pod is under (switched between phases)."""
LABEL_WARM_POOL = f"{DOMAIN}/warm-pool"
"""The WarmPool a warm pod was made by (kept after its claim: the pool counts it claimed)."""
LABEL_WARM_KEY = f"{DOMAIN}/warm-key"
"""A warm pod's fit: the digest of its spec (`render.warm_pod.warm_key`); a trial claims only
a pod whose key is its own pod's. Removed at the claim."""
ANNOTATION_CLAIMED_BY = f"{DOMAIN}/claimed-by"
"""On a claimed warm pod: the uid of the Trial that claimed it."""
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_NAME = "app.kubernetes.io/name"
MANAGED_BY = {LABEL_MANAGED_BY: "shipyard", LABEL_NAME: "shipyard"}

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
LABEL_QUEUE_NAME = f"{KUEUE_GROUP}/queue-name"
"""Kueue's own opt-in: a Trial or Sweep labelled with a LocalQueue is admitted by Kueue."""
LABEL_PRIORITY_CLASS = f"{KUEUE_GROUP}/priority-class"
"""Kueue's WorkloadPriorityClass of a Trial or Sweep (optional, with the queue name)."""
KUEUE_LABELS = (LABEL_QUEUE_NAME, LABEL_PRIORITY_CLASS)
"""The labels a Sweep passes on to its Trials."""

ANNOTATION_AGENT_KEY = f"{DOMAIN}/agent-key"
"""A sweep Trial's agent key, unshortened (the label may be)."""
ANNOTATION_DATASET = f"{DOMAIN}/dataset"
"""A sweep Trial's dataset: the `source` of its Harbor TrialResult."""
MODEL_ENV = "SHIPYARD_MODEL"
"""The environment variable that gives a sweep agent's model to a `command` agent."""

CANCEL_ANNOTATION = f"{DOMAIN}/cancel"
"""`kubectl annotate trial NAME shipyard.dev/cancel=true` stops a running trial and keeps its
record and logs (deleting the Trial would lose them)."""
FINALIZER = f"{DOMAIN}/operator"
OPERATOR_LEASE = "shipyard-operator"
"""The coordination.k8s.io Lease whose holder alone drives trials (`reconcile.leader`): of an
operator serving every namespace (and of the chart's pods, in their release namespace)."""
KOPF_ANNOTATION_PREFIX = DOMAIN
"""kopf keeps its progress and last-handled configuration under this prefix."""
LABEL_IMAGE_BUILD = f"{DOMAIN}/image-build"
"""The ImageBuild a build Job, its pods and its context ConfigMaps belong to."""
WATCH_ANNOTATION = f"{DOMAIN}/watch"
"""On the chart's operator pod template: the namespaces it serves (or `cluster-wide`)."""

MAX_LEASE_NAME = 253  # a DNS subdomain


def operator_lease_name(namespaces: Iterable[str]) -> str:
    """The Lease of an operator serving `namespaces` (none: every namespace), so that operators
    serving different namespaces never wait for each other's Lease, and operators serving the
    same ones elect one leader: `shipyard-operator.<ns>.<ns>...` (sorted; a namespace holds no
    dot, so no two sets share a name), or `shipyard-operator-<hash>` when that is too long."""
    served = sorted(set(namespaces))
    if not served:
        return OPERATOR_LEASE
    name = ".".join([OPERATOR_LEASE, *served])
    if len(name) <= MAX_LEASE_NAME:
        return name
    return f"{OPERATOR_LEASE}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"


class Role(StrEnum):
    """A trial pod's role: the agent environment, or a step's separate verifier."""

    ENV = "env"
    VERIFIER = "verifier"

    @property
    def component(self) -> str:
        """The pod's `app.kubernetes.io/component` label."""
        return "environment" if self is Role.ENV else "verifier"

    @property
    def noun(self) -> str:
        """How messages name the pod: "environment" or "verifier"."""
        return self.component


class Component(StrEnum):
    """`app.kubernetes.io/component` of the objects Shipyard creates."""

    ENVIRONMENT = "environment"
    VERIFIER = "verifier"
    RUNNER = "runner"
    LOGS = "logs"
    NETWORK_POLICY = "network-policy"
    NETWORK_BASELINE = "network-baseline"
    TASK_BUNDLE = "task-bundle"
    TASK_FILES = "task-files"
    """Task files a compose service binds (`./setup.json:/task/setup.json`)."""
    ARTIFACTS = "artifacts"
    WARM = "warm"
    """A warm pod not claimed yet (`docs/warm-pods.md`)."""


POD_COMPONENTS = (Component.ENVIRONMENT, Component.VERIFIER)


def cancel_requested(annotations: Mapping[str, str] | None) -> bool:
    value = (annotations or {}).get(CANCEL_ANNOTATION)
    return value is not None and value.strip().lower() not in ("", "false", "0", "no")


# ---------------------------------------------------------------- names and label values

MAX_NAME = 63  # a pod name, a label value
MAX_LABEL_VALUE = MAX_NAME

RUNNER_MOUNT = "/shipyard/bin"
RUNNER_PATH = f"{RUNNER_MOUNT}/runner"
"""Where every trial pod has the in-pod runner (the static Go runner, or
`shipyard/render/runner.sh`), which the operator's execs call (docs/runner-protocol.md)."""
RUNNER_INIT_CONTAINER = "runner"
"""The init container that copies the Go runner into the pod (`render.pod`)."""
FENCE_INIT_CONTAINER = "fence"
"""The init container that holds every container of the task's image until the pod's network
policy is in force (`render.pod.fence_init_container`)."""
SECRETS_CONTAINER = "secrets"
"""The trial pod container that alone mounts the agent's Secrets (`render.pod`)."""
PROBE_CONTAINER = "probe"
"""The trial pod container that serves the runner's idle file to the kubelet's readiness probe
(`render.pod.probe_container`)."""
PROBE_SUBDIR = "probe"
"""The folder of the pod's /shipyard scratch volume the runner keeps its `idle` file in."""
PROBE_PORT = 18461
"""Where the probe container listens (in the pod's network namespace, so a task cannot bind it:
an unusual port, outside the ephemeral range)."""


def _digest(text: str | bytes, length: int) -> str:
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()[:length]


def dns_name(name: str, suffix: str = "") -> str:
    """An RFC 1123 name of at most 63 characters, with a hash when it had to be shortened."""
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "shipyard"
    full = f"{base}-{suffix}" if suffix else base
    if len(full) <= MAX_NAME:
        return full
    digest = _digest(full, 8)
    keep = MAX_NAME - len(digest) - len(suffix) - 2
    return f"{base[:keep].rstrip('-')}-{digest}" + (f"-{suffix}" if suffix else "")


EVENT_COMPONENT = "shipyard-operator"
"""Who speaks in `kubectl describe` ("From shipyard-operator")."""


def event_name(object_name: str, uid: str, key: str) -> str:
    """The name of an Event the operator posts about an object, fixed by what it records
    (`key`): posted again by an operator restarted before its status write, it is found there
    (409) rather than added twice."""
    return f"{dns_name(object_name)}.{_digest(f'{uid}/{key}', 16)}"


def launch_key(uid: str, attempt: int, phase_id: str) -> str:
    """What a phase's launch tells the runner, which keeps it in the phase's state: a launch
    that finds the state already there is a retried one only when the keys match. Else an
    earlier phase's code made that state (e.g. an agent running as root forging a verifier's
    `done` and reward ahead of it) and the runner launches afresh. Each phase's key is its own
    (an agent sees its own launch's) and is derived from the Trial's uid, which nothing in the
    pod carries, so the same after an operator restart."""
    return _digest(f"{uid}/{attempt}/{phase_id}", 24)


def label_value(value: str) -> str:
    """A valid label value (at most 63 characters; `/` and other characters a label value
    may not hold become `_`), shortened with a hash when needed."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "_", value).strip("_.-") if value else value
    if len(value) <= MAX_NAME:
        return value
    return f"{value[:54].rstrip('-._')}-{_digest(value, 8)}"


def trial_selector(trial_name: str) -> dict[str, str]:
    """The labels that select every object of a trial: the one place a Trial's name becomes a
    label value, used by the labels of its pods and by every selector of its policies."""
    return {LABEL_TRIAL: label_value(trial_name)}


def task_selector(task_name: str) -> dict[str, str]:
    return {LABEL_TASK: label_value(task_name)}


def sweep_selector(sweep_name: str) -> dict[str, str]:
    """The labels of a Sweep's Trials."""
    return {LABEL_SWEEP: label_value(sweep_name)}


def selector_string(labels: Mapping[str, str]) -> str:
    """`k=v,k=v` for a list call's label selector."""
    return ",".join(f"{k}={v}" for k, v in labels.items())


def pod_name(trial_name: str, role: str, step_index: int | None, attempt: int) -> str:
    """`<trial>-env`, `<trial>-verifier[-s<i>]`, with `-a<n>` from the second attempt on."""
    suffix = "env" if role == Role.ENV else "verifier"
    if role != Role.ENV and step_index is not None:
        suffix += f"-s{step_index}"
    if attempt > 1:
        suffix += f"-a{attempt}"
    return dns_name(trial_name, suffix)


def workload_name(trial_name: str, uid: str, attempt: int) -> str:
    """The Kueue Workload of one attempt of a trial: fixed by the Trial's uid and the attempt,
    so an operator restarted while it waits finds it again rather than queueing twice."""
    return dns_name(trial_name, f"{_digest(uid, 5)}-a{attempt}")


def logs_configmap_name(trial_name: str) -> str:
    return dns_name(trial_name, "logs")


def artifacts_configmap_name(trial_name: str, part: int, step_index: int | None = None) -> str:
    """A part of the agent environment's artifacts: the last step's (a single-step trial's),
    kept for its separate verifier once the environment pod is gone and for the export; with
    `step_index` (1-based), an earlier step's of a multi-step trial, for the export."""
    if step_index is None:
        return dns_name(trial_name, f"artifacts-{part}")
    return dns_name(trial_name, f"artifacts-s{step_index}-{part}")


def runner_configmap_name(script: str) -> str:
    """Named by content, so every trial in a namespace shares one and upgrades never clash."""
    return f"shipyard-runner-{_digest(script, 10)}"


def runner_part_name(digest: str, index: int) -> str:
    """One of the ConfigMaps carrying the static Go runner (`render.runner_parts`), named by
    the runner's and its loader's content."""
    return f"shipyard-runner-go-{digest[:12]}-{index}"


def warm_pool_name(sweep_name: str, task_name: str) -> str:
    """The WarmPool a Sweep keeps for one of its tasks."""
    return dns_name(sweep_name, f"warm-{_digest(task_name, 8)}")


def warm_pod_prefix(pool_name: str) -> str:
    """The `generateName` of a pool's warm pods."""
    return dns_name(pool_name, "w")[:57] + "-"


def deny_all_policy_name(trial_name: str) -> str:
    return dns_name(trial_name, "net-deny")


BASELINE_DENY_POLICY = "shipyard-trial-pods-deny"
"""The namespace's shared deny-all for every trial pod (`render.network_policy`)."""
BASELINE_PUBLIC_POLICY = "shipyard-trial-pods-public"
"""The namespace's shared `public` policy, for trial pods labelled public."""


def allow_policy_name(trial_name: str, key: str) -> str:
    return dns_name(trial_name, f"net-{key}")


def fqdn_policy_name(trial_name: str, key: str) -> str:
    return dns_name(trial_name, f"fqdn-{key}")


SWEEP_PREFIX = 40


def sweep_trial_name(sweep_name: str, task: str, agent_key: str, attempt: int,
                     generation: int = 0) -> str:
    """`<sweep>-<10 hex of sha256(sweep, task, agent, attempt)>`, `-r<n>` for the n-th retry:
    the same plan slot always has the same name, so creating it twice is a 409."""
    digest = _digest("\0".join((sweep_name, task, agent_key, str(attempt))), 10)
    prefix = sweep_name[:SWEEP_PREFIX].rstrip("-.")
    return f"{prefix}-{digest}" + (f"-r{generation}" if generation else "")


def bundle_configmap_name(task_name: str, bundle: bytes) -> str:
    """`<task>-bundle-<digest>`: named by content, so a changed task changes the Task's spec."""
    keep = MAX_NAME - len("-bundle-") - 10
    return f"{task_name[:keep].rstrip('-.')}-bundle-{_digest(bundle, 10)}"


# ---------------------------------------------------------------- phases and conditions

FINISHED_PHASES = ("Completed", "Failed")
"""A Trial's `status.phase` once it is over."""
TERMINAL_CONDITIONS = ("Complete", "Failed")


def is_finished_phase(phase: str | None) -> bool:
    return phase in FINISHED_PHASES


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def condition(conditions: Iterable[Any] | None, *types: str, status: str | None = "True",
              reason: str | None = None) -> Any | None:
    """The first condition of one of `types` (with `status`, any when None, and `reason` when
    given), among API dicts or `api.models.Condition`s."""
    for c in conditions or ():
        if _get(c, "type") not in types:
            continue
        if status is not None and _get(c, "status") != status:
            continue
        if reason is not None and _get(c, "reason") != reason:
            continue
        return c
    return None


def owner_references(obj: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    """The ownerReferences of an object (as the API returns it) to objects of `kind`."""
    return [o for o in (obj.get("metadata") or {}).get("ownerReferences") or []
            if o.get("kind") == kind]


def owner_name(obj: Mapping[str, Any], kind: str) -> str | None:
    """The name of the object's (first) owner of `kind`: its Trial, its Sweep."""
    return next((o.get("name") for o in owner_references(obj, kind)), None)


def object_conditions(obj: Mapping[str, Any]) -> list[Any]:
    """`status.conditions` of an object as the API returns it."""
    return list((obj.get("status") or {}).get("conditions") or [])


# ---------------------------------------------------------------- time

def iso(when: datetime) -> str:
    """A status timestamp: RFC 3339 in UTC, to the second."""
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime | None:
    """A timestamp of a status field or of metadata; None when missing or unreadable. A time
    without a zone is taken as UTC."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
