"""The agent environment's artifacts, made safe for a separate verifier pod.

The collect phase packs the declared artifacts into a tar in the agent's pod; its bytes are the
agent's (an agent, even an unprivileged one, decides what its artifacts hold, and a root agent
decides what the image's `tar` writes). The operator reads that tar here, in Python, and keeps
only what a verifier may see: regular files and directories under the declared artifact paths,
with no `..`, no absolute names, no links, no devices or FIFOs, and permission bits only (no
setuid, setgid or sticky bit), within a size budget. What it keeps is written into a new tar,
made by the operator, which the verifier pod's setup extracts into a private folder and copies
to each artifact's own path (`shipyard.render.phase_scripts`); agent bytes are never extracted
at `/`. Stricter than Harbor (tarfile's `data` filter keeps links that stay inside).
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

ARTIFACTS_LIMIT_BYTES = 32 * 1024 * 1024
"""The most artifact bytes (file contents) a separate verifier is given; the runner refuses
to send a larger tar and the operator refuses to keep more."""
MAX_MEMBERS = 20_000
"""The most entries kept (a tar of millions of empty files would cost the operator memory)."""
TAR_OVERHEAD_BYTES = 4 * 1024 * 1024
"""Headers and padding a tar may add to its files' contents: the most the runner may send is
the limit plus this."""


class ArtifactsRefused(Exception):
    """The artifacts cannot be given to the verifier at all (too large, not a tar)."""


@dataclass
class CleanArtifacts:
    """What is kept (`tar`: the operator's own tar of it) and what was dropped, and why."""

    tar: bytes = b""
    files: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)


def artifact_root(source: str) -> str:
    """A declared artifact source as the tar names it: relative, without `.` parts."""
    return "/".join(p for p in PurePosixPath(source).parts if p not in ("/", "."))


def _clean_name(name: str) -> str | None:
    """The member's name, relative and normalised; None when it is not a plain path."""
    if name.startswith("/") or "\\" in name or "\0" in name:
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        return None
    return "/".join(parts)


def _under(name: str, roots: Sequence[str]) -> bool:
    return any(name == r or name.startswith(r + "/") for r in roots)


def clean_artifacts(data: bytes, sources: Sequence[str],
                    limit: int = ARTIFACTS_LIMIT_BYTES) -> CleanArtifacts:
    """Read the agent's artifacts tar (`data`) and keep what lies under `sources` (the declared
    absolute paths). ArtifactsRefused when the tar is unreadable or its files exceed `limit`
    bytes (or MAX_MEMBERS entries): the verifier then gets none, with that message."""
    roots = [r for r in (artifact_root(s) for s in sources) if r]
    out = CleanArtifacts()
    if not data:
        return out
    buf = io.BytesIO()
    seen: set[str] = set()
    try:
        with (tarfile.open(fileobj=io.BytesIO(data), mode="r:") as src,
              tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as dst):
            for count, member in enumerate(src, start=1):
                if count > MAX_MEMBERS:
                    raise ArtifactsRefused(f"the artifacts hold more than {MAX_MEMBERS} entries")
                name = _clean_name(member.name)
                shown = (name or member.name)[:200]
                if name is None:
                    out.skipped.append(f"{shown!r}: not a plain relative path")
                    continue
                if not _under(name, roots):
                    if not (member.isdir() and any(r.startswith(name + "/") for r in roots)):
                        out.skipped.append(f"{shown!r}: not under a declared artifact path")
                    continue
                if name in seen:
                    out.skipped.append(f"{shown!r}: a second entry of that name")
                    continue
                if member.isdir():
                    kind = tarfile.DIRTYPE
                elif member.isreg():
                    kind = tarfile.REGTYPE
                else:
                    what = "a link" if member.issym() or member.islnk() else "not a regular file"
                    out.skipped.append(f"{shown!r}: {what}")
                    continue
                if kind == tarfile.REGTYPE:
                    if out.bytes + member.size > limit:
                        raise ArtifactsRefused(
                            f"the artifacts hold more than {limit} bytes (limit "
                            f"{limit // (1024 * 1024)} MiB); the verifier gets none of them")
                    reader = src.extractfile(member)
                    content = reader.read() if reader is not None else b""
                    if len(content) != member.size:
                        raise ArtifactsRefused(f"{shown!r}: truncated in the artifacts tar")
                    out.bytes += member.size
                    out.files += 1
                else:
                    content = b""
                info = tarfile.TarInfo(name)
                info.type = kind
                info.size = len(content)
                # Permission bits only; owned by root (the verifier's setup extracts as root).
                info.mode = (member.mode & 0o777) | (0o700 if kind == tarfile.DIRTYPE else 0o600)
                info.mtime = member.mtime if 0 <= member.mtime < 2**33 else 0
                dst.addfile(info, io.BytesIO(content) if content else None)
                seen.add(name)
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        raise ArtifactsRefused(f"the artifacts tar is not readable: {e}") from e
    out.tar = buf.getvalue()
    return out
