"""The one status writer (runtime/status_writer.py): coalescing, with its own patch function."""

from __future__ import annotations

from shipyard.runtime.status_writer import StatusWriter, named

BODY = {"metadata": {"name": "s", "namespace": "ns", "uid": "u1"}}


def test_the_same_status_is_written_once() -> None:
    patches: list[dict] = []
    writer = StatusWriter(BODY, "sweeps", patch=patches.append)
    assert writer.write({"phase": "Running"})
    assert not writer.write({"phase": "Running"})  # on record: no request
    assert not writer.write(None)
    assert writer.write({"phase": "Done"})
    assert patches == [{"phase": "Running"}, {"phase": "Done"}]
    assert writer.written == {"phase": "Done"}


def test_what_is_on_record_already_is_not_written_again() -> None:
    patches: list[dict] = []
    writer = StatusWriter(BODY, "tasks", written={"ready": True}, patch=patches.append)
    assert not writer.write({"ready": True})
    assert patches == []


def test_an_event_is_named_by_what_it_records() -> None:
    first = named(BODY, "Normal", "Ready", "ok", key="1/Ready/ok")
    assert first == named(BODY, "Normal", "Ready", "ok", key="1/Ready/ok")
    assert first[0] != named(BODY, "Normal", "Ready", "ok", key="2/Ready/ok")[0]
    assert first[1:] == ("Normal", "Ready", "ok")
