"""Task files from a directory or from a map: relative POSIX paths, nothing outside the task.

Harbor (`utils/path_safety.py`) refuses a task whose paths or symlinks resolve outside the task
directory, or that contains a symlink cycle. Symlinks that stay inside are followed, so a
linked file appears with its content under the link's own path.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from shipyard.taskformat.errors import TaskFormatError

_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:")


def check_relative_path(path: str) -> None:
    """Reject a map key that is not a plain relative POSIX path inside the task."""
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\\" in path
        or _WINDOWS_DRIVE.match(path)
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise TaskFormatError(
            f"Task file paths must be relative POSIX paths without '.' or '..' components: "
            f"{path!r}",
            file=path or "<empty path>",
        )


def validate_file_map(files: Mapping[str, bytes]) -> dict[str, bytes]:
    """A copy of ``files`` after checking every path; contents must be bytes."""
    checked = {}
    for path, content in files.items():
        check_relative_path(path)
        if not isinstance(content, bytes | bytearray | memoryview):
            raise TaskFormatError("Task file content must be bytes", file=path)
        checked[path] = bytes(content)
    return checked


def read_task_dir(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root``, keyed by its relative POSIX path."""
    real_root = root.resolve()
    files: dict[str, bytes] = {}
    _read_dir(root, "", real_root, (real_root,), files)
    return files


def _read_dir(
    directory: Path,
    prefix: str,
    real_root: Path,
    chain: tuple[Path, ...],
    files: dict[str, bytes],
) -> None:
    """Read ``directory``; ``chain`` holds the real paths of the directories being read."""
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError as exc:
        raise TaskFormatError(
            f"cannot read directory: {exc.strerror}", file=prefix or "."
        ) from None
    for entry in entries:
        relative = prefix + entry.name
        path = Path(entry.path)
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            # Python 3.11 reports a symlink loop as RuntimeError, later versions as ELOOP.
            if isinstance(exc, RuntimeError) or exc.errno == errno.ELOOP:
                raise TaskFormatError("Task input path is a symlink cycle", file=relative) from None
            raise TaskFormatError(
                f"Task input path cannot be resolved: {exc.strerror}", file=relative
            ) from None
        if real != real_root and real_root not in real.parents:
            raise TaskFormatError(
                f"Task input path resolves outside the task directory: {real}", file=relative
            )
        mode = real.stat().st_mode
        if stat.S_ISDIR(mode):
            if real in chain:
                raise TaskFormatError("Task input path is a symlink cycle", file=relative)
            _read_dir(path, relative + "/", real_root, (*chain, real), files)
        elif stat.S_ISREG(mode):
            try:
                files[relative] = real.read_bytes()
            except OSError as exc:
                raise TaskFormatError(f"cannot read file: {exc.strerror}", file=relative) from None
