"""The local cluster's Kueue webhooks (hack/localcluster/kueue.py): only Kueue's own kinds and
Pods are kept (a Fail-policy webhook for Jobs that nobody serves would block every Job), called
by URL on the host, Pods only in namespaces labelled for Kueue."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HACK = Path(__file__).resolve().parents[3] / "hack" / "localcluster"


@pytest.fixture
def kueue(monkeypatch):
    monkeypatch.syspath_prepend(str(HACK))
    import kueue as module

    yield module
    sys.modules.pop("kueue", None)


def hook(name: str, group: str, resource: str) -> dict:
    return {"name": name, "failurePolicy": "Fail",
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system",
                                         "path": f"/mutate-{resource}"}},
            "rules": [{"apiGroups": [group], "resources": [resource]}]}


def test_webhooks_kept_and_pointed_at_the_host(kueue, tmp_path) -> None:
    from layout import Layout

    layout = Layout(cache=tmp_path, state=tmp_path, run=tmp_path)
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(b"CA")
    docs = [{"kind": "MutatingWebhookConfiguration",
             "metadata": {"name": "mutating-webhook-configuration"},
             "webhooks": [hook("mjob.kb.io", "batch", "jobs"),
                          hook("mworkload.kb.io", "kueue.x-k8s.io", "workloads"),
                          hook("mpod.kb.io", "", "pods")]}]
    (out,) = kueue.webhook_configurations(layout, docs)
    assert out["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    assert [h["name"] for h in out["webhooks"]] == ["mworkload.kb.io", "mpod.kb.io"]
    workload, pod = out["webhooks"]
    assert workload["clientConfig"] == {
        "url": f"https://127.0.0.1:{kueue.WEBHOOK_PORT}/mutate-workloads", "caBundle": "Q0E="}
    assert "namespaceSelector" not in workload
    assert pod["namespaceSelector"] == {"matchLabels": {"shipyard.dev/kueue-pods": "true"}}
