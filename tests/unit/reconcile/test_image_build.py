"""The ImageBuild state machine (reconcile.image_build)."""

from __future__ import annotations

from shipyard.api.models import ImageBuildSpec, ImageBuildStatus
from shipyard.reconcile.image_build import (
    JobObservation,
    failing_step,
    failure_message,
    is_terminal,
    last_lines,
    observe_job,
    on_job,
    on_job_created,
    on_probe,
    registry_unavailable,
)

SPEC = ImageBuildSpec(ref="r/p/t:h", context_hash="h", context_config_map="c", timeout_sec=30)


def test_registry_hit_is_cached_without_a_build():
    status = on_probe(ImageBuildStatus(), "sha256:aa", "t1")
    assert (status.phase, status.source, status.digest) == ("Succeeded", "cached", "sha256:aa")
    assert on_probe(ImageBuildStatus(), None, "t1") == ImageBuildStatus()


def test_build_job_success_and_failures():
    building = on_job_created(ImageBuildStatus(), "job", "t1")
    assert (building.phase, building.job_name, building.started_at) == ("Building", "job", "t1")
    assert on_job(building, SPEC, JobObservation("active"), None, "t2") == building
    done = on_job(building, SPEC, JobObservation("succeeded"), "sha256:bb", "t2")
    assert (done.phase, done.source, done.digest) == ("Succeeded", "built", "sha256:bb")
    failed = on_job(building, SPEC, JobObservation("failed", "BackoffLimitExceeded",
                                                   "#6 boom\nerror: exit code: 3\n"), None, "t2")
    assert failed.reason == "ImageBuildFailed" and "exit code: 3" in failed.message
    late = on_job(building, SPEC, JobObservation("failed", "DeadlineExceeded", ""), None, "t2")
    assert late.reason == "BuildTimeout" and "build_timeout_sec (30s)" in late.message
    assert is_terminal(done) and is_terminal(failed) and not is_terminal(building)


def test_registry_unavailable_waits():
    status = registry_unavailable(ImageBuildStatus(), "connection refused")
    assert (status.phase, status.reason) == ("Pending", "RegistryUnavailable")
    assert "connection refused" in status.message


def test_observe_job_reads_conditions_and_the_termination_message():
    assert observe_job(None, []).state == "missing"
    assert observe_job({"status": {}}, []).state == "active"
    job = {"status": {"conditions": [{"type": "Failed", "status": "True",
                                      "reason": "DeadlineExceeded"}]}}
    pod = {"status": {"containerStatuses": [
        {"state": {"terminated": {"exitCode": 1, "message": "last words"}}}]}}
    seen = observe_job(job, [pod])
    assert (seen.state, seen.reason, seen.log_tail) == ("failed", "DeadlineExceeded",
                                                        "last words")
    ok = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert observe_job(ok, []).state == "succeeded"


def test_last_lines_keeps_the_tail():
    text = "\n".join(f"line {i}" for i in range(40)) + "\n\n"
    tail = last_lines(text)
    assert tail.splitlines()[-1] == "line 39" and "line 27" not in tail


def test_the_build_containers_exit_decides_before_the_job_controller():
    from datetime import UTC, datetime

    job = {"spec": {"activeDeadlineSeconds": 30},
           "status": {"startTime": "2026-01-01T00:00:00Z", "active": 1}}

    def pod(code: int, message: str = "") -> dict:
        return {"status": {"containerStatuses": [{"name": "buildctl", "state": {
            "terminated": {"exitCode": code, "message": message}}}]}}

    early = datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)
    late = datetime(2026, 1, 1, 0, 0, 31, tzinfo=UTC)
    assert observe_job(job, [pod(0)], early).state == "succeeded"
    failed = observe_job(job, [pod(1, "error: exit code: 3")], early)
    assert (failed.state, failed.log_tail) == ("failed", "error: exit code: 3")
    assert on_job(ImageBuildStatus(phase="Building"), SPEC, failed, None, "t").reason == \
        "ImageBuildFailed"
    assert observe_job(job, [pod(143)], late).reason == "DeadlineExceeded"
    running = {"status": {"containerStatuses": [{"name": "buildctl",
                                                 "state": {"running": {}}}]}}
    assert observe_job(job, [running], early).state == "active"


