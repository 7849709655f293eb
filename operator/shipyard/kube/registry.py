"""Asking an image registry (Distribution API v2) whether a tag exists (a manifest HEAD) and
what an image runs when its container starts (its config's ENTRYPOINT and CMD)."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ACCEPT = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])


class RegistryUnavailable(Exception):
    pass


def split_ref(ref: str) -> tuple[str, str, str]:
    """`host[:port]/repo/path:tag` → (host, repo, tag)."""
    host, _, rest = ref.partition("/")
    repo, _, tag = rest.rpartition(":")
    return host, repo, tag or "latest"


def manifest_digest(ref: str, insecure: bool, timeout: float = 5.0) -> str | None:
    """The tag's digest, None when the registry does not have it (404, or a registry that
    wants credentials the operator does not hold: then the build Job, which has them, builds
    and its registry cache keeps that cheap). RegistryUnavailable when it does not answer."""
    host, repo, tag = split_ref(ref)
    scheme = "http" if insecure else "https"
    request = urllib.request.Request(f"{scheme}://{host}/v2/{repo}/manifests/{tag}",
                                     method="HEAD", headers={"Accept": ACCEPT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.headers.get("Docker-Content-Digest") or "unknown"
    except urllib.error.HTTPError as e:
        if e.code in (401, 403, 404):
            return None
        raise RegistryUnavailable(f"HEAD {host}/{repo}:{tag}: HTTP {e.code}") from e
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        reason = getattr(e, "reason", e)
        raise RegistryUnavailable(f"{host}: {reason}") from e


# ---------------------------------------------------------------- an image's config

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
MAX_DOCUMENT = 4 << 20
"""A manifest, an index or a config larger than this is not read (none is near it)."""
CONFIG_MEDIA = ("application/vnd.oci.image.config.v1+json",
                "application/vnd.docker.container.image.v1+json")


@dataclass(frozen=True)
class ImageRef:
    """A reference as a container runtime reads it: `python:3.12` is
    docker.io/library/python:3.12."""

    host: str
    repository: str
    reference: str  # a tag, or a digest (sha256:…)

    @classmethod
    def parse(cls, ref: str) -> ImageRef:
        name, digest = ref.split("@", 1) if "@" in ref else (ref, "")
        first, slash, rest = name.partition("/")
        if not slash or ("." not in first and ":" not in first and first != "localhost"):
            first, rest = DOCKER_HUB, name
        repository, tag = rest, "latest"
        last_colon = rest.rfind(":")
        if last_colon > rest.rfind("/"):
            repository, tag = rest[:last_colon], rest[last_colon + 1:]
        if first == DOCKER_HUB and "/" not in repository:
            repository = f"library/{repository}"
        return cls(first, repository, digest or tag)


@dataclass(frozen=True)
class ImageConfig:
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]


@dataclass(frozen=True)
class RegistryAccess:
    """How the operator reaches registries: path-preserving mirrors as containerd's
    (`docker.io` → `mirror:5000` serves docker.io/library/x as mirror:5000/library/x), tried
    before the registry itself, and the hosts spoken to over plain HTTP."""

    mirrors: Mapping[str, str] = field(default_factory=dict)
    insecure: frozenset[str] = frozenset()
    platform: tuple[str, str] = ("linux", "amd64")


def image_config(ref: str, access: RegistryAccess, timeout: float = 5.0) -> ImageConfig | None:
    """The image's ENTRYPOINT and CMD from its registry (anonymously, or None: not found, a
    registry that wants credentials or does not answer, a document that is not an image's),
    within `timeout` seconds in all (a task's registry may answer slowly on purpose)."""
    parsed = ImageRef.parse(ref)
    deadline = time.monotonic() + timeout
    for host, repository in _sources(parsed, access):
        scheme = "http" if host in access.insecure else "https"
        session = _Session(f"{scheme}://{host}/v2/{repository}", deadline)
        try:
            config = _read_config(session, parsed.reference, access.platform)
        except (urllib.error.URLError, OSError, TimeoutError, ValueError, KeyError, TypeError,
                AttributeError):  # a document that is not what it should be
            continue
        if config is not None:
            return config
    return None


def _sources(ref: ImageRef, access: RegistryAccess) -> list[tuple[str, str]]:
    sources = []
    mirror = access.mirrors.get(ref.host)
    if mirror:
        host, _, prefix = mirror.partition("/")
        sources.append((host, f"{prefix}/{ref.repository}" if prefix else ref.repository))
    sources.append((DOCKER_HUB_API if ref.host == DOCKER_HUB else ref.host, ref.repository))
    return sources


class _KeepTokenHome(urllib.request.HTTPRedirectHandler):
    """A blob's GET is redirected to storage (a CDN's signed URL), which must not get the
    registry's token."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                         headers: Any, newurl: str) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != req.host:
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_KeepTokenHome)


class _Session:
    """GETs under one repository's API root, with an anonymous bearer token fetched once when
    the registry asks for one (Docker Hub, ghcr.io, quay.io)."""

    def __init__(self, root: str, deadline: float) -> None:
        self.root, self.deadline, self.token = root, deadline, ""

    @property
    def timeout(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the registry's time is up")
        return left

    def get(self, path: str, accept: str) -> tuple[str, bytes] | None:
        for attempt in (0, 1):
            headers = {"Accept": accept}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            request = urllib.request.Request(f"{self.root}/{path}", headers=headers)
            try:
                with _OPENER.open(request, timeout=self.timeout) as resp:
                    body = resp.read(MAX_DOCUMENT + 1)
                    if len(body) > MAX_DOCUMENT:
                        return None
                    return resp.headers.get("Content-Type", ""), body
            except urllib.error.HTTPError as e:
                challenge = e.headers.get("WWW-Authenticate", "") if e.code == 401 else ""
                if attempt == 0 and challenge.lower().startswith("bearer "):
                    self.token = self._token(challenge)
                    if self.token:
                        continue
                return None
        return None

    def _token(self, challenge: str) -> str:
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", "")
        if not realm.startswith(("https://", "http://")):  # never file: or another scheme
            return ""
        url = realm + "?" + urllib.parse.urlencode(
            {k: v for k, v in params.items() if k in ("service", "scope")})
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as resp:
                answer = json.loads(resp.read(MAX_DOCUMENT))
        except (urllib.error.URLError, OSError, TimeoutError, ValueError):
            return ""
        token = answer.get("token") or answer.get("access_token") if isinstance(
            answer, dict) else ""
        return token if isinstance(token, str) else ""


def _read_config(session: _Session, reference: str, platform: tuple[str, str]
                 ) -> ImageConfig | None:
    got = session.get(f"manifests/{reference}", ACCEPT)
    if got is None:
        return None
    manifest = json.loads(got[1])
    if "manifests" in manifest:  # an index: the platform's manifest
        chosen = pick_platform(manifest["manifests"], platform)
        if chosen is None:
            return None
        got = session.get(f"manifests/{chosen}", ACCEPT)
        if got is None:
            return None
        manifest = json.loads(got[1])
    descriptor = manifest["config"]
    if descriptor.get("mediaType") not in CONFIG_MEDIA:
        return None
    got = session.get(f"blobs/{descriptor['digest']}", ", ".join(CONFIG_MEDIA))
    return None if got is None else config_of(json.loads(got[1]))


def pick_platform(manifests: list[dict[str, Any]], platform: tuple[str, str]) -> str | None:
    """The digest of the index's manifest for `platform` (os, architecture)."""
    for entry in manifests:
        p = entry.get("platform") or {}
        if (p.get("os"), p.get("architecture")) == platform:
            return str(entry["digest"])
    return None


def config_of(document: dict[str, Any]) -> ImageConfig:
    """ENTRYPOINT and CMD of an image config document (absent or null: none)."""
    config = document.get("config") or {}

    def argv(key: str) -> tuple[str, ...]:
        value = config.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"config.{key} is not a list of strings")
        return tuple(value)

    return ImageConfig(argv("Entrypoint"), argv("Cmd"))
