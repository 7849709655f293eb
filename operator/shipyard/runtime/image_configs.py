"""What a task's images run when their container starts (each image's ENTRYPOINT), read from
their registries and kept, so that a pod's fence can run before it (`render.pod`): the main
container's command becomes the runner's fence followed by the image's ENTRYPOINT. An image
whose config cannot be read (a private registry, no answer) is fenced by an init container.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from shipyard.kube.registry import RegistryAccess, image_config
from shipyard.runtime.images import image_settings

KNOWN_SEC = 3600.0
"""A tag's ENTRYPOINT is read again after this (a tag may move; a digest never does)."""
UNKNOWN_SEC = 300.0
"""An image whose config could not be read is tried again after this."""
MAX_ENTRIES = 4096
MAX_ENTRYPOINT = 16384
"""An ENTRYPOINT longer than this (in bytes) counts as unknown."""
READ_SEC = 5.0
"""One image's read in all; trials asking meanwhile wait at most this long (and a second)."""

_cache: dict[str, tuple[float, tuple[str, ...] | None]] = {}
_locks: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def entrypoints(refs: Iterable[str | None]) -> dict[str, tuple[str, ...]]:
    """Each image's ENTRYPOINT (empty: none) by reference, for those whose config could be
    read; one registry read per image at a time, however many trials ask."""
    settings = image_settings()
    access = RegistryAccess(dict(settings.mirrors), settings.plain_http_hosts())
    found = {}
    for ref in sorted({r for r in refs if r}):
        entrypoint = _entrypoint(ref, access)
        if entrypoint is not None:
            found[ref] = entrypoint
    return found


def _entrypoint(ref: str, access: RegistryAccess) -> tuple[str, ...] | None:
    cached = _cache.get(ref)
    if cached is not None and cached[0] > time.monotonic():
        return cached[1]
    with _guard:
        lock = _locks.setdefault(ref, threading.Lock())
    if not lock.acquire(timeout=READ_SEC + 1):
        return None  # another thread's read is slow: unknown (an init container fences it)
    try:
        cached = _cache.get(ref)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        config = image_config(ref, access, READ_SEC)
        entrypoint = None if config is None else config.entrypoint
        if entrypoint is not None and sum(len(a) + 1 for a in entrypoint) > MAX_ENTRYPOINT:
            entrypoint = None  # not copied into a pod's spec: the init container fences it
        keep = (UNKNOWN_SEC if config is None
                else float("inf") if "@" in ref else KNOWN_SEC)
        with _guard:
            if len(_cache) >= MAX_ENTRIES:
                for old in sorted(_cache, key=lambda k: _cache[k][0])[:MAX_ENTRIES // 4]:
                    _cache.pop(old, None)
                    _locks.pop(old, None)
            _cache[ref] = (time.monotonic() + keep, entrypoint)
        return entrypoint
    finally:
        lock.release()