BUILDCTL_LOG = """#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 160B done
#1 DONE 0.0s
#5 [1/2] FROM docker.io/library/python:3.12-slim
#5 DONE 0.1s
#6 [2/2] RUN python -c "import urllib.request as u; u.urlopen('https://example.org/x')"
#6 0.402 Traceback (most recent call last):
#6 0.402   File "<string>", line 1, in <module>
#6 0.410 urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>
#6 ERROR: process "/bin/sh -c python -c ..." did not complete successfully: exit code: 1
------
 > [2/2] RUN python -c "...":
0.402 Traceback (most recent call last):
------
Dockerfile:2
--------------------
   1 |     FROM python:3.12-slim
   2 | >>> RUN python -c "import urllib.request as u; u.urlopen('https://example.org/x')"
   3 |
   4 |
   5 |
   6 |
   7 |
   8 |
--------------------
error: failed to solve: process "/bin/sh -c python -c ..." did not complete: exit code: 1
"""


def test_a_failed_step_shows_its_own_output_and_where_the_whole_log_is():
    step = failing_step(BUILDCTL_LOG)
    assert step.startswith("step [2/2] RUN python -c")
    assert "(exit code: 1)" in step.splitlines()[0]
    assert "  | urllib.error.URLError: <urlopen error [Errno -3] Temporary failure" in step
    assert "  |   File \"<string>\", line 1, in <module>" in step
    failed = on_job(ImageBuildStatus(phase="Building", job_name="env-abc"), SPEC,
                    JobObservation("failed", "BackoffLimitExceeded", BUILDCTL_LOG), None, "t",
                    namespace="ns1")
    assert "Temporary failure in name resolution" in failed.message
    assert "the whole log: kubectl logs -n ns1 job/env-abc" in failed.message
    assert len(failed.message) < 1024  # an Event keeps it whole
    assert failed.message.rstrip().endswith("Temporary failure in name resolution>")


def test_a_log_without_a_failed_step_falls_back_to_its_last_lines():
    assert failing_step("error: failed to dial buildkitd\n") == ""
    message = failure_message("a\nerror: failed to dial buildkitd\n", None, None)
    assert message.endswith("error: failed to dial buildkitd")
    assert failure_message("", None, None) == ""


def test_a_silent_step_says_so():
    log = "#4 [2/2] RUN false\n#4 ERROR: process \"/bin/sh -c false\" exit code: 1\n"
    assert failing_step(log).endswith("(exit code: 1); it printed nothing")
    missing = "#2 [internal] load metadata for x\n#2 ERROR: x: not found\n"
    assert failure_message(missing, "b", "ns") == (
        "step [internal] load metadata for x failed (x: not found); the whole log: "
        "kubectl logs -n ns job/b")


def test_a_connection_refused_by_the_build_network_is_said_so():
    from shipyard.reconcile.image_build import BUILD_NETWORK_HINT

    log = ("#5 [3/3] ADD http://127.0.0.1:2379/v3/kv/range /fetched\n"
           '#5 ERROR: Get "http://127.0.0.1:2379/v3/kv/range": dial tcp 127.0.0.1:2379: '
           "connect: no route to host\n")
    status = on_job(ImageBuildStatus(job_name="build-x"), SPEC,
                    JobObservation("failed", "BackoffLimitExceeded", log), None, "t2")
    assert status.reason == "ImageBuildFailed"
    assert BUILD_NETWORK_HINT in status.message
    assert "ADD http://127.0.0.1:2379/v3/kv/range" in status.message
    # Any other failure: no such hint.
    other = on_job(ImageBuildStatus(job_name="build-x"), SPEC,
                   JobObservation("failed", "BackoffLimitExceeded", "#5 ERROR: exit code: 1\n"),
                   None, "t2")
    assert BUILD_NETWORK_HINT not in other.message


def test_a_build_cache_miss_printed_after_the_failed_step_is_not_the_failure():
    """buildctl prints a missing registry cache as an ERROR of its own, which under load can
    come after the step that failed (seen in CI: the ADD refused by the build network)."""
    log = ("#5 [3/3] ADD http://127.0.0.1:10250/pods /fetched\n"
           '#5 ERROR: Get "http://127.0.0.1:10250/pods": dial tcp 127.0.0.1:10250: connect: '
           "no route to host\n"
           "#6 importing cache manifest from 127.0.0.1:5055/t/add:buildcache\n"
           "#6 ERROR: failed to configure registry cache importer: 127.0.0.1:5055/t/add:"
           "buildcache: not found\n")
    assert failing_step(log).startswith(
        "step [3/3] ADD http://127.0.0.1:10250/pods /fetched failed (Get ")
    only_miss = "#6 ERROR: failed to configure registry cache importer: x: not found\n"
    assert "cache importer" in failing_step(only_miss)
