"""Reading an image's ENTRYPOINT from a registry (Distribution API v2), against a small real
HTTP registry in a thread: an index, a bearer-token challenge, mirrors, bad documents."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from shipyard.kube.registry import ImageRef, RegistryAccess, image_config

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"


def test_references_are_read_as_a_container_runtime_reads_them() -> None:
    assert ImageRef.parse("python:3.12-slim") == ImageRef("docker.io", "library/python",
                                                          "3.12-slim")
    assert ImageRef.parse("ubuntu") == ImageRef("docker.io", "library/ubuntu", "latest")
    assert ImageRef.parse("org/app:1") == ImageRef("docker.io", "org/app", "1")
    assert ImageRef.parse("ghcr.io/o/x") == ImageRef("ghcr.io", "o/x", "latest")
    assert ImageRef.parse("127.0.0.1:5055/a/b:t") == ImageRef("127.0.0.1:5055", "a/b", "t")
    assert ImageRef.parse("localhost/x:1") == ImageRef("localhost", "x", "1")
    digest = "sha256:" + "a" * 64
    assert ImageRef.parse(f"r.io/x:1@{digest}") == ImageRef("r.io", "x", digest)


class Registry:
    """Blobs and manifests by repository; `token` set: anonymous bearer auth as Docker Hub's."""

    def __init__(self) -> None:
        self.docs: dict[str, tuple[str, bytes]] = {}
        self.token: str | None = None
        self.delay = 0.0
        self.requests: list[tuple[str, str]] = []

    def put(self, path: str, media: str, doc: Any) -> str:
        body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        self.docs[path] = (media, body)
        return digest

    def image(self, repo: str, tag: str, config: dict[str, Any], index: bool = True) -> None:
        cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": config}).encode()
        cfg_digest = "sha256:" + hashlib.sha256(cfg).hexdigest()
        self.docs[f"/v2/{repo}/blobs/{cfg_digest}"] = (CONFIG, cfg)
        manifest = {"schemaVersion": 2, "mediaType": MANIFEST, "layers": [],
                    "config": {"mediaType": CONFIG, "digest": cfg_digest, "size": len(cfg)}}
        if not index:
            self.put(f"/v2/{repo}/manifests/{tag}", MANIFEST, manifest)
            return
        body = json.dumps(manifest).encode()
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        self.docs[f"/v2/{repo}/manifests/{digest}"] = (MANIFEST, body)
        self.put(f"/v2/{repo}/manifests/{tag}", INDEX, {
            "schemaVersion": 2, "mediaType": INDEX, "manifests": [
                {"mediaType": MANIFEST, "digest": "sha256:" + "0" * 64, "size": 1,
                 "platform": {"os": "linux", "architecture": "arm64"}},
                {"mediaType": MANIFEST, "digest": digest, "size": len(body),
                 "platform": {"os": "linux", "architecture": "amd64"}}]})


@pytest.fixture
def registry() -> Iterator[tuple[Registry, str]]:
    state = Registry()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            state.requests.append((self.path, self.headers.get("Authorization", "")))
            time.sleep(state.delay)
            if self.path.startswith("/token"):
                self._send(200, "application/json", json.dumps({"token": "t0k"}).encode())
                return
            if state.token and self.headers.get("Authorization") != f"Bearer {state.token}":
                self.send_response(401)
                host = f"http://{self.headers['Host']}"
                self.send_header("WWW-Authenticate", f'Bearer realm="{host}/token",'
                                 'service="reg",scope="repository:x:pull"')
                self.end_headers()
                return
            doc = state.docs.get(self.path)
            if doc is None:
                self._send(404, "application/json", b"{}")
            else:
                self._send(200, *doc)

        def _send(self, code: int, media: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_an_images_entrypoint_is_read_through_its_index(registry: tuple[Registry, str]) -> None:
    state, host = registry
    state.image("team/app", "1", {"Entrypoint": ["/entry.sh"], "Cmd": ["serve"]})
    state.image("team/plain", "2", {"Cmd": ["/bin/bash"]}, index=False)
    access = RegistryAccess({}, frozenset({host}))
    got = image_config(f"{host}/team/app:1", access)
    assert got is not None and got.entrypoint == ("/entry.sh",) and got.cmd == ("serve",)
    plain = image_config(f"{host}/team/plain:2", access)
    assert plain is not None and plain.entrypoint == ()
    assert image_config(f"{host}/team/none:1", access) is None


def test_a_mirror_serves_docker_hub_and_a_token_is_fetched_when_asked(
        registry: tuple[Registry, str]) -> None:
    """`python:3.12` is read from the nodes' mirror (path-preserving, as containerd's), and a
    registry that answers 401 with a bearer challenge is asked again with its token."""
    state, host = registry
    state.image("library/python", "3.12", {"Entrypoint": None, "Cmd": ["python3"]})
    state.image("ghcr.io/o/x", "1", {"Entrypoint": ["tini", "--"]})
    state.token = "t0k"
    access = RegistryAccess({"docker.io": host, "ghcr.io": f"{host}/ghcr.io"},
                            frozenset({host}))
    got = image_config("python:3.12", access)
    assert got is not None and got.entrypoint == () and got.cmd == ("python3",)
    ghcr = image_config("ghcr.io/o/x:1", access)
    assert ghcr is not None and ghcr.entrypoint == ("tini", "--")
    assert ("/token?service=reg&scope=repository%3Ax%3Apull", "") in state.requests


def test_what_is_not_an_images_config_is_unknown_never_an_error(
        registry: tuple[Registry, str]) -> None:
    state, host = registry
    access = RegistryAccess({}, frozenset({host}))
    state.put("/v2/bad/json/manifests/1", MANIFEST, b"{not json")
    state.put("/v2/bad/shape/manifests/1", MANIFEST, {"config": "nope"})
    state.image("bad/types", "1", {"Entrypoint": "sh -c x"})
    state.put("/v2/bad/big/manifests/1", MANIFEST, b" " * (5 << 20))
    state.put("/v2/bad/arm/manifests/1", INDEX, {"manifests": [
        {"digest": "sha256:" + "1" * 64, "platform": {"os": "linux", "architecture": "arm64"}}]})
    for repo in ("json", "shape", "types", "big", "arm"):
        assert image_config(f"{host}/bad/{repo}:1", access) is None, repo
    # No registry there: unknown, quickly.
    assert image_config("127.0.0.1:9/x:1", RegistryAccess({}, frozenset({"127.0.0.1:9"}))) is None


def test_a_slow_registry_has_its_time_in_all_not_per_request(
        registry: tuple[Registry, str]) -> None:
    """A task's own registry may answer each request just before the timeout: the read as a
    whole gets `timeout` seconds, then the image is unknown."""
    state, host = registry
    state.image("slow/app", "1", {"Entrypoint": ["/e"]})
    state.delay = 0.4
    access = RegistryAccess({}, frozenset({host}))
    began = time.monotonic()
    assert image_config(f"{host}/slow/app:1", access, timeout=1.0) is None
    assert time.monotonic() - began < 1.6
    state.delay = 0.0
    assert image_config(f"{host}/slow/app:1", access, timeout=1.0) is not None
