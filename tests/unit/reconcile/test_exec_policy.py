"""What an exec's answer means: parsed, retried with a backoff, a fresh look at the pod."""

from __future__ import annotations

from shipyard.reconcile import exec_policy as p
from tests.unit.helpers import runner_text

DONE = runner_text("state=done rc=0 timed_out=0 started=2026-01-01T00:00:00Z")


def test_an_answer_is_parsed() -> None:
    decided = p.after_exec("ok", DONE, "", 0, ("agent",))
    assert isinstance(decided, p.Answered)
    [(phase, status)] = decided.results
    assert phase == "agent" and status.done and status.exit_code == 0


def test_a_chain_answers_for_each_launched_phase() -> None:
    text = f"=== environment\n{DONE}\n=== agent\n{DONE}\n"
    decided = p.after_exec("ok", text, "", 0, ("environment", "agent"))
    assert isinstance(decided, p.Answered)
    assert [phase for phase, _ in decided.results] == ["environment", "agent"]


def test_a_gone_pod_is_looked_at_again_at_once() -> None:
    assert p.after_exec("gone", "", "pod ns/x not found", 0, ("a",)) == p.Reobserve()


def test_failures_are_retried_with_a_growing_backoff_then_exhausted() -> None:
    decisions = [p.after_exec("failed", "", "runner exited 1: boom", i, ("a",))
                 for i in range(p.EXEC_ATTEMPTS)]
    assert decisions[:-1] == [p.RetryExec(1.0, "runner exited 1: boom"),
                              p.RetryExec(3.0, "runner exited 1: boom")]
    assert decisions[-1] == p.ExecsExhausted(5.0, "runner exited 1: boom")


def test_an_unreadable_answer_counts_as_a_failed_attempt() -> None:
    decided = p.after_exec("ok", "garbage", "", 0, ("a",))
    assert isinstance(decided, p.RetryExec) and "unexpected runner output" in decided.error


def test_stop_is_one_best_effort_attempt() -> None:
    status, why = p.stopped_status("ok", DONE, "")
    assert status is not None and status.done and why == ""
    assert p.stopped_status("failed", "", "runner exited 2: no stop") == (
        None, "runner exited 2: no stop")
    assert p.stopped_status("ok", "", "")[0] is None


def test_put_secrets_in_place_lets_the_phase_launch() -> None:
    assert p.after_put_secrets("ok", "secrets=ok\n", "", 0) is None


def test_put_secrets_names_the_missing_envfrom_indexes() -> None:
    decided = p.after_put_secrets("ok", "secrets=missing missing=0,2\n", "", 0)
    assert decided == p.SecretsMissing((0, 2))
    message = p.missing_secrets_message(("a", "b", "c"), decided.indexes, "ns")
    assert 'spec.agent.envFrom[0].secretRef.name: Secret "a"' in message
    assert 'spec.agent.envFrom[2].secretRef.name: Secret "c"' in message
    assert '"b"' not in message and "namespace ns" in message


def test_put_secrets_failures_retry_like_any_exec() -> None:
    assert p.after_put_secrets("gone", "", "", 0) == p.Reobserve()
    garbled = p.after_put_secrets("ok", "what?", "", 0)
    assert isinstance(garbled, p.RetryExec) and "put-secrets answered" in garbled.error
    last = p.after_put_secrets("failed", "", "exited 1", p.EXEC_ATTEMPTS - 1)
    assert isinstance(last, p.ExecsExhausted)


def test_an_unreachable_kubelet_is_waited_for_a_minute_before_an_attempt_counts() -> None:
    """A kubelet restarting answers no exec for seconds: that is no failed attempt of the
    pod's (the trial would fail PodLost after 9 s); a kubelet gone for a minute is."""
    error = "the exec ended without an exit code"
    waits = [p.after_exec("unavailable", "", error, 0, ("a",), n)
             for n in range(p.UNAVAILABLE_ATTEMPTS)]
    assert waits[:-1] == [p.RetryExec(p.UNAVAILABLE_DELAY_SEC, error, counts=False)] * (
        p.UNAVAILABLE_ATTEMPTS - 1)
    assert waits[-1] == p.RetryExec(1.0, error)  # counted: the pod's attempts from here
    last = p.after_exec("unavailable", "", error, p.EXEC_ATTEMPTS - 1, ("a",),
                        p.UNAVAILABLE_ATTEMPTS)
    assert isinstance(last, p.ExecsExhausted)
    assert p.UNAVAILABLE_DELAY_SEC * p.UNAVAILABLE_ATTEMPTS >= 60
