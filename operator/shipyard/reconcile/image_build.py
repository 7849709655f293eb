"""An ImageBuild's state machine (pure): registry probe → build Job → Succeeded or Failed.

    Pending --(tag in the registry, not forced)--> Succeeded (source cached)
    Pending --(tag missing or forced)--> Building (Job created)
    Building --(Job succeeded)--> Succeeded (source built, digest from the registry)
    Building --(Job failed)--> Failed (ImageBuildFailed, or BuildTimeout past the deadline)
A registry that does not answer keeps the build Pending with reason RegistryUnavailable (the
handler retries with backoff). Terminal states never change: a broken Dockerfile stays broken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from shipyard.api.models import ImageBuildSpec, ImageBuildStatus
from shipyard.api.reasons import Reason
from shipyard.render.build_job import BUILD_CONTAINER

MESSAGE_LINES = 12
MESSAGE_CHARS = 1500
STEP_LINES = 8
STEP_CHARS = 560
"""At most this much of them: with the rest, the message fits an Event (1 KiB) whole."""
"""The failing step's own last output lines shown in the ImageBuildFailed message."""
LOG_LINES = 400
"""How much of the builder's log the operator reads to find the failing step's output."""
_STEP_ERROR = re.compile(r"^#(\d+) ERROR: (.*)$")
_STEP_OUTPUT = re.compile(r"^#(\d+) \d+\.\d+ ?(.*)$")
_STEP_NAME = re.compile(r"^#(\d+) (\[.*)$")
_EXIT_CODE = re.compile(r"exit code: \d+")
_REFUSED = "connect: no route to host"
_CACHE_MISS = "failed to configure registry cache importer"
BUILD_NETWORK_HINT = (
    "(no route to host: refused by the build network? A build's RUN steps and ADD <url> reach "
    "the outside world only, never the cluster, its nodes, link-local or metadata addresses "
    "or another build; see docs/trust.md)")
"""Said when a step's connection was refused that way (the local cluster's build network
answers ICMP host-unreachable, which Go reports as `no route to host`)."""


@dataclass(frozen=True)
class JobObservation:
    state: Literal["missing", "active", "succeeded", "failed"]
    reason: str | None = None  # the Job's Failed condition reason (DeadlineExceeded, ...)
    log_tail: str = ""  # the builder's last lines (its termination message)


def observe_job(job: dict[str, Any] | None, pods: list[dict[str, Any]],
                now: datetime | None = None) -> JobObservation:
    """The Job's outcome from its conditions, or, while the Job controller has not caught up
    (a busy control plane can take many seconds), from the build container's own exit."""
    if job is None:
        return JobObservation("missing")
    conditions = (job.get("status") or {}).get("conditions") or []
    done = {c.get("type"): c for c in conditions if c.get("status") == "True"}
    if "Complete" in done or "SuccessCriteriaMet" in done:
        return JobObservation("succeeded")
    failed = done.get("Failed") or done.get("FailureTarget")
    if failed is not None:
        return JobObservation("failed", failed.get("reason"), _termination_message(pods))
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated")
            if cs.get("name") != BUILD_CONTAINER or not term:
                continue
            if term.get("exitCode") == 0:
                return JobObservation("succeeded")
            reason = "DeadlineExceeded" if _past_deadline(job, now) else Reason.BUILD_FAILED
            return JobObservation("failed", reason, term.get("message") or "")
    return JobObservation("active")


def _past_deadline(job: dict[str, Any], now: datetime | None) -> bool:
    deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")
    started = (job.get("status") or {}).get("startTime")
    if now is None or not deadline or not started:
        return False
    begun = datetime.fromisoformat(str(started).replace("Z", "+00:00"))
    return (now - begun).total_seconds() >= deadline


def _termination_message(pods: list[dict[str, Any]]) -> str:
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            for where in ("state", "lastState"):
                term = (cs.get(where) or {}).get("terminated") or {}
                if term.get("message"):
                    return term["message"]
    return ""


