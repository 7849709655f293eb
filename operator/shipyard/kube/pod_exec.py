"""Short execs into a pod: run the in-pod runner with optional stdin bytes, read its output."""

from __future__ import annotations

import json
import logging
import select
import shlex
import ssl
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL, STDERR_CHANNEL, STDOUT_CHANNEL
from websocket import ABNF, WebSocketException, WebSocketTimeoutException

from shipyard.kube.client import configuration, count_request
from shipyard.kube.metrics import API_REQUESTS, timed_exec

log = logging.getLogger("shipyard.exec")
EXEC_TIMEOUT_SEC = 120
CHUNK = 64 * 1024
MAX_OUTPUT_BYTES = 16 * 1024 * 1024
"""The most stdout an exec may print (the runner's results are bounded by the log limit)."""
ERR_KEEP = 64 * 1024  # the tail of stderr kept


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes


class PodGone(Exception):
    """The pod no longer exists (or its container is gone): the exec could not run."""


class ExecUnavailable(ConnectionError):
    """The exec's status is not an exit code: the apiserver could not reach the kubelet (e.g.
    it was restarting), so whether the command ran is unknown; the caller tries again."""


class OutputTooLarge(Exception):
    """The command printed more than the caller's cap: the exec was ended there."""


def _pump(ws: Any, out: bytearray, err: bytearray, deadline: float, max_output: int,
          what: str) -> bytes:
    """Read the exec's frames until it closes; returns its status channel's bytes.

    Not the client's `update()`: that one reads every frame already there before it returns
    (a command printing hundreds of MB keeps it past any deadline), appends each frame to the
    bytes read so far (quadratic) and keeps a second copy of all output. Here each frame is
    read and placed by itself, the deadline is checked between frames and bounds each read
    (a socket timeout), and stdout beyond `max_output` ends the exec (OutputTooLarge)."""
    sock, status = ws.sock, bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{what} took over its deadline")
        raw = sock.sock
        if raw is None or not sock.connected or raw.fileno() < 0:
            return bytes(status)
        try:
            if not (isinstance(raw, ssl.SSLSocket) and raw.pending()):
                poll = select.poll()
                poll.register(raw, select.POLLIN)
                ready = poll.poll(min(left, 1.0) * 1000)
                if not ready:
                    continue
            sock.settimeout(max(0.1, min(left, 30.0)))
            opcode, frame = sock.recv_data_frame(True)
        except WebSocketTimeoutException:
            raise TimeoutError(f"{what}: no frame within its deadline") from None
        except (WebSocketException, OSError, ValueError):
            # The connection ended (e.g. the container was killed mid-stream): what the
            # status channel said so far decides (nothing: unavailable).
            return bytes(status)
        if opcode == ABNF.OPCODE_CLOSE:
            return bytes(status)
        if opcode not in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT) or len(frame.data) < 2:
            continue
        channel, data = frame.data[0], frame.data[1:]
        if channel == STDOUT_CHANNEL:
            out += data
            if len(out) > max_output:
                raise OutputTooLarge(f"{what} printed more than {max_output} bytes; ended")
        elif channel == STDERR_CHANNEL:
            err += data
            del err[:-ERR_KEEP]
        elif channel == ERROR_CHANNEL:
            status += data[:ERR_KEEP]


def _status_code(status: bytes) -> int:
    """The command's exit code from the exec's status channel: 0 for Success, the code a
    NonZeroExitCode status names; PodGone when the container no longer exists; ExecUnavailable
    for any other (e.g. an unreachable kubelet's), as whether the command ran is then
    unknown."""
    if b"container not found" in status:
        raise PodGone(f"the container is gone: {status[:300]!r}")
    try:
        doc = json.loads(status)
        if doc["status"] == "Success":
            return 0
        return int(doc["details"]["causes"][0]["message"])
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise ExecUnavailable(
            f"the exec ended without an exit code: {type(e).__name__} {status[:300]!r}"
        ) from None


def exec_in_pod(
    namespace: str,
    pod: str,
    argv: list[str],
    stdin: bytes | None = None,
    container: str = "main",
    timeout: float = EXEC_TIMEOUT_SEC,
    max_output: int = MAX_OUTPUT_BYTES,
) -> ExecResult:
    """Run `argv` in the pod and wait for it (the runner's commands return within seconds).

    `stream()` swaps the transport of the ApiClient it is given, so each exec gets its own
    client instead of sharing the operator's.
    """
    with timed_exec():
        return _exec(namespace, pod, argv, stdin, container, timeout, max_output)


def _exec(namespace: str, pod: str, argv: list[str], stdin: bytes | None, container: str,
          timeout: float, max_output: int) -> ExecResult:
    api = client.CoreV1Api(client.ApiClient(configuration()))
    count_request()
    API_REQUESTS.labels("create", "pods/exec", "1xx").inc()  # a websocket upgrade
    # Every exec command line, so that anyone can check that no secret is ever on one.
    log.info("exec %s/%s: %s", namespace, pod, shlex.join(argv))
    try:
        ws = stream(
            api.connect_get_namespaced_pod_exec,
            pod,
            namespace,
            command=argv,
            container=container,
            stdin=stdin is not None,
            stdout=True,
            stderr=True,
            tty=False,
            binary=True,
            _preload_content=False,
        )
    except ApiException as e:
        if e.status == 404:
            raise PodGone(f"pod {namespace}/{pod} not found") from e
        raise
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + timeout
    try:
        if stdin:
            try:
                for i in range(0, len(stdin), CHUNK):
                    ws.write_stdin(stdin[i : i + CHUNK])
            except WebSocketException as e:  # whether the command ran is unknown
                raise ExecUnavailable(f"the exec's input could not be sent: {e}") from None
        status = _pump(ws, out, err, deadline, max_output, f"exec {argv[:3]} in {namespace}/{pod}")
    finally:
        ws.close()
    code = _status_code(status)
    return ExecResult(int(code), bytes(out), bytes(err))
