"""The files of a Task resource: written inline, or a bundle in a ConfigMap."""

from __future__ import annotations

import gzip
import io
import tarfile
import zlib
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


MAX_TASK_BYTES = 128 * 1024 * 1024
"""The most a task bundle may hold once decompressed (its files, names and tar headers): a
gzip bomb of a few hundred KB would otherwise take the operator's memory (issue 22)."""
MAX_TASK_FILES = 20_000


def decompressed_size(bundle: bytes, limit: int) -> int:
    """The bundle's size once decompressed, counted in 1 MiB pieces without keeping them
    (constant memory), stopping past `limit`."""
    total, inflate = 0, zlib.decompressobj(wbits=47)  # gzip or zlib header
    data = bundle
    while data and total <= limit:
        total += len(inflate.decompress(data, 1 << 20))
        data = inflate.unconsumed_tail
        if not data and inflate.eof and inflate.unused_data:  # a gzip of several members
            data, inflate = inflate.unused_data, zlib.decompressobj(wbits=47)
    return total


def files_from_bundle(bundle: bytes, limit: int = MAX_TASK_BYTES) -> dict[str, bytes]:
    """The regular files of a bundle; anything else (links, devices) is refused, and so is a
    bundle over `limit` bytes decompressed (measured before it is read: a gzip bomb costs
    time, never memory) or over MAX_TASK_FILES entries."""
    files: dict[str, bytes] = {}
    try:
        if decompressed_size(bundle, limit) > limit:
            raise TaskSourceError(f"the task bundle holds more than {limit} bytes once "
                                  f"decompressed (limit {limit // (1024 * 1024)} MiB)")
        with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as tar:
            for count, member in enumerate(tar, start=1):
                if count > MAX_TASK_FILES:
                    raise TaskSourceError(f"the task bundle holds more than {MAX_TASK_FILES} "
                                          "entries")
                if member.isdir():
                    continue
                if not member.isfile():
                    raise TaskSourceError(f"{member.name}: only regular files may be bundled")
                extracted = tar.extractfile(member)
                assert extracted is not None
                files[member.name] = extracted.read()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
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
