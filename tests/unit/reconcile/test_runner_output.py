"""Parsing what the runner prints for `launch`, `status` and `result`."""

from __future__ import annotations

import pytest

from shipyard.reconcile.runner_output import (
    CollectedFile,
    RunnerProtocolError,
    parse_runner_output,
    parse_status_line,
)
from tests.unit.helpers import runner_text

DONE = "state=done rc=0 timed_out=0 started=2026-01-01T12:00:00Z finished=2026-01-01T12:00:05Z"


def test_done_status_line() -> None:
    status = parse_runner_output(DONE + "\n")
    assert (status.state, status.exit_code, status.timed_out) == ("done", 0, False)
    assert (status.started, status.finished) == ("2026-01-01T12:00:00Z", "2026-01-01T12:00:05Z")
    assert status.done
    assert status.files == {}
    assert status.output == ""


def test_running_status_has_no_exit_code() -> None:
    status = parse_runner_output("state=running started=2026-01-01T12:00:00Z")
    assert (status.state, status.exit_code, status.done) == ("running", None, False)


def test_running_status_with_an_empty_start_time() -> None:
    status = parse_runner_output("state=running started=")
    assert status.started is None


def test_unknown_phase() -> None:
    status = parse_runner_output("state=none\n")
    assert (status.state, status.exit_code, status.started) == ("none", None, None)


def test_timed_out_flag() -> None:
    assert parse_runner_output(DONE.replace("rc=0 timed_out=0", "rc=143 timed_out=1")).timed_out


def test_collected_files_are_decoded_across_wrapped_base64_lines() -> None:
    content = bytes(range(256)) * 3
    status = parse_runner_output(runner_text(DONE, {
        "output": b"hello\n",
        "/logs/agent/oracle.txt": content,
        "/logs/verifier/my file.txt": b"spaces in the name",
    }))
    assert status.output == "hello\n"
    assert status.files["/logs/agent/oracle.txt"] == CollectedFile(len(content), content)
    assert status.files["/logs/verifier/my file.txt"].content == b"spaces in the name"


def test_empty_collected_file() -> None:
    status = parse_runner_output(runner_text(DONE, {"/logs/verifier/reward.txt": b""}))
    assert status.files["/logs/verifier/reward.txt"] == CollectedFile(0, b"")


def test_crlf_line_endings_are_tolerated() -> None:
    text = runner_text(DONE, {"output": b"x" * 200}).replace("\n", "\r\n")
    assert parse_runner_output(text).output == "x" * 200


def test_truncated_file_keeps_its_full_size() -> None:
    collected = parse_runner_output(f"{DONE}\n== output 1000\naGVsbG8=\n").files["output"]
    assert (collected.size, collected.content, collected.truncated) == (1000, b"hello", True)
    assert not CollectedFile(5, b"hello").truncated


def test_text_replaces_undecodable_bytes() -> None:
    assert CollectedFile(2, b"\xff\xfe").text() == "\ufffd\ufffd"


@pytest.mark.parametrize("text", ["", "\n"])
def test_empty_answer_is_a_protocol_error(text: str) -> None:
    with pytest.raises(RunnerProtocolError):
        parse_runner_output(text)


@pytest.mark.parametrize("line", ["sh: runner: not found", "rc=0 timed_out=0", "garbage"])
def test_status_line_without_state_is_a_protocol_error(line: str) -> None:
    with pytest.raises(RunnerProtocolError, match="unexpected runner output"):
        parse_status_line(line)


def test_undecodable_base64_is_a_protocol_error() -> None:
    with pytest.raises(RunnerProtocolError, match="could not decode output"):
        parse_runner_output(f"{DONE}\n== output 3\nabc\n")


@pytest.mark.parametrize("header", ["== output", "== output many", "== "])
def test_malformed_file_header_is_a_protocol_error(header: str) -> None:
    """A cut-off or mangled answer must surface as RunnerProtocolError, the one error the
    driver retries on, not as a ValueError/IndexError that escapes it."""
    with pytest.raises(RunnerProtocolError):
        parse_runner_output(f"{DONE}\n{header}\naGVsbG8=\n")


def test_oom_killed_count_is_read() -> None:
    from shipyard.reconcile.runner_output import parse_runner_output as parse

    assert parse("state=done rc=137 timed_out=0 oom_killed=2 started=a finished=b").oom_killed == 2
    assert parse("state=done rc=0 timed_out=0 started=a finished=b").oom_killed == 0


def test_a_result_from_an_older_runner_needs_no_end_mark() -> None:
    """Pods started before the mark existed keep their runner: their results still read."""
    status = parse_runner_output(runner_text(DONE + " result=1", {"/r.txt": b"1"}))
    assert status.files["/r.txt"].content == b"1" and status.collected
    with pytest.raises(RunnerProtocolError, match="cut short"):
        parse_runner_output(runner_text(DONE + " result=1 end=1", {"/r.txt": b"1"}))
    marked = runner_text(DONE + " result=1 end=1", {"/r.txt": b"1"}) + "%%end\n"
    assert parse_runner_output(marked).files["/r.txt"].content == b"1"


def test_a_result_carries_the_packed_artifacts_when_asked() -> None:
    """`result … ARTIFACTS` (docs/runner-protocol.md): the tar as a file of its own, not among
    the phase's collected files; over the limit its size alone (refused); none packed."""
    from shipyard.reconcile.runner_output import PackedArtifacts

    tar = bytes(range(256)) * 3
    text = runner_text(f"{DONE} result=1 end=1 artifacts={len(tar)}",
                       {"/logs/verifier/reward.txt": b"1", "%artifacts": tar}) + "%%end\n"
    status = parse_runner_output(text)
    assert status.artifacts == PackedArtifacts(len(tar), tar)
    assert list(status.files) == ["/logs/verifier/reward.txt"]
    refused = parse_runner_output(f"{DONE} result=1 end=1 artifacts=99999999\n%%end\n")
    assert refused.artifacts == PackedArtifacts(99999999, None)
    none = parse_runner_output(f"{DONE} result=1 end=1 artifacts=none\n%%end\n")
    assert none.artifacts == PackedArtifacts(None, None)
    empty = runner_text(f"{DONE} result=1 end=1 artifacts=0", {"%artifacts": b""}) + "%%end\n"
    assert parse_runner_output(empty).artifacts == PackedArtifacts(0, b"")


def test_a_reply_without_the_artifacts_or_with_a_mismatched_tar_carries_none() -> None:
    """Not asked, runner.sh, an older runner, or a tar that is not the size said: not carried
    (the trial's end reads the artifacts with an exec of its own)."""
    plain = runner_text(f"{DONE} result=1 end=1", {"/r.txt": b"1"}) + "%%end\n"
    assert parse_runner_output(plain).artifacts is None
    wrong = runner_text(f"{DONE} result=1 end=1 artifacts=5", {"%artifacts": b"abc"}) + "%%end\n"
    status = parse_runner_output(wrong)
    assert status.artifacts is None and "%artifacts" not in status.files
