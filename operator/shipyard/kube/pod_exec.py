"""Short execs into a pod: run the in-pod runner with optional stdin bytes, read its output."""

from __future__ import annotations

import logging
import shlex
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.stream import stream

from shipyard.kube.client import configuration, count_request
from shipyard.kube.metrics import API_REQUESTS, timed_exec

log = logging.getLogger("shipyard.exec")
EXEC_TIMEOUT_SEC = 120
CHUNK = 64 * 1024


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


def _exit_code(ws: Any) -> int | None:
    """The command's exit code from the exec's status channel (the client's `returncode`
    assumes a status naming one, and raises on any other, e.g. an unreachable kubelet's)."""
    try:
        return ws.returncode
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise ExecUnavailable(f"the exec ended without an exit code: {e}"[:500]) from None


def exec_in_pod(
    namespace: str,
    pod: str,
    argv: list[str],
    stdin: bytes | None = None,
    container: str = "main",
    timeout: float = EXEC_TIMEOUT_SEC,
) -> ExecResult:
    """Run `argv` in the pod and wait for it (the runner's commands return within seconds).

    `stream()` swaps the transport of the ApiClient it is given, so each exec gets its own
    client instead of sharing the operator's.
    """
    with timed_exec():
        return _exec(namespace, pod, argv, stdin, container, timeout)


def _exec(namespace: str, pod: str, argv: list[str], stdin: bytes | None, container: str,
          timeout: float) -> ExecResult:
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
            for i in range(0, len(stdin), CHUNK):
                ws.write_stdin(stdin[i : i + CHUNK])
        while ws.is_open() and time.monotonic() < deadline:
            ws.update(timeout=1)
            out += ws.read_stdout() or b""
            err += ws.read_stderr() or b""
        out += ws.read_stdout() or b""
        err += ws.read_stderr() or b""
        if ws.is_open():
            raise TimeoutError(f"exec {argv[:3]} in {namespace}/{pod} took over {timeout}s")
        code = _exit_code(ws)
    finally:
        ws.close()
    if code is None:
        raise PodGone(f"exec in {namespace}/{pod} ended without a status: {bytes(err)[-500:]!r}")
    return ExecResult(int(code), bytes(out), bytes(err))
