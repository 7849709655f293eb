"""API request labels: verbs and resource plurals from the client's path templates (bounded:
never an object's name)."""

from __future__ import annotations

import pytest

from shipyard.kube.metrics import request_labels

NS = "/api/v1/namespaces/{namespace}"
CUSTOM = "/apis/{group}/{version}/namespaces/{namespace}/{plural}"


@pytest.mark.parametrize(("method", "path", "params", "query", "labels"), [
    ("GET", CUSTOM, {"plural": "trials"}, [("watch", True)], ("watch", "trials")),
    ("GET", CUSTOM, {"plural": "trials"}, [], ("list", "trials")),
    ("GET", CUSTOM + "/{name}", {"plural": "trials", "name": "x"}, [], ("get", "trials")),
    ("PATCH", CUSTOM + "/{name}/status", {"plural": "sweeps"}, [], ("patch", "sweeps/status")),
    ("POST", NS + "/pods", {"namespace": "n"}, [], ("create", "pods")),
    ("DELETE", NS + "/pods/{name}", {"namespace": "n", "name": "p"}, [], ("delete", "pods")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", {}, [],
     ("update", "leases")),
])
def test_request_labels(method, path, params, query, labels) -> None:
    assert request_labels(method, path, params, query) == labels
