"""A trial's `artifacts/` folder and `artifacts/manifest.json` as Harbor 0.25 writes them (pure),
from the artifacts the operator kept (`render.artifacts_store`), cleaned again here as for a
verifier (`render.artifact_bundle`: regular files and folders only, within the size limit).

Harbor's rules (`trial/artifact_handler.py`): one manifest row per entry of the collection set
(the `/logs/artifacts` convention entry first), in order; an entry lands at
`artifacts/<destination>`, else at its source path mirrored (`/app/out.txt` ->
`artifacts/app/out.txt`); an entry whose place overlaps an earlier entry's is `skipped` (the
first claim wins); one that could not be collected is `failed`. A folder's row carries its
`exclude` patterns, a file's an empty list; `service` is the entry's own (null: the agent's
container). The convention folder with nothing in it is `empty`, as under Harbor's docker
environment, where that folder is mounted. A multi-step trial's go under
`steps/<step>/artifacts/`, as Harbor archives each step's.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from shipyard.render.artifact_bundle import artifact_root
from shipyard.taskformat import ArtifactConfig
from shipyard.taskformat.artifacts import MANIFEST_FILENAME, convention_source, host_path


@dataclass
class TrialArtifacts:
    """Files of the trial directory (relative path -> bytes; folders end with `/`), and what
    was left out, and why (the export prints it)."""

    files: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _members(tar: bytes) -> dict[str, tarfile.TarInfo]:
    """The operator's own clean tar: plain relative names, regular files and folders only."""
    if not tar:
        return {}
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as src:
        return {m.name.rstrip("/"): m for m in src.getmembers()}


def _contents(tar: bytes) -> dict[str, bytes]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as src:
        for member in src:
            if member.isreg():
                reader = src.extractfile(member)
                out[member.name] = reader.read() if reader is not None else b""
    return out


def _overlap(a: PurePosixPath, b: PurePosixPath) -> bool:
    return a == b or a in b.parents or b in a.parents


def _is_convention(entry: ArtifactConfig) -> bool:
    return (entry.source.rstrip("/") == convention_source("linux")
            and entry.effective_service == "main")


def manifest_row(entry: ArtifactConfig, destination: str, kind: str, status: str
                 ) -> dict[str, Any]:
    """One row, field for field Harbor's `ArtifactManifestEntry` as `model_dump` writes it."""
    return {"source": entry.source, "destination": destination, "type": kind, "status": status,
            "service": entry.service,
            "exclude": list(entry.exclude) if kind == "directory" else []}


def harbor_artifacts(clean_tar: bytes, entries: Sequence[ArtifactConfig],
                     step: str | None = None, refused: str | None = None,
                     skipped: Sequence[str] = ()) -> TrialArtifacts:
    """The trial's artifacts folder from the operator's clean tar (`clean_tar`, members named
    by their container path without the leading `/`) for the collection set `entries`.
    `refused`: why none could be kept (every row is then `failed`); `skipped`: members the
    cleaning left out (links, devices, FIFOs), named in the notes."""
    base = f"steps/{step}/artifacts" if step is not None else "artifacts"
    members = _members(clean_tar)
    contents = _contents(clean_tar) if members else {}
    out = TrialArtifacts()
    if refused:
        out.notes.append(f"no artifacts kept: {refused}")
    out.notes += [f"artifact {s}: left out" for s in skipped]
    claimed: list[PurePosixPath] = []
    rows = []
    for entry in entries:
        target = PurePosixPath(host_path(entry)).relative_to("artifacts")
        destination = f"artifacts/{target}" if str(target) != "." else "artifacts"
        guess = "file" if PurePosixPath(entry.source).suffix else "directory"
        if any(_overlap(target, c) for c in claimed):
            rows.append(manifest_row(entry, destination, guess, "skipped"))
            continue
        claimed.append(target)
        root = artifact_root(entry.source)
        member = members.get(root) if root else None
        if member is None:
            # Not there to collect: Harbor's `test -d` says no, so it tried a file download.
            kind = guess if refused else "file"
            rows.append(manifest_row(entry, destination, kind, "failed"))
            continue
        if member.isreg():
            out.files[f"{base}/{target}"] = contents.get(member.name, b"")
            rows.append(manifest_row(entry, destination, "file", "ok"))
            continue
        inside = 0
        for name, m in members.items():
            if not name.startswith(root + "/"):
                continue
            inside += 1
            path = f"{base}/{target}/{name[len(root) + 1:]}"
            out.files[path if m.isreg() else path + "/"] = contents.get(m.name, b"")
        out.files.setdefault(f"{base}/{target}/", b"")
        status = "empty" if inside == 0 and _is_convention(entry) else "ok"
        rows.append(manifest_row(entry, destination, "directory", status))
    if rows:  # Harbor's own `json.dumps(..., indent=2)`, without a final newline
        out.files[f"{base}/{MANIFEST_FILENAME}"] = json.dumps(rows, indent=2).encode()
    return out
