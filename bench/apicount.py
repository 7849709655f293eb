#!/usr/bin/env python3
"""Run a Python program and count the Kubernetes API requests it makes, by verb and resource.

    python bench/apicount.py OUT.json -m MODULE [ARGS...]

Counts every request of the `kubernetes` client (REST calls and exec/attach websockets) and of
aiohttp (kopf's client: its patches, Events and watches), then writes
``{"watch pods": 1, "create pods/exec": 30, ...}`` to OUT.json at exit and every second.
Counted in the process itself, so the figures are exact however busy the machine or the
cluster is (the apiserver's own metrics count every client on a shared cluster). Runs under
any Python that has the clients installed (the bench's Harbor venv too).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import runpy
import sys
import threading
from collections import Counter
from urllib.parse import parse_qs, urlsplit

_counts: Counter[str] = Counter()
_lock = threading.Lock()
_NAMESPACED = re.compile(r"^/(?:api/v1|apis/[^/]+/[^/]+)(?:/namespaces/[^/]+)?/(.*)$")


def classify(method: str, url: str) -> str:
    """`verb resource[/subresource]` of one request, as the apiserver's metrics name them."""
    parts = urlsplit(str(url))
    match = _NAMESPACED.match(parts.path)
    if match is None:
        return f"{method.lower()} discovery"
    rest = [p for p in match.group(1).split("/") if p]
    resource = rest[0]
    named = len(rest) >= 2
    if len(rest) >= 3:
        resource += "/" + rest[2]
    method = method.upper()
    watching = parse_qs(parts.query).get("watch", ["false"])[0] in ("true", "1")
    verb = {
        "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete",
    }.get(method, "watch" if watching else ("get" if named else "list"))
    if resource.endswith(("/exec", "/attach", "/portforward")):
        verb = "create"  # the apiserver counts a websocket upgrade of exec as a create
    return f"{verb} {resource}"


def count(method: str, url: str) -> None:
    with _lock:
        _counts[classify(method, url)] += 1


def _patch_kubernetes() -> None:
    try:
        from kubernetes.client import rest
        from kubernetes.stream import ws_client
    except ImportError:
        return
    request = rest.RESTClientObject.request

    def counted_request(self, method, url, *args, **kwargs):
        count(method, url)
        return request(self, method, url, *args, **kwargs)

    rest.RESTClientObject.request = counted_request
    create_websocket = ws_client.create_websocket

    def counted_websocket(configuration, url, headers=None):
        count("POST", url)
        return create_websocket(configuration, url, headers)

    ws_client.create_websocket = counted_websocket


def _patch_aiohttp() -> None:
    try:
        import aiohttp
    except ImportError:
        return
    request = aiohttp.ClientSession._request

    async def counted_request(self, method, str_or_url, *args, **kwargs):
        params = kwargs.get("params")
        url = str(str_or_url)
        if params:
            url += ("&" if "?" in url else "?") + "&".join(f"{k}={v}" for k, v in
                                                          dict(params).items())
        count(method, url)
        return await request(self, method, str_or_url, *args, **kwargs)

    aiohttp.ClientSession._request = counted_request


def _writer(path: str) -> None:
    last: dict[str, int] | None = None

    def write() -> None:
        nonlocal last
        with _lock:
            snapshot = dict(_counts)
        if snapshot != last:
            tmp = f"{path}.tmp"
            with open(tmp, "w") as f:
                json.dump(snapshot, f, indent=1, sort_keys=True)
            os.replace(tmp, path)
            last = snapshot

    def loop() -> None:
        while True:
            threading.Event().wait(1.0)
            write()

    threading.Thread(target=loop, daemon=True).start()
    atexit.register(write)


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        sys.exit(__doc__)
    out, module = sys.argv[1], sys.argv[3]
    _patch_kubernetes()
    _patch_aiohttp()
    _writer(out)
    sys.argv = [module, *sys.argv[4:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
