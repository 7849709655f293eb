"""The client's defaults (kube/client.py): a call never waits forever."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from shipyard.kube.client import REQUEST_TIMEOUT, CountingApiClient


def _timeouts(monkeypatch, **kwargs: Any) -> Any:
    seen: dict[str, Any] = {}

    def call_api(self, *args: Any, **kw: Any) -> None:
        seen.update(kw)

    monkeypatch.setattr(client.ApiClient, "call_api", call_api)
    CountingApiClient(client.Configuration()).call_api("/api/v1/pods", "GET", **kwargs)
    return seen.get("_request_timeout")


def test_a_call_without_a_timeout_gets_the_default(monkeypatch) -> None:
    assert _timeouts(monkeypatch) == REQUEST_TIMEOUT
    assert _timeouts(monkeypatch, _request_timeout=None) == REQUEST_TIMEOUT


def test_a_call_s_own_timeout_and_a_stream_s_are_kept(monkeypatch) -> None:
    assert _timeouts(monkeypatch, _request_timeout=10) == 10
    assert _timeouts(monkeypatch, _preload_content=False) is None
