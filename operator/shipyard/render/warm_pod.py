"""Pure builders for warm pods (`docs/warm-pods.md`): the spec a trial's environment pod would
have less what is per trial, its fit (`warm_key`), the pod a WarmPool creates and the patch
that claims it for a trial."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from shipyard.api.conventions import (
    ANNOTATION_CLAIMED_BY,
    LABEL_COMPONENT,
    LABEL_NETWORK,
    LABEL_TASK,
    LABEL_TRIAL,
    LABEL_WARM_KEY,
    LABEL_WARM_POOL,
    MANAGED_BY,
    Component,
    Role,
    label_value,
    warm_pod_prefix,
)
from shipyard.plan.phases import TrialPlan
from shipyard.render.pod import Runner, build_trial_pod, owner_reference, trial_labels


def warm_spec(trial: dict[str, Any], plan: TrialPlan, probe_image: str | None,
              runner: Runner = None) -> dict[str, Any]:
    """The environment pod's spec as a warm pod has it: without the agent's Secret volumes
    (delivered at the claim, `kube.warm_pods.deliver_secrets`). The `secrets` container stays
    where the trial has Secrets (a pod without is one container start cheaper): trials with
    and without Secrets have different keys."""
    spec = copy.deepcopy(build_trial_pod(trial, plan, Role.ENV, None, "warm", probe_image,
                                         runner)["spec"])
    secret_volumes = {v["name"] for v in spec.get("volumes", []) if "secret" in v}
    spec["volumes"] = [v for v in spec.get("volumes", []) if v["name"] not in secret_volumes]
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        c["volumeMounts"] = [m for m in c.get("volumeMounts", [])
                             if m["name"] not in secret_volumes]
    return spec


def warm_key(spec: dict[str, Any]) -> str:
    """The fit of a warm pod: the digest of its spec. Anything that differs (image digest,
    resources, agent bundles, node selectors, the runner) makes another key."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def build_warm_pod(pool: dict[str, Any], task: str, spec: dict[str, Any], key: str
                   ) -> dict[str, Any]:
    """A pool's warm pod: owned by its pool, under the namespace's deny-all (the empty trial
    label selects it; no network label lets anything out) until a trial claims it."""
    meta = pool["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": warm_pod_prefix(meta["name"]),
            "namespace": meta["namespace"],
            "labels": {**MANAGED_BY, LABEL_COMPONENT: Component.WARM.value, LABEL_TRIAL: "",
                       LABEL_TASK: label_value(task), LABEL_WARM_POOL: label_value(meta["name"]),
                       LABEL_WARM_KEY: key},
            "ownerReferences": [{"apiVersion": pool["apiVersion"], "kind": pool["kind"],
                                 "name": meta["name"], "uid": meta["uid"],
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": copy.deepcopy(spec),
    }


def claim_patch(trial: dict[str, Any], plan: TrialPlan, pod: dict[str, Any]
                ) -> list[dict[str, Any]]:
    """The JSON patch that makes a warm pod the trial's environment pod, under the pod's
    resourceVersion (a pod changed or claimed meanwhile answers 409): the trial's labels and
    network baseline, the trial as its only owner, the claim recorded in an annotation."""
    meta = pod["metadata"]
    labels = dict(trial_labels(trial, Role.ENV.component))
    if plan.network is not None:
        labels[LABEL_NETWORK] = plan.network.baseline(Role.ENV, None)
    ops: list[dict[str, Any]] = [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
        {"op": "replace", "path": "/metadata/ownerReferences", "value": [owner_reference(trial)]},
    ]
    ops += [{"op": "add", "path": f"/metadata/labels/{_pointer(k)}", "value": v}
            for k, v in labels.items()]
    if LABEL_WARM_KEY in (meta.get("labels") or {}):
        ops.append({"op": "remove", "path": f"/metadata/labels/{_pointer(LABEL_WARM_KEY)}"})
    uid = trial["metadata"].get("uid") or ""
    if meta.get("annotations"):
        ops.append({"op": "add", "path": f"/metadata/annotations/{_pointer(ANNOTATION_CLAIMED_BY)}",
                    "value": uid})
    else:
        ops.append({"op": "add", "path": "/metadata/annotations",
                    "value": {ANNOTATION_CLAIMED_BY: uid}})
    return ops


def _pointer(key: str) -> str:
    """A map key as a JSON pointer segment."""
    return key.replace("~", "~0").replace("/", "~1")
