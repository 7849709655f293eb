"""The API side of the operator's metrics: every request Shipyard makes (by verb and resource,
with its latency) and every exec into a pod. Labels are bounded: verbs and resource plurals,
never an object's name."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import Counter, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

API_REQUESTS = Counter(
    "shipyard_api_requests_total", "Kubernetes API requests the operator made.",
    ["verb", "resource", "code"])
API_LATENCY = Histogram(
    "shipyard_api_request_duration_seconds", "Latency of the operator's Kubernetes API requests.",
    ["verb", "resource"], buckets=LATENCY_BUCKETS)
EXEC_LATENCY = Histogram(
    "shipyard_exec_duration_seconds", "Execs into trial pods (the runner's commands), from "
    "connect to exit code.", ["result"], buckets=LATENCY_BUCKETS)

VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
SUBRESOURCES = {"status", "exec", "log", "scale", "eviction", "binding", "attach"}


def request_labels(method: str, url: str) -> tuple[str, str]:
    """(verb, resource) of a request URL: `list`/`watch` for a GET of a collection; the plural
    with its subresource (`trials/status`, `pods/exec`). Names and namespaces are dropped."""
    split = urlsplit(url)
    parts = [p for p in split.path.split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        rest = []
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    resource = rest[0] if rest else "other"
    if len(rest) >= 3 and rest[2] in SUBRESOURCES:
        resource = f"{resource}/{rest[2]}"
    verb = VERBS.get(method.upper(), "other")
    if verb == "get" and len(rest) < 2:
        verb = "watch" if "watch=true" in split.query.lower() else "list"
    return verb, resource


@contextmanager
def timed_request(method: str, url: str) -> Iterator[list[Any]]:
    """Count and time one request; the caller puts the response in the yielded list (its
    status code becomes the `code` label)."""
    verb, resource = request_labels(method, url)
    began = time.perf_counter()
    response: list[Any] = []
    code = "error"
    try:
        yield response
        status = getattr(response[0], "status", None) if response else None
        code = f"{status // 100}xx" if isinstance(status, int) else "error"
    finally:
        API_LATENCY.labels(verb, resource).observe(time.perf_counter() - began)
        API_REQUESTS.labels(verb, resource, code).inc()


@contextmanager
def timed_exec() -> Iterator[None]:
    began = time.perf_counter()
    result = "error"
    try:
        yield
        result = "ok"
    finally:
        EXEC_LATENCY.labels(result).observe(time.perf_counter() - began)
