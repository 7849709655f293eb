"""The errors of talking to the cluster, for the layers above `shipyard.kube` (which alone
imports the client library)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError as TransportError

__all__ = [
    "ApiException",
    "ConfigException",
    "TransportError",
    "api_message",
    "create_or_none",
    "describe",
    "error_body",
    "is_server_error",
    "namespace_terminating",
]


def error_body(e: ApiException, limit: int = 300) -> str:
    """The start of the apiserver's answer, for a message."""
    body = e.body.decode(errors="replace") if isinstance(e.body, bytes) else e.body
    return (body or "")[:limit]


def api_message(e: ApiException, limit: int = 1000) -> str:
    """The apiserver's own words for a refusal (its Status `message`: "pods "x" is
    forbidden: failed quota: …"), else the start of its answer."""
    try:
        body = json.loads(e.body or "")
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])[:limit]
    except (TypeError, ValueError):
        pass
    return error_body(e, limit) or f"{e.status} {e.reason}"


def create_or_none(create: Callable[..., Any], *args: Any) -> Any | None:
    """`create(*args)`'s result, or None when the object exists already (409): creates that
    are retried, repeated by another operator, or content-addressed."""
    try:
        return create(*args)
    except ApiException as e:
        if e.status != 409:
            raise
        return None


def is_server_error(e: ApiException) -> bool:
    """A 5xx: transient, worth retrying."""
    return e.status is not None and 500 <= e.status < 600


def namespace_terminating(exc: BaseException) -> bool:
    """The apiserver refused to create an object because its namespace is being deleted
    (403, cause `NamespaceTerminating`): nothing there is worth doing any more."""
    if not isinstance(exc, ApiException) or exc.status != 403:
        return False
    try:
        body = json.loads(exc.body or "{}")
        causes = (body.get("details") or {}).get("causes") or []
        return any(c.get("reason") == "NamespaceTerminating" for c in causes)
    except (TypeError, ValueError, AttributeError):
        return False


def describe(exc: BaseException) -> str | None:
    """One line for the failures that talking to a cluster brings; None for anything else."""
    if isinstance(exc, ApiException):
        message = exc.reason or ""
        try:
            body = json.loads(exc.body or "{}")
            message = body.get("message") or message
        except (TypeError, ValueError):
            pass
        if exc.status == 404 and "could not find the requested resource" in message:
            message += " (are the Shipyard CRDs installed? kubectl apply -f crds/)"
        return f"the cluster answered {exc.status}: {message}"
    if isinstance(exc, ConfigException):
        return (f"no cluster configured ({exc}); set KUBECONFIG or use --kubeconfig")
    if isinstance(exc, TransportError):
        reason = getattr(exc, "reason", None) or exc
        return f"cannot reach the cluster: {reason}"
    if isinstance(exc, ConnectionError | TimeoutError):
        return str(exc) or type(exc).__name__
    return None
