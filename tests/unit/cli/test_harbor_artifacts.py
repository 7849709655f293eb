"""A trial's `artifacts/` and `artifacts/manifest.json` as Harbor 0.25's `ArtifactHandler`
writes them, from the operator's clean tar (issue 26)."""

from __future__ import annotations

import json

from shipyard.cli.harbor_artifacts import harbor_artifacts
from shipyard.render.artifact_bundle import clean_artifacts
from shipyard.taskformat import ArtifactConfig
from shipyard.taskformat.artifacts import collection_set
from tests.unit.render.test_artifact_bundle import _tar

ENTRIES = collection_set([
    "/app/out.txt",
    ArtifactConfig(source="/app/results", destination="res", exclude=["*.tmp"]),
    "/app/missing.txt",
    "/logs/artifacts/sub",  # inside the convention folder: that claim came first
    ArtifactConfig(source="/var/db", service="db"),
], "linux")


def _clean(*members: tuple[str, str, bytes | str, int]):
    return clean_artifacts(_tar(*members), [e.source for e in ENTRIES])


def _manifest(files: dict[str, bytes], base: str = "artifacts") -> list[dict]:
    return json.loads(files[f"{base}/manifest.json"])


def test_each_entry_gets_harbors_row_in_order_and_lands_where_harbor_puts_it() -> None:
    clean = _clean(("logs/artifacts", "d", b"", 0o755), ("logs/artifacts/a.txt", "f", "a", 0o644),
                   ("logs/artifacts/sub", "d", b"", 0o755),
                   ("logs/artifacts/sub/b.txt", "f", "b", 0o644),
                   ("app/out.txt", "f", "out", 0o644), ("app/results", "d", b"", 0o755),
                   ("app/results/r.txt", "f", "r", 0o644),
                   ("var/db", "d", b"", 0o755), ("var/db/x", "f", "x", 0o600))
    out = harbor_artifacts(clean.tar, ENTRIES)
    assert _manifest(out.files) == [
        {"source": "/logs/artifacts", "destination": "artifacts/logs/artifacts",
         "type": "directory", "status": "ok", "service": None, "exclude": []},
        {"source": "/app/out.txt", "destination": "artifacts/app/out.txt", "type": "file",
         "status": "ok", "service": None, "exclude": []},
        {"source": "/app/results", "destination": "artifacts/res", "type": "directory",
         "status": "ok", "service": None, "exclude": ["*.tmp"]},
        {"source": "/app/missing.txt", "destination": "artifacts/app/missing.txt",
         "type": "file", "status": "failed", "service": None, "exclude": []},
        {"source": "/logs/artifacts/sub", "destination": "artifacts/logs/artifacts/sub",
         "type": "directory", "status": "skipped", "service": None, "exclude": []},
        {"source": "/var/db", "destination": "artifacts/var/db", "type": "directory",
         "status": "ok", "service": "db", "exclude": []},
    ]
    # Harbor's json.dumps(rows, indent=2): no final newline
    assert out.files["artifacts/manifest.json"] == json.dumps(
        _manifest(out.files), indent=2).encode()
    files = {k: v for k, v in out.files.items() if not k.endswith("/")}
    assert files.keys() == {"artifacts/logs/artifacts/a.txt", "artifacts/logs/artifacts/sub/b.txt",
                            "artifacts/app/out.txt", "artifacts/res/r.txt",
                            "artifacts/var/db/x", "artifacts/manifest.json"}
    assert files["artifacts/res/r.txt"] == b"r" and files["artifacts/app/out.txt"] == b"out"
    assert out.notes == []


def test_an_empty_convention_folder_is_empty_and_a_missing_folder_failed() -> None:
    entries = collection_set(["/app/results"], "linux")
    clean = clean_artifacts(_tar(("logs/artifacts", "d", b"", 0o755)), ["/logs/artifacts"])
    rows = _manifest(harbor_artifacts(clean.tar, entries).files)
    assert [(r["type"], r["status"]) for r in rows] == [("directory", "empty"),
                                                         ("file", "failed")]


def test_links_devices_and_fifos_are_left_out_and_named() -> None:
    clean = _clean(("logs/artifacts", "d", b"", 0o755),
                   ("logs/artifacts/link", "s", "/etc/passwd", 0o777),
                   ("logs/artifacts/null", "c", b"", 0o666),
                   ("logs/artifacts/fifo", "p", b"", 0o644))
    out = harbor_artifacts(clean.tar, ENTRIES, skipped=clean.skipped)
    assert [k for k in out.files if "logs/artifacts/" in k and not k.endswith("/")] == []
    assert out.notes == ["artifact 'logs/artifacts/link': a link: left out",
                         "artifact 'logs/artifacts/null': not a regular file: left out",
                         "artifact 'logs/artifacts/fifo': not a regular file: left out"]
    assert _manifest(out.files)[0]["status"] == "empty"


def test_refused_artifacts_fail_every_row_and_say_why() -> None:
    out = harbor_artifacts(b"", ENTRIES[:3], refused="the artifacts tar is 41 MB, over the limit")
    rows = _manifest(out.files)
    assert [(r["type"], r["status"]) for r in rows] == [
        ("directory", "failed"), ("file", "failed"), ("directory", "failed")]
    assert out.notes == ["no artifacts kept: the artifacts tar is 41 MB, over the limit"]
    assert list(out.files) == ["artifacts/manifest.json"]


def test_a_multi_step_trials_artifacts_go_under_their_step() -> None:
    clean = clean_artifacts(_tar(("logs/artifacts", "d", b"", 0o755),
                                 ("logs/artifacts/a", "f", "a", 0o644)), ["/logs/artifacts"])
    out = harbor_artifacts(clean.tar, collection_set([], "linux"), step="build")
    assert set(out.files) == {"steps/build/artifacts/logs/artifacts/",
                              "steps/build/artifacts/logs/artifacts/a",
                              "steps/build/artifacts/manifest.json"}
    assert _manifest(out.files, "steps/build/artifacts")[0]["destination"] == \
        "artifacts/logs/artifacts"
