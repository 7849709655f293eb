"""The pure part of the runner execs: an exec's result as a typed reply."""

from __future__ import annotations

from shipyard.kube.pod_exec import ExecResult
from shipyard.kube.runner import Reply, reply_of


def test_exit_zero_is_an_answer() -> None:
    reply = reply_of(ExecResult(0, b"state=done rc=0\n", b""))
    assert reply == Reply("ok", b"state=done rc=0\n", exit_code=0)
    assert reply.text == "state=done rc=0\n"


def test_a_non_zero_exit_is_a_failure_with_the_end_of_stderr() -> None:
    reply = reply_of(ExecResult(2, b"", b"x" * 1000 + b"usage: runner"), "runner")
    assert reply.state == "failed" and reply.exit_code == 2
    assert reply.error.startswith("runner exited 2: ") and reply.error.endswith("usage: runner")
    assert len(reply.error) < 600
    assert reply_of(ExecResult(1, b"", b"no such file"), "cat").error == (
        "cat exited 1: no such file")


class _EndedExec:
    """An ended exec whose status channel said `status`, read by the client's own code."""

    from kubernetes.stream.ws_client import WSClient
    returncode = WSClient.returncode

    def __init__(self, status: str) -> None:
        self._returncode, self.status = None, status

    def is_open(self) -> bool:
        return False

    def read_channel(self, channel: int) -> str:
        return self.status


def test_an_exec_status_without_an_exit_code_is_unavailable_not_a_crash() -> None:
    """A kubelet restarting mid-exec: the apiserver's status names no exit code (the client
    raised ValueError out of the trial's driver)."""
    import pytest

    from shipyard.kube.pod_exec import ExecUnavailable, _status_code

    def _exit_code(ended: _EndedExec) -> int:
        return _status_code(ended.status.encode())

    assert _exit_code(_EndedExec('{"status": "Success"}')) == 0
    failed = ('{"status": "Failure", "reason": "NonZeroExitCode", "details": {"causes": '
              '[{"reason": "ExitCode", "message": "3"}]}}')
    assert _exit_code(_EndedExec(failed)) == 3
    unreachable = ('{"status": "Failure", "message": "error sending request", "details": '
                   '{"causes": [{"message": "error sending request: Post https://localhost:10250'
                   '/exec/ns/pod/main: dial tcp: connection refused"}]}}')
    for status in (unreachable, '{"status": "Failure"}', "error sending request", ""):
        with pytest.raises(ExecUnavailable, match="without an exit code"):
            _exit_code(_EndedExec(status))
    assert issubclass(ExecUnavailable, OSError)  # runner._exec: a failed reply, tried again


def test_an_exec_that_never_reached_the_pod_is_unavailable() -> None:
    from shipyard.kube.errors import ApiException
    from shipyard.kube.runner import _unreachable

    assert _unreachable(ApiException(status=0, reason="Connection refused"))
    assert _unreachable(ApiException(status=503, reason="Service Unavailable"))
    dial = ApiException(status=500, reason="Internal Server Error")
    dial.body = '{"message": "error dialing backend: dial tcp 127.0.0.1:10250: connect: refused"}'
    assert _unreachable(dial)
    assert not _unreachable(ApiException(status=500, reason="container not found"))
    assert not _unreachable(ApiException(status=403, reason="Forbidden"))


class _Frames:
    """A websocket stand-in: `recv_data_frame` hands out the given (channel, bytes) frames;
    its raw socket always has data waiting (a socketpair with a byte in it)."""

    def __init__(self, frames: list[tuple[int, bytes]], delay: float = 0.0) -> None:
        import socket

        self.sock, self._other = socket.socketpair()
        self._other.send(b"x")
        self.connected = True
        self.frames, self.delay, self.read = list(frames), delay, 0

    def settimeout(self, timeout: float) -> None:
        pass

    def recv_data_frame(self, control: bool):
        import time
        from types import SimpleNamespace

        from websocket import ABNF

        time.sleep(self.delay)
        if not self.frames:
            return ABNF.OPCODE_CLOSE, SimpleNamespace(data=b"")
        channel, data = self.frames.pop(0)
        self.read += 1
        return ABNF.OPCODE_BINARY, SimpleNamespace(data=bytes([channel]) + data)


def test_exec_output_is_read_frame_by_frame_within_a_cap_and_a_deadline() -> None:
    """Issue 22 (class 5): a command printing without end neither outlives its deadline nor
    fills the operator's memory past the cap; each frame is placed by itself."""
    import time
    from types import SimpleNamespace

    import pytest

    from shipyard.kube.pod_exec import OutputTooLarge, _pump, _status_code

    ok = b'{"status": "Success"}'
    ws = SimpleNamespace(sock=_Frames([(1, b"a" * 10), (2, b"warn"), (1, b"b"), (3, ok)]))
    out, err = bytearray(), bytearray()
    status = _pump(ws, out, err, time.monotonic() + 5, 100, "exec")
    assert (bytes(out), bytes(err), _status_code(status)) == (b"a" * 10 + b"b", b"warn", 0)
    endless = SimpleNamespace(sock=_Frames([(1, b"x" * 1000)] * 10_000))
    with pytest.raises(OutputTooLarge, match="more than 5000 bytes"):
        _pump(endless, bytearray(), bytearray(), time.monotonic() + 5, 5000, "exec")
    assert endless.sock.read == 6  # stopped at the frame past the cap
    slow = SimpleNamespace(sock=_Frames([(1, b"x")] * 1000, delay=0.05))
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        _pump(slow, bytearray(), bytearray(), time.monotonic() + 0.5, 10**9, "exec")
    assert time.monotonic() - began < 1.5


def test_an_exec_carrying_the_artifacts_may_print_their_base64_beside_the_result() -> None:
    """`launch`/`result` asked for the packed tar: their output cap grows by the tar's base64
    lines (a tar at the limit never ends the exec as too large)."""
    import base64

    from shipyard.kube.pod_exec import MAX_OUTPUT_BYTES
    from shipyard.kube.runner import _with_artifacts

    assert _with_artifacts(0) == MAX_OUTPUT_BYTES
    for limit in (1, 75, 76 * 3, 37748736):
        encoded = base64.encodebytes(b"\0" * limit)  # lines of 76, each with its newline
        assert _with_artifacts(limit) >= MAX_OUTPUT_BYTES + len(encoded)
