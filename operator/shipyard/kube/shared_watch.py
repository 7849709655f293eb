"""Watches of the objects the operator makes once per namespace and process and every trial
pod there relies on (the shared NetworkPolicies, the runner's ConfigMaps): a label-selected
watch of their metadata only, that reports each deletion. Metadata only: the runner's
ConfigMaps hold about 1 MiB each, one set per namespace, and a full list of them across a
cluster's namespaces was 185 MB on the development node (as metadata, 147 KB)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

from shipyard.kube.client import api_client, core
from shipyard.kube.errors import ApiException

STREAM_SECONDS = 270
RETRY_SEC = 5.0
FORBIDDEN_RETRY_SEC = 300.0
log = logging.getLogger("shipyard.shared")


def _lister(resource: str, namespace: str | None) -> tuple[Callable[..., object], tuple[str, ...]]:
    if resource == "networkpolicies":
        net = client.NetworkingV1Api(api_client())
        if namespace is None:
            return net.list_network_policy_for_all_namespaces, ()
        return net.list_namespaced_network_policy, (namespace,)
    if namespace is None:
        return core().list_config_map_for_all_namespaces, ()
    return core().list_namespaced_config_map, (namespace,)


META_LIST = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}
META = {"Accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"}


def follow_deletions(resource: str, namespace: str | None, selector: str,
                     made: Callable[[], set[tuple[str, str]]],
                     deleted: Callable[[str, str], None], stop: threading.Event) -> None:
    """(A thread, until `stop`) `deleted(namespace, name)` for each object of `resource`
    ("networkpolicies" or "configmaps") matching `selector` that is deleted, in `namespace`
    (None: every namespace). At each (re-)list, also for what `made()` gave just before it
    and the list lacks: a deletion may have gone unseen while the watch was down."""
    lister, args = _lister(resource, namespace)

    def stream(*a: Any, **kw: Any) -> Any:  # no return type: events stay the raw metadata
        return lister(*a, **kw)

    version: str | None = None
    while not stop.is_set():
        try:
            if version is None:
                before = made()  # taken first: what is made during the list is in it
                listed = json.loads(lister(*args, label_selector=selector, _headers=META_LIST,
                                           _preload_content=False).data)
                version = listed["metadata"]["resourceVersion"]
                present = {(i["metadata"].get("namespace", ""), i["metadata"]["name"])
                           for i in listed.get("items") or []}
                for namespace_, name in sorted(before - present):
                    deleted(namespace_, name)
            for event in watch.Watch().stream(
                    stream, *args, label_selector=selector, resource_version=version,
                    timeout_seconds=STREAM_SECONDS, allow_watch_bookmarks=True,
                    _headers=META):
                # The raw object: a BOOKMARK's or an ERROR's is not the resource's model.
                raw = event.get("raw_object") or {}
                meta = raw.get("metadata") or {}
                if event["type"] == "ERROR":
                    if raw.get("code") == 410:  # expired: list again
                        version = None
                        break
                    raise RuntimeError(raw.get("message") or str(raw)[:200])
                version = meta.get("resourceVersion") or version
                if event["type"] == "DELETED":
                    deleted(meta.get("namespace", ""), meta.get("name", ""))
        except ApiException as e:
            if e.status in (401, 403):
                log.error(f"may not watch {resource} ({selector}, {e.status} {e.reason}): "
                          "one deleted is made again only by an operator restarted with the "
                          "right to (the chart's role has it)")
                stop.wait(FORBIDDEN_RETRY_SEC)
            elif e.status != 410:
                log.warning(f"watching {resource} ({selector}) failed: {e.status} {e.reason}")
                stop.wait(RETRY_SEC)
            version = None
        except Exception as e:  # a dropped connection: list and watch again
            log.warning(f"watching {resource} ({selector}) failed: {e}")
            stop.wait(RETRY_SEC)
            version = None
