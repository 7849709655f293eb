"""API request labels: verbs and resource plurals from the request URL (bounded: never an
object's name or namespace)."""

from __future__ import annotations

import pytest

from shipyard.kube.metrics import request_labels

API = "https://10.0.0.1:6443"
CUSTOM = f"{API}/apis/shipyard.dev/v1alpha1/namespaces/team-a/trials"


@pytest.mark.parametrize(("method", "url", "labels"), [
    ("GET", f"{CUSTOM}?watch=true&resourceVersion=5", ("watch", "trials")),
    ("GET", f"{CUSTOM}?labelSelector=a%3Db", ("list", "trials")),
    ("GET", f"{CUSTOM}/my-trial", ("get", "trials")),
    ("PATCH", f"{CUSTOM}/my-trial/status", ("patch", "trials/status")),
    ("POST", f"{API}/api/v1/namespaces/team-a/pods", ("create", "pods")),
    ("DELETE", f"{API}/api/v1/namespaces/team-a/pods/p-1", ("delete", "pods")),
    ("PUT", f"{API}/apis/coordination.k8s.io/v1/namespaces/default/leases/shipyard",
     ("update", "leases")),
    ("GET", f"{API}/api/v1/namespaces", ("list", "namespaces")),
    ("GET", f"{API}/api/v1/namespaces/team-a", ("get", "namespaces")),
    ("GET", f"{API}/version", ("list", "other")),
])
def test_request_labels(method, url, labels) -> None:
    assert request_labels(method, url) == labels
