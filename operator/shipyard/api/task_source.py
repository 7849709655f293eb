"""The files of a Task resource: written inline, or a bundle in a ConfigMap."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Mapping

BUNDLE_KEY = "task.tar.gz"
# The apiserver refuses a ConfigMap whose data and binaryData exceed 1 MiB together (base64
# makes binary data 4/3 larger); a larger bundle is split into parts of PART_BYTES.
CONFIGMAP_LIMIT_BYTES = 1024 * 1024
PART_BYTES = 768 * 1024


class TaskSourceError(Exception):
    pass


def files_from_inline(files: Mapping[str, str]) -> dict[str, bytes]:
    return {path: content.encode() for path, content in files.items()}


def build_bundle(files: Mapping[str, bytes]) -> bytes:
    """A deterministic tar.gz of the task files (same files → same bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.size = len(files[path])
            info.mode = 0o755 if path.endswith((".sh", ".bat")) else 0o644
            tar.addfile(info, io.BytesIO(files[path]))
    # mtime=0: gzip would otherwise stamp the current time into its header.
    return gzip.compress(buf.getvalue(), compresslevel=9, mtime=0)


def files_from_bundle(bundle: bytes) -> dict[str, bytes]:
    """The regular files of a bundle; anything else (links, devices) is refused."""
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as tar:
            for member in tar.getmembers():
                if member.isdir():
                    continue
                if not member.isfile():
                    raise TaskSourceError(f"{member.name}: only regular files may be bundled")
                extracted = tar.extractfile(member)
                assert extracted is not None
                files[member.name] = extracted.read()
    except (tarfile.TarError, OSError, EOFError) as e:
        raise TaskSourceError(f"the task bundle is not a readable tar.gz: {e}") from e
    return files


def split_bundle(bundle: bytes) -> list[bytes]:
    """One part when it fits a ConfigMap, else PART_BYTES pieces (joined in order to read)."""
    if len(bundle) <= PART_BYTES:
        return [bundle]
    return [bundle[i:i + PART_BYTES] for i in range(0, len(bundle), PART_BYTES)]


def part_names(name: str, parts: int | None) -> list[str]:
    """The ConfigMaps of a bundle: `name` alone, or `name-0` ... `name-<parts-1>`."""
    return [name] if not parts else [f"{name}-{i}" for i in range(parts)]
