"""The one status writer of Trials, Sweeps, ImageBuilds and Tasks: the Events that explain a
change first, then the status, in one call (run it in a thread), so that a reader who sees a
status finds its Events. When to write is `reconcile.write_policy`'s; what was written last is
remembered here, and a write of the same status with no Event costs no request (coalescing).

Events are named by what they record (`api.conventions.event_name`): an operator killed
between an Event and its status takes the transition again and finds the Event there (409),
so each is posted once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shipyard.api.conventions import event_name
from shipyard.kube import events as kube_events
from shipyard.kube import objects
from shipyard.reconcile.write_policy import unchanged

PendingEvent = tuple[str, str, str, str]  # name, type, reason, message


def named(obj: Mapping[str, Any], type_: str, reason: str, message: str, key: str
          ) -> PendingEvent:
    """An Event about `obj`, named by what it records (`key`)."""
    meta = obj["metadata"]
    return event_name(meta["name"], meta.get("uid") or "", key), type_, reason, message


class StatusWriter:
    """The writes of one resource's status. `written`: the status on record (API dicts), when
    known; `patch`: how the status is written (default: a merge-patch of the subresource)."""

    def __init__(self, obj: Mapping[str, Any], plural: str, written: Any = None,
                 patch: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.obj, self.plural, self.written = obj, plural, written
        meta = obj["metadata"]
        self.patch = patch or (lambda status: objects.patch_status(
            plural, meta["namespace"], meta["name"], status))

    def write(self, status: dict[str, Any] | None, events: Sequence[PendingEvent] = ()
              ) -> bool:
        """(Blocking) the Events, then `status` unless it is None or already on record; True
        when anything was written."""
        if status is None or unchanged(self.written, status):
            status = None
        if not events and status is None:
            return False
        if events:
            kube_events.post_events(dict(self.obj), list(events))
        if status is not None:
            self.patch(status)
            self.written = status
        return True
