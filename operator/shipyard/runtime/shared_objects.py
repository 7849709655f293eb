"""The objects a namespace's trial pods share, kept while the operator runs (docs/trust.md,
"Shared objects"): the namespace's baseline NetworkPolicies, which keep every `public` trial
pod out of the cluster, and the runner's ConfigMaps, which every trial pod mounts. The
operator makes them once per process and namespace (one request, not one per trial); a
deletion (a user's cleanup, a namespace deleted and made again) is seen by a label-selected
watch and makes them again at once where this operator runs trials, else before the next
trial there (a watch listed again compares what it lists with what was made). Without
this, the next `public` trial of a namespace whose baseline was deleted ran with no policy
at all: the apiserver, the metadata server and every pod were open to it."""

from __future__ import annotations

import logging
import threading

from shipyard.api.conventions import LABEL_COMPONENT, MANAGED_BY, Component, selector_string
from shipyard.kube import network as kube_network
from shipyard.kube import objects
from shipyard.kube.errors import ApiException
from shipyard.kube.shared_watch import follow_deletions
from shipyard.render.pod import build_runner_configmap
from shipyard.runtime import config, runner_files, trial_tasks

log = logging.getLogger("shipyard.shared")
_stop = threading.Event()


def start(namespaces: list[str]) -> None:
    """One watch thread per kind and namespace served; one over all namespaces when none is
    named or a name is a pattern (`team-*`, `!shipyard-*`)."""
    _stop.clear()
    patterns = not namespaces or any(c in ns for ns in namespaces for c in "*?[!")
    served: list[str | None] = [None] if patterns else list(namespaces)
    for resource, component, made, deleted in (
            ("networkpolicies", Component.NETWORK_BASELINE, policies_made, policy_deleted),
            ("configmaps", Component.RUNNER, configmaps_made, configmap_deleted)):
        selector = selector_string({**MANAGED_BY, LABEL_COMPONENT: component.value})
        for namespace in served:
            threading.Thread(target=follow_deletions, daemon=True,
                             name=f"shared {resource} {namespace or '*'}",
                             args=(resource, namespace, selector, made, deleted,
                                   _stop)).start()


def stop() -> None:
    _stop.set()


def policy_deleted(namespace: str, name: str) -> None:
    objects_ = kube_network.forget_baseline(namespace)
    if objects_ is None or not trial_tasks.serves(namespace):
        return
    log.warning(f"NetworkPolicy {namespace}/{name} of the namespace's baseline was deleted "
                "while trials run there: making it again")
    try:
        kube_network.ensure_namespace_baseline(objects_)
    except ApiException as e:  # the namespace is going: its trials go with it
        log.warning(f"could not make the baseline of {namespace} again: {e.status} {e.reason}")


def policies_made() -> set[tuple[str, str]]:
    return {(ns, name) for ns, names in kube_network.baseline_names().items()
            for name in names}


def configmap_deleted(namespace: str, name: str) -> None:
    objects.forget_configmap(namespace, name)
    runner_files.forget(namespace)
    if not trial_tasks.serves(namespace):
        return
    log.warning(f"the runner's ConfigMap {namespace}/{name} was deleted while trials run "
                "there: making it again")
    try:
        objects.ensure_configmap_once(build_runner_configmap(namespace))
        runner_files.ensure_runner(config.current(), namespace)
    except ApiException as e:
        log.warning(f"could not make the runner's ConfigMaps of {namespace} again: "
                    f"{e.status} {e.reason}")


def configmaps_made() -> set[tuple[str, str]]:
    return set(objects.ensured_configmaps())
