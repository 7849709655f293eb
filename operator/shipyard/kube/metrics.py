"""The API side of the operator's metrics: every request Shipyard makes (by verb and resource,
with its latency) and every exec into a pod. Labels are bounded: verbs and resource plurals,
never an object's name."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

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


def request_labels(method: str, resource_path: str, path_params: Mapping[str, Any] | None,
                   query: Any) -> tuple[str, str]:
    """(verb, resource) of a client call: `list`/`watch` for a GET without a name, the plural
    (and `/status`, `/exec`... subresource) from the path template."""
    params = path_params or {}
    parts = [p for p in resource_path.split("/") if p]
    resource = params.get("plural") or ""
    if not resource:
        plain = [p for p in parts if not p.startswith("{")]
        resource = plain[-1] if plain else "unknown"
        if resource in ("status", "exec", "log", "scale", "eviction") and len(plain) > 1:
            resource = f"{plain[-2]}/{resource}"
    elif parts and parts[-1] in ("status", "scale"):
        resource = f"{resource}/{parts[-1]}"
    verb = VERBS.get(method.upper(), method.lower())
    if verb == "get" and "{name}" not in parts:
        watching = any(k == "watch" and str(v).lower() == "true" for k, v in (query or []))
        verb = "watch" if watching else "list"
    return verb, resource


@contextmanager
def timed_request(method: str, resource_path: str, path_params: Mapping[str, Any] | None,
                  query: Any) -> Iterator[None]:
    verb, resource = request_labels(method, resource_path, path_params, query)
    began = time.perf_counter()
    code = "error"
    try:
        yield
        code = "2xx"
    except Exception as exc:
        status = getattr(exc, "status", None)
        code = f"{status}" if isinstance(status, int) and 0 < status < 600 else "error"
        raise
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
