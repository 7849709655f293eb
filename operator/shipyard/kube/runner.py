"""The in-pod runner's commands (docs/runner-protocol.md) as execs: launch a phase, read its
result, stop it, read a file. The runner file is executed itself: the static Go runner, or
runner.sh through its `#!/bin/sh` line (pods of older operators, SHIPYARD_RUNNER=sh). Each
returns a typed `Reply` rather than raising, so that the pure layers decide
what a failure means (`shipyard.reconcile.exec_policy`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shipyard.api.conventions import RUNNER_PATH, SECRETS_CONTAINER
from shipyard.kube.errors import ApiException
from shipyard.kube.pod_exec import (
    EXEC_TIMEOUT_SEC,
    MAX_OUTPUT_BYTES,
    ExecResult,
    ExecUnavailable,
    OutputTooLarge,
    PodGone,
    exec_in_pod,
)


@dataclass(frozen=True)
class Reply:
    state: Literal["ok", "gone", "unavailable", "failed"]
    """ok: the command ran and exited 0; gone: the pod (or its container) no longer exists;
    unavailable: the exec did not reach the pod's kubelet (whether it ran is unknown); failed:
    the exec could not run, or the command exited non-zero."""
    stdout: bytes = b""
    error: str = ""
    exit_code: int | None = None  # None when the exec itself could not run

    @property
    def text(self) -> str:
        return self.stdout.decode(errors="replace")


def reply_of(result: ExecResult, what: str = "runner") -> Reply:
    if result.exit_code != 0:
        stderr = result.stderr.decode(errors="replace")[-500:]
        return Reply("failed", result.stdout, f"{what} exited {result.exit_code}: {stderr}",
                     result.exit_code)
    return Reply("ok", result.stdout, exit_code=0)


def _unreachable(e: ApiException) -> bool:
    """The exec did not get to the pod: no connection (the client's status 0), a gateway
    error, or the apiserver could not dial the kubelet."""
    body = str(e.body or "") + str(e.reason or "")
    return e.status in (0, 502, 503, 504) or (
        e.status == 500 and ("dialing backend" in body or "error sending request" in body))


def _exec(namespace: str, pod: str, argv: list[str], stdin: bytes | None = None,
          what: str = "runner", container: str = "main",
          timeout: float = EXEC_TIMEOUT_SEC, max_output: int = MAX_OUTPUT_BYTES) -> Reply:
    try:
        result = exec_in_pod(namespace, pod, argv, stdin, container, timeout, max_output)
    except PodGone as e:
        return Reply("gone", error=str(e))
    except ExecUnavailable as e:
        return Reply("unavailable", error=str(e))
    except ApiException as e:
        return Reply("unavailable" if _unreachable(e) else "failed",
                     error=f"{type(e).__name__}: {e}")
    except OutputTooLarge as e:
        return Reply("failed", error=str(e), exit_code=-1)
    except (TimeoutError, OSError) as e:
        return Reply("failed", error=f"{type(e).__name__}: {e}")
    return reply_of(result, what)


def _runner(namespace: str, pod: str, args: list[str], stdin: bytes | None = None,
            timeout: float = EXEC_TIMEOUT_SEC, artifacts_limit: int = 0) -> Reply:
    return _exec(namespace, pod, [RUNNER_PATH, *args], stdin, timeout=timeout,
                 max_output=_with_artifacts(artifacts_limit))


def _with_artifacts(artifacts_limit: int) -> int:
    """The most stdout an exec may print when its result may carry the packed artifacts tar
    of up to `artifacts_limit` bytes (in base64 lines of 76)."""
    if not artifacts_limit:
        return MAX_OUTPUT_BYTES
    encoded = 4 * -(-artifacts_limit // 3)
    return MAX_OUTPUT_BYTES + encoded + encoded // 76 + 1


def launch(namespace: str, pod: str, phase_id: str, bundle: bytes, log_limit: int,
           key: str, base: int | None = None, artifacts_limit: int = 0) -> Reply:
    """Start the phase from its bundle (`shipyard.render.phase_bundle`) under its launch key
    (`conventions.launch_key`) and the pod's process base (`TrialStatus.pod_process_base`),
    when known; prints its status (with its result when it ended within the launch's
    grace, and then with `artifacts_limit` the packed artifacts tar: `PackedArtifacts`)."""
    args = ["launch", phase_id, str(len(bundle)), str(log_limit), key]
    if artifacts_limit:
        args += ["" if base is None else str(base), str(artifacts_limit)]
    elif base is not None:
        args.append(str(base))
    return _runner(namespace, pod, args, bundle, artifacts_limit=artifacts_limit)


def chain(namespace: str, pod: str, phases: list[tuple[str, str]], bundle: bytes,
          log_limit: int, artifacts_limit: int = 0, hidden_keys: bool = False) -> Reply:
    """Launch several phases (id, launch key) one after the other (`build_chain_bundle`), each
    once the one before ended with exit code 0; prints each launched phase's status after
    `=== ID` (the last one's, once done, with the packed artifacts tar when
    `artifacts_limit`). `hidden_keys`: the keys are in the bundle, not on the command line
    (the current Go runner only)."""
    args = ["chain", str(log_limit), str(len(bundle))]
    if artifacts_limit:
        args.append(f"artifacts={artifacts_limit}")
    args += [f"{i}:-" if hidden_keys else f"{i}:{k}" for i, k in phases]
    return _runner(namespace, pod, args, bundle, artifacts_limit=artifacts_limit)


def result(namespace: str, pod: str, phase_id: str, log_limit: int, wait_sec: int = 0,
           artifacts_limit: int = 0) -> Reply:
    """The phase's status, with its collected files once it is done (and with
    `artifacts_limit` the packed artifacts tar, as `launch`); with `wait_sec`, once it is done
    or that long has passed (pods without a readiness probe)."""
    args = ["result", phase_id, str(log_limit)]
    if artifacts_limit:
        args += [str(wait_sec), str(artifacts_limit)]
    elif wait_sec:
        args.append(str(wait_sec))
    return _runner(namespace, pod, args, timeout=EXEC_TIMEOUT_SEC + wait_sec,
                   artifacts_limit=artifacts_limit)


def stop(namespace: str, pod: str, phase_id: str, log_limit: int) -> Reply:
    """End the running phase (TERM, then KILL) and print what it left, as `result` does."""
    return _runner(namespace, pod, ["stop", phase_id, str(log_limit)])


def put_secrets(namespace: str, pod: str, phase_id: str) -> Reply:
    """In the pod's `secrets` container: copy the mounted Secret files into the phase's drop."""
    return _exec(namespace, pod, [RUNNER_PATH, "put-secrets", phase_id],
                 what="put-secrets", container=SECRETS_CONTAINER)


def artifacts(namespace: str, pod: str, limit: int, path: str, current: bool = True,
              items: str = "") -> Reply:
    """The artifacts tar the collect phase packed, from the runner (`artifacts LIMIT`: it
    refuses a tar over `limit` bytes, exit code 5; with `items`, `render.phase_scripts.
    recovery_items`, it packs them first when nothing was packed); from a pod of an older
    operator, whose runner lacks the command, the file `path` through `/bin/cat`. At most
    `limit` bytes are read either way."""
    argv = ([RUNNER_PATH, "artifacts", str(limit), *([items] if items else [])] if current
            else ["/bin/cat", path])
    return _exec(namespace, pod, argv, what="artifacts", max_output=limit)


def exec_in(namespace: str, pod: str, container: str, argv: list[str],
            timeout: float = EXEC_TIMEOUT_SEC, max_output: int = MAX_OUTPUT_BYTES) -> Reply:
    """Any command in a container of the pod (a docker-compose sidecar's collect hook or
    artifact copy), its output read up to `max_output` bytes."""
    return _exec(namespace, pod, argv, what=argv[0], container=container, timeout=timeout,
                 max_output=max_output)


def exec_with_stdin(namespace: str, pod: str, container: str, argv: list[str],
                    stdin: bytes) -> Reply:
    """A command in a container of the pod, fed `stdin` (a warm pod's Secret files)."""
    return _exec(namespace, pod, argv, stdin, what=argv[0], container=container)
