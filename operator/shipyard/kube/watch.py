"""Following one custom object (a Trial) as it changes: one GET, then a watch from its
resourceVersion, re-listed when the watch expires. Used by the CLI's `--watch`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from kubernetes import watch
from kubernetes.client.rest import ApiException

from shipyard.api.models import GROUP, VERSION
from shipyard.kube.client import custom

STREAM_SECONDS = 50  # each watch request; renewed from the last resourceVersion


class ObjectGone(Exception):
    """The object was deleted while it was followed."""


def follow(plural: str, namespace: str, name: str, timeout: float | None = None,
           heartbeat: float | None = None) -> Iterator[dict[str, Any]]:
    """Yield the object now and after each change, and again (unchanged) at least every
    `heartbeat` seconds when given, so that the caller can judge a silence. Stops when the
    caller stops iterating; raises ObjectGone when it is deleted and TimeoutError after
    `timeout` seconds."""
    api = custom()
    deadline = None if timeout is None else time.monotonic() + timeout
    version: str | None = None
    obj: dict[str, Any] = {}
    while True:
        if version is None:
            try:
                obj = api.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
            except ApiException as e:
                if e.status == 404:
                    raise ObjectGone(f"{plural[:-1]} {namespace}/{name} not found") from None
                raise
            version = obj["metadata"]["resourceVersion"]
            yield obj
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise TimeoutError(f"{plural[:-1]} {name} did not finish within {timeout:g}s")
        seconds = STREAM_SECONDS if heartbeat is None else max(1, int(heartbeat))
        if remaining is not None:
            seconds = max(1, min(seconds, int(remaining)))
        stream = watch.Watch().stream(
            api.list_namespaced_custom_object, GROUP, VERSION, namespace, plural,
            field_selector=f"metadata.name={name}", resource_version=version,
            timeout_seconds=seconds, allow_watch_bookmarks=True,
        )
        try:
            for event in stream:
                item = event["raw_object"] if "raw_object" in event else event["object"]
                if event["type"] == "BOOKMARK":
                    version = item["metadata"]["resourceVersion"]
                    continue
                if event["type"] == "DELETED":
                    raise ObjectGone(f"{plural[:-1]} {namespace}/{name} was deleted")
                obj = item
                version = obj["metadata"]["resourceVersion"]
                yield obj
        except ApiException as e:
            if e.status != 410:  # expired: list again
                raise
            version = None
            continue
        if heartbeat is not None:
            yield obj
