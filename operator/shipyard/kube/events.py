"""Events with names of their own (`api.conventions.event_name`): posted once, however often a
restarted operator posts them again."""

from __future__ import annotations

import logging
import socket
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.rest import ApiException

from shipyard.api.conventions import EVENT_COMPONENT, event_name, iso
from shipyard.kube.client import core
from shipyard.kube.errors import is_server_error

log = logging.getLogger(__name__)
MAX_MESSAGE = 1024


def post_events(obj: dict[str, Any], events: list[tuple[str, str, str, str]]) -> None:
    """Create each (name, type, reason, message) Event about `obj`; one that exists already
    is left as it is. A refused Event is logged (Events are auxiliary); an apiserver that does
    not answer raises, as any write does (the caller takes its transition again)."""
    meta = obj["metadata"]
    ref = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta["name"],
           "namespace": meta["namespace"], "uid": meta.get("uid")}
    for name, type_, reason, message in events:
        now = iso(datetime.now(UTC))
        body = {"metadata": {"name": name, "namespace": meta["namespace"]},
                "involvedObject": ref, "type": type_, "reason": reason,
                "message": message[:MAX_MESSAGE], "count": 1,
                "firstTimestamp": now, "lastTimestamp": now,
                "source": {"component": EVENT_COMPONENT},
                "reportingComponent": EVENT_COMPONENT, "reportingInstance": socket.gethostname()}
        try:
            core().create_namespaced_event(meta["namespace"], body)
        except ApiException as e:
            if is_server_error(e):
                raise
            if e.status != 409:
                log.warning(f"could not post Event {reason} about {meta['name']}: "
                            f"{e.status} {e.reason}")


def post_event(obj: dict[str, Any], type_: str, reason: str, message: str, key: str) -> None:
    """One Event about `obj`, named by what it records (`key`), posted now: a reader who then
    sees the status it explains finds it (kopf's queued Events may come seconds later)."""
    name = event_name(obj["metadata"]["name"], obj["metadata"].get("uid") or "", key)
    post_events(obj, [(name, type_, reason, message)])