def last_lines(text: str) -> str:
    """The builder's verdict: its last lines, progress noise dropped."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    tail = "\n".join(lines[-MESSAGE_LINES:])
    return tail[-MESSAGE_CHARS:]


def failing_step(text: str) -> str:
    """What the failing step of a `buildctl --progress plain` log printed: the step (`[2/3] RUN
    ...`), its own last output lines and its error, e.g. a traceback of a download it attempted.
    Empty when the log shows no failed step (the builder's last lines then tell)."""
    lines = text.splitlines()
    failed = [(m.group(1), m.group(2)) for m in map(_STEP_ERROR.match, lines) if m]
    if not failed:
        return ""
    # A cache miss (no build cache in the registry yet) is printed as an ERROR too, and may come
    # after the step that really failed: it is never the failure when another step failed.
    real = [f for f in failed if not f[1].startswith(_CACHE_MISS)]
    step, error = (real or failed)[-1]
    name = next((m.group(2) for m in map(_STEP_NAME.match, lines) if m and m.group(1) == step),
                f"step #{step}")
    output = [m.group(2) for m in map(_STEP_OUTPUT.match, lines) if m and m.group(1) == step]
    # Its last lines first-class: short enough that an Event's message keeps them whole.
    kept: list[str] = []
    for line in reversed([o for o in output if o.strip() and set(o.strip()) != {"^"}]):
        line = f"  | {line[:160]}"
        if len(kept) >= STEP_LINES or sum(map(len, kept)) + len(line) > STEP_CHARS:
            break
        kept.insert(0, line)
    code = _EXIT_CODE.search(error)
    name = name if len(name) <= 100 else name[:97] + "..."
    head = f"step {name} failed ({code.group(0) if code else error[:200]})"
    if not kept:
        return head + ("; it printed nothing" if name.startswith("[") and " RUN " in name
                       else "")
    return head + "; its last output lines:\n" + "\n".join(kept)


def failure_message(log: str, job_name: str | None, namespace: str | None) -> str:
    """The failing step's own output when the log shows it, else the builder's last lines; and
    where the whole log is."""
    step = failing_step(log)
    where = ""
    if job_name:
        ns = f" -n {namespace}" if namespace else ""
        where = f"the whole log: kubectl logs{ns} job/{job_name}; "
    if step:
        head, sep, lines = step.partition("; its last output lines:\n")
        return f"{head}; {where}{sep.removeprefix('; ')}{lines}".rstrip("; ")
    tail = f"the builder's last lines:\n{last_lines(log)}" if log.strip() else ""
    return (where + tail).removesuffix("; ")


def is_terminal(status: ImageBuildStatus) -> bool:
    return status.phase in ("Succeeded", "Failed")


def on_probe(status: ImageBuildStatus, digest: str | None, now: str) -> ImageBuildStatus:
    """Before building: the registry has the tag (`digest`) or not (None)."""
    if digest is not None:
        return status.model_copy(update={
            "phase": "Succeeded", "reason": "Cached", "source": "cached", "digest": digest,
            "message": "the registry has the image already: nothing to build",
            "finished_at": now})
    return status


def registry_unavailable(status: ImageBuildStatus, error: str) -> ImageBuildStatus:
    return status.model_copy(update={
        "phase": "Pending", "reason": Reason.REGISTRY_UNAVAILABLE,
        "message": f"the registry does not answer ({error}); retrying"})


def on_job_created(status: ImageBuildStatus, job_name: str, now: str) -> ImageBuildStatus:
    return status.model_copy(update={
        "phase": Reason.BUILDING, "reason": Reason.BUILDING, "job_name": job_name,
        "message": f"building in Job {job_name}", "started_at": status.started_at or now})


def on_job(status: ImageBuildStatus, spec: ImageBuildSpec, job: JobObservation,
           digest: str | None, now: str, namespace: str | None = None) -> ImageBuildStatus:
    """The build Job's outcome; `digest` is the pushed image's (read from the registry)."""
    if job.state == "succeeded":
        return status.model_copy(update={
            "phase": "Succeeded", "reason": "Built", "source": "built", "digest": digest,
            "message": f"built and pushed {spec.ref}", "finished_at": now})
    if job.state == "failed":
        detail = failure_message(job.log_tail, status.job_name, namespace)
        if job.reason == "DeadlineExceeded":
            reason = Reason.BUILD_TIMEOUT
            message = (f"the build did not finish within build_timeout_sec "
                       f"({spec.timeout_sec:g}s)")
        else:
            reason = Reason.IMAGE_BUILD_FAILED
            message = "the build failed"
        if _REFUSED in job.log_tail:
            message += f" {BUILD_NETWORK_HINT}"
        if detail:
            message += f"; {detail}"
        return status.model_copy(update={
            "phase": "Failed", "reason": reason, "message": message, "finished_at": now})
    return status
