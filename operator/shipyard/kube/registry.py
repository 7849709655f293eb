"""Asking the image registry whether a tag exists (a manifest HEAD, Distribution API v2)."""

from __future__ import annotations

import urllib.error
import urllib.request

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
