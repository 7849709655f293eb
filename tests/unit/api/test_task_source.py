"""Task files: inline maps, ConfigMap bundles, and the summary a Task's status shows."""

from __future__ import annotations

import io
import tarfile

import pytest

from shipyard.api.task_source import (
    TaskSourceError,
    build_bundle,
    files_from_bundle,
    files_from_inline,
)
from shipyard.plan.task_summary import summarize
from shipyard.taskformat import load_task_files
from tests.unit.helpers import hello_world, task

FILES = {
    "task.toml": b"[environment]\ndocker_image = 'python:3.12-slim'\n",
    "instruction.md": "Écris « bonjour »\n".encode(),
    "tests/test.sh": b"#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    "tests/data/input.bin": bytes(range(256)),
}


def members(bundle: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def test_inline_files_are_utf8_encoded() -> None:
    assert files_from_inline({"instruction.md": "é"}) == {"instruction.md": "é".encode()}


def test_bundle_round_trips_the_files() -> None:
    assert files_from_bundle(build_bundle(FILES)) == FILES


def test_bundle_is_deterministic_whatever_the_insertion_order() -> None:
    assert build_bundle(FILES) == build_bundle(dict(reversed(list(FILES.items()))))


def test_bundle_marks_shell_scripts_executable() -> None:
    modes = {name: info.mode for name, info in members(build_bundle(FILES)).items()}
    assert modes["tests/test.sh"] == 0o755
    assert modes["task.toml"] == 0o644


def test_bundle_of_a_task_loads_as_the_same_task() -> None:
    original = hello_world()
    loaded = load_task_files(files_from_bundle(build_bundle(original.files)), name="x")
    assert (loaded.digest, loaded.name) == (original.digest, original.name)


def _tar_gz(add) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        add(tar)
    return buf.getvalue()


def test_bundle_directories_are_skipped() -> None:
    def add(tar: tarfile.TarFile) -> None:
        tar.addfile(_dir("tests"))
        info = tarfile.TarInfo("tests/test.sh")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"ok"))

    assert files_from_bundle(_tar_gz(add)) == {"tests/test.sh": b"ok"}


def _dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE])
def test_bundle_with_links_or_devices_is_refused(kind: bytes) -> None:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("tests/test.sh")
        info.type = kind
        info.linkname = "/etc/shadow"
        tar.addfile(info)

    with pytest.raises(TaskSourceError, match="only regular files"):
        files_from_bundle(_tar_gz(add))


@pytest.mark.parametrize("garbage", [b"", b"not a tarball", b"\x1f\x8b\x08\x00truncated"])
def test_unreadable_bundle_is_a_task_source_error(garbage: bytes) -> None:
    with pytest.raises(TaskSourceError, match=r"not a readable tar\.gz"):
        files_from_bundle(garbage)


# ---------------------------------------------------------------- summary


def test_summary_of_a_single_step_task() -> None:
    summary = summarize(task())
    assert (summary.steps, summary.verifier_mode, summary.image, summary.network) == (
        1, "shared", "python:3.12-slim", "public")


def test_summary_of_a_multi_step_task_counts_steps_and_network() -> None:
    toml = """\
        [environment]
        docker_image = "python:3.12-slim"
        network_mode = "no-network"

        [[steps]]
        name = "one"

        [[steps]]
        name = "two"
        """
    extra = {f"steps/{s}/{f}": "x\n" for s in ("one", "two")
             for f in ("instruction.md", "tests/test.sh")}
    summary = summarize(task(toml, extra=extra, drop=("instruction.md", "tests/test.sh")))
    assert (summary.steps, summary.verifier_mode, summary.network) == (2, "shared", "no-network")


def _bomb(size: int, name: str = "environment/big") -> bytes:
    """A gzip bomb: one tar member of `size` zero bytes (a few KB per GB compressed)."""
    import gzip
    import io
    import tarfile

    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9) as gz:
        info = tarfile.TarInfo(name)
        info.size = size
        gz.write(info.tobuf(format=tarfile.GNU_FORMAT))
        chunk = b"\0" * (1 << 20)
        for _ in range(size >> 20):
            gz.write(chunk)
    return buf.getvalue()


def test_a_gzip_bomb_is_refused_before_it_is_read_into_memory() -> None:
    """Issue 22 (class 5): a bundle of a few hundred KB that decompresses to 256 MiB is refused,
    saying so, without the operator ever holding more than a few MiB of it."""
    import resource

    import pytest

    from shipyard.api.task_source import MAX_TASK_BYTES, TaskSourceError, files_from_bundle

    bomb = _bomb(256 << 20)
    assert len(bomb) < 2 * 1024 * 1024
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(TaskSourceError, match="more than 134217728 bytes once decompressed"):
        files_from_bundle(bomb)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB
    with pytest.raises(TaskSourceError, match="more than 1048576 bytes"):
        files_from_bundle(_bomb(2 << 20), limit=1 << 20)
    assert MAX_TASK_BYTES == 128 * 1024 * 1024
