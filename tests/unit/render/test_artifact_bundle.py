"""The operator's reading of an agent's artifacts tar: only regular files and folders under
the declared paths reach a separate verifier (issue 22, class 1)."""

from __future__ import annotations

import io
import tarfile

import pytest

from shipyard.render.artifact_bundle import ArtifactsRefused, artifact_root, clean_artifacts


def _tar(*members: tuple[str, str, bytes | str, int]) -> bytes:
    """(name, kind, content or link target, mode); kind: f file, d dir, s symlink, h hardlink,
    c char device, p fifo."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, content, mode in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            data = None
            if kind == "f":
                raw = content if isinstance(content, bytes) else content.encode()
                info.size, data = len(raw), io.BytesIO(raw)
            else:
                info.type = {"d": tarfile.DIRTYPE, "s": tarfile.SYMTYPE, "h": tarfile.LNKTYPE,
                             "c": tarfile.CHRTYPE, "p": tarfile.FIFOTYPE}[kind]
                if kind in "sh":
                    info.linkname = str(content)
            tar.addfile(info, data)
    return buf.getvalue()


def _members(data: bytes) -> dict[str, tuple[str, int, bytes]]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar:
            f = tar.extractfile(m) if m.isreg() else None
            out[m.name] = ("d" if m.isdir() else "f" if m.isreg() else "?", m.mode,
                           f.read() if f else b"")
    return out


def test_files_and_folders_under_the_declared_paths_are_kept() -> None:
    data = _tar(("app/answer.txt", "f", "42\n", 0o644),
                ("logs/artifacts", "d", "", 0o777),
                ("logs/artifacts/note.txt", "f", "hi", 0o755))
    clean = clean_artifacts(data, ["/app/answer.txt", "/logs/artifacts"])
    assert clean.skipped == []
    assert clean.files == 2 and clean.bytes == 5
    kept = _members(clean.tar)
    assert kept["app/answer.txt"] == ("f", 0o644, b"42\n")
    assert kept["logs/artifacts/note.txt"] == ("f", 0o755, b"hi")
    assert kept["logs/artifacts"][0] == "d"


def test_links_devices_escapes_and_undeclared_paths_are_left_out() -> None:
    data = _tar(("logs/artifacts/key", "s", "/tests/answer.txt", 0o777),
                ("logs/artifacts/rel", "s", "../../tests", 0o777),
                ("logs/artifacts/hard", "h", "etc/shadow", 0o644),
                ("logs/artifacts/tty", "c", "", 0o666),
                ("logs/artifacts/fifo", "p", "", 0o666),
                ("logs/artifacts/../../tests/test.sh", "f", "echo 1 > reward", 0o755),
                ("/tests/test.sh", "f", "echo 1", 0o755),
                ("tests/test.sh", "f", "echo 1", 0o755),
                ("logs/verifier/reward.txt", "f", "1", 0o644),
                ("logs/artifactsX/x", "f", "1", 0o644),
                ("logs/artifacts/ok.txt", "f", "fine", 0o644))
    clean = clean_artifacts(data, ["/logs/artifacts"])
    assert list(_members(clean.tar)) == ["logs/artifacts/ok.txt"]
    assert len(clean.skipped) == 10
    assert any("a link" in s for s in clean.skipped)
    assert any("not a plain relative path" in s for s in clean.skipped)


def test_setuid_and_sticky_bits_are_dropped() -> None:
    data = _tar(("app/out", "d", "", 0o1777), ("app/out/sh", "f", "x", 0o4755),
                ("app/out/g", "f", "y", 0o2711))
    kept = _members(clean_artifacts(data, ["/app/out"]).tar)
    assert kept["app/out"][1] == 0o777
    assert kept["app/out/sh"][1] == 0o755
    assert kept["app/out/g"][1] == 0o711


def test_a_second_entry_of_a_name_cannot_replace_the_first() -> None:
    data = _tar(("app/a.txt", "f", "first", 0o644), ("app/a.txt", "f", "second", 0o644))
    clean = clean_artifacts(data, ["/app/a.txt"])
    assert _members(clean.tar)["app/a.txt"][2] == b"first"
    assert clean.skipped


def test_over_the_size_limit_is_refused_with_its_size() -> None:
    data = _tar(("app/big", "f", b"x" * 2000, 0o644))
    with pytest.raises(ArtifactsRefused, match="more than 1000 bytes"):
        clean_artifacts(data, ["/app/big"], limit=1000)
    assert clean_artifacts(data, ["/app/big"], limit=2000).bytes == 2000


def test_garbage_and_truncated_tars_are_refused() -> None:
    with pytest.raises(ArtifactsRefused, match="not readable"):
        clean_artifacts(b"not a tar at all" * 100, ["/app"])
    whole = _tar(("app/x", "f", b"y" * 5000, 0o644))
    with pytest.raises(ArtifactsRefused):
        clean_artifacts(whole[:2048], ["/app/x"])
    assert clean_artifacts(b"", ["/app"]).tar == b""


def test_artifact_roots() -> None:
    assert artifact_root("/app/./out/") == "app/out"
    assert artifact_root("/") == ""
