"""A namespace of a served pattern created as the operator starts is served (handlers/operator.py).

kopf lists the namespaces, then starts a watch whose own first listing it dropped: a namespace
made between the two listings was never served until it changed (CI: a Trial made in a fresh
`t-*` namespace as the operator started had no status for 60 s)."""

from __future__ import annotations

import asyncio

from kopf._cogs.structs import references
from kopf._core.reactor import observation

from shipyard.handlers import operator  # noqa: F401  (applies the patch)


def listed(name: str, **metadata: object) -> dict:
    return {"type": None, "object": {"metadata": {"name": name, **metadata}}}


async def revise(*events: dict) -> set:
    insights = references.Insights()
    for event in events:
        await observation.process_discovered_namespace_event(
            raw_event=event, namespaces=["t-*"], insights=insights)
    return insights.namespaces


def test_a_namespace_in_the_watchs_first_listing_is_served() -> None:
    assert asyncio.run(revise(listed("t-4b8ec995"))) == {"t-4b8ec995"}


def test_only_namespaces_of_the_served_patterns_and_not_terminated_ones() -> None:
    gone = listed("t-gone", deletionTimestamp="2026-11-28T07:37:08Z")
    gone["object"]["status"] = {"conditions": [{"type": "NamespaceDeletionContentFailure"}]}
    assert asyncio.run(revise(listed("kube-system"), listed("t-new"), gone)) == {"t-new"}


def test_watch_events_still_count() -> None:
    added = {"type": "ADDED", "object": {"metadata": {"name": "t-a"}}}
    deleted = {"type": "DELETED", "object": {"metadata": {"name": "t-a"}}}
    assert asyncio.run(revise(added)) == {"t-a"}
    assert asyncio.run(revise(added, deleted)) == set()
