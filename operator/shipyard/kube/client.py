"""The one place that configures the kubernetes client (in-cluster, else the kubeconfig), and
counts the API requests Shipyard makes (bench/ reads the count)."""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from shipyard.kube.metrics import timed_request

_lock = threading.Lock()
_count_lock = threading.Lock()
_requests = 0
POOL_SIZE = 64


REQUEST_TIMEOUT = (10, 120)
"""(connect, read) seconds for a call that names none: a connection that stalls fails the call
(its driver starts again) instead of holding its thread, and its trial, forever. Streams
(watches: `_preload_content=False`) keep theirs."""


class CountingApiClient(client.ApiClient):
    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        count_request()
        if kwargs.get("_preload_content", True) and kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = REQUEST_TIMEOUT
        method, url = (*args, None, None)[:2]
        with timed_request(str(kwargs.get("method", method) or "GET"),
                           str(kwargs.get("url", url) or "")) as response:
            response.append(super().call_api(*args, **kwargs))
            return response[0]


def count_request() -> None:
    global _requests
    with _count_lock:
        _requests += 1


def requests_made() -> int:
    """API requests made through this module's clients so far (execs included)."""
    return _requests


@cache
def configuration() -> client.Configuration:
    with _lock:
        conf = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=conf)
        except ConfigException:
            config.load_kube_config(client_configuration=conf)
        conf.connection_pool_maxsize = POOL_SIZE
        return conf


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def own_namespace() -> str:
    """The operator's namespace: its ServiceAccount's in a pod, else the kubeconfig context's,
    else `default`."""
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            if namespace := f.read().strip():
                return namespace
    except OSError:
        pass
    try:
        _, active = config.list_kube_config_contexts()
        return (active or {}).get("context", {}).get("namespace") or "default"
    except (ConfigException, OSError):
        return "default"


@cache
def api_client() -> client.ApiClient:
    return CountingApiClient(configuration())


def core() -> client.CoreV1Api:
    return client.CoreV1Api(api_client())


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client())
