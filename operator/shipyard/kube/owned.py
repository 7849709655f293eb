"""Creating an object a trial owns under a name fixed by the trial's name (its pods, its logs
and artifacts ConfigMaps, its NetworkPolicies). A create that answers 409 finds either the
trial's own object (a retried create, or one an operator made before a restart) or one left by
a deleted trial of the same name, which the garbage collector has not removed yet: a Trial
deleted and applied again, or a Sweep's (whose trial names are fixed by its plan). Taking the
old one over would run the new trial in the old trial's pod, among what its agent left, or
under policies about to be collected; so it is deleted (by its uid) and made afresh. An object
under that name that no Trial owns is someone else's and is not touched: `ForeignObject`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client import V1DeleteOptions, V1Preconditions

from shipyard.kube.client import api_client
from shipyard.kube.errors import ApiException

TRIES = 5
log = logging.getLogger("shipyard.objects")


class ForeignObject(Exception):
    """An object holds the name of one of a trial's and is not a Trial's."""


def _meta(obj: Any) -> dict[str, Any]:
    raw = obj if isinstance(obj, dict) else api_client().sanitize_for_serialization(obj)
    return raw.get("metadata") or {}


def controller(meta: dict[str, Any]) -> dict[str, Any] | None:
    refs = meta.get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), refs[0] if refs else None)


def owned_by(obj: Any, uid: str) -> bool:
    """Whether `obj` (a dict or a client model) is owned by the object of `uid`."""
    return any(r.get("uid") == uid for r in _meta(obj).get("ownerReferences") or [])


def create_owned(create: Callable[[], Any], read: Callable[[], Any | None],
                 delete: Callable[[V1DeleteOptions], None], body: dict[str, Any]) -> Any | None:
    """`create()`'s result; None when the object under that name is already `body`'s owner's.
    `read()` gives the object found (None: gone meanwhile), `delete(options)` deletes it."""
    owner = controller(body["metadata"])
    assert owner is not None, "an owned object names its owner"
    what = f"{body['kind']} {body['metadata']['namespace']}/{body['metadata']['name']}"
    for _ in range(TRIES):
        try:
            return create()
        except ApiException as e:
            if e.status != 409:
                raise
        found = read()
        if found is None:
            continue  # deleted since: create again
        meta = _meta(found)
        if owned_by(found, owner["uid"]):
            return None
        theirs = controller(meta)
        if theirs is None or theirs.get("kind") != owner["kind"]:
            raise ForeignObject(
                f"{what} exists and is not this {owner['kind']}'s (owned by "
                f"{(theirs or {}).get('kind', 'nothing')}): delete it or rename the "
                f"{owner['kind']}")
        if meta.get("finalizers") and meta.get("deletionTimestamp"):
            time.sleep(1)  # held while its finalizers run: wait for it to go
            continue
        log.warning(f"{what} is left by a deleted {owner['kind']} of the same name "
                    f"(uid {theirs.get('uid')}): deleting it to make this one's")
        try:
            delete(V1DeleteOptions(grace_period_seconds=0,
                                   preconditions=V1Preconditions(uid=meta.get("uid"))))
        except ApiException as e:
            if e.status not in (404, 409):
                raise
    raise ForeignObject(f"{what} is still held by a deleted {owner['kind']}'s object after "
                        f"{TRIES} tries: delete it")
