"""Harbor's `environment_id`: the content hash that names a task's built images.

Exactly Harbor 0.25.0's `environment_content_hash` (`environments/definition.py`): a sha256 over
the directory's files sorted by relative POSIX path, each as (4-byte path length, path, 4- or
8-byte size, content), `.DS_Store`, `.git` and `__pycache__` anywhere in the path ignored, first
32 hex digits. An empty directory hashes the image reference (or the directory's name) instead.
Keeping Harbor's hash makes Shipyard's tags interchangeable with Harbor's GKE environment.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

IGNORED_NAMES = frozenset({".DS_Store", ".git", "__pycache__"})


def environment_content_hash(files: Mapping[str, bytes], *, dir_name: str,
                             docker_image: str | None = None, truncate: int = 32) -> str:
    """`files`: relative POSIX path → content of the directory (e.g. `task.tree("environment/")`),
    `dir_name`: its last path component (Harbor's seed for an empty directory)."""
    kept = sorted((path, data) for path, data in files.items()
                  if not IGNORED_NAMES & set(path.split("/")))
    if not kept:
        seed = (docker_image or dir_name).encode()
        return hashlib.sha256(seed).hexdigest()[:truncate]
    digest = hashlib.sha256()
    size_bytes = 4
    if any(len(data) >= 2**32 for _, data in kept):
        digest.update(b"\x01")
        size_bytes = 8
    for path, data in kept:
        name = path.encode()
        digest.update(len(name).to_bytes(4, "big"))
        digest.update(name)
        digest.update(len(data).to_bytes(size_bytes, "big"))
        digest.update(data)
    return digest.hexdigest()[:truncate]
