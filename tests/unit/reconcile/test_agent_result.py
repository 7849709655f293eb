"""`status.agentResult` and Harbor's error classes from real agent output (samples/ are the
outputs of the real claude-code 2.1.330 and codex 0.169.0 CLIs against hack/llmstub)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shipyard.api.models import AgentResult
from shipyard.reconcile.agent_result import (
    add_results,
    agent_result,
    classify_agent_error,
    claude_code_error,
)
from shipyard.reconcile.agent_trajectory import claude_code_trajectory, codex_trajectory

SAMPLES = Path(__file__).parent / "agent_samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def test_claude_code_result_event_gives_tokens_cost_and_turns() -> None:
    r = agent_result("claude-code", sample("claude-code-result.jsonl"), "fallback")
    # Two stub answers of 120 input / 30 output tokens; claude's own price for them.
    assert r == AgentResult(input_tokens=240, cache_tokens=0, output_tokens=60,
                            cost_usd=0.0027, model="stub-solve-a", turns=2)


def test_claude_code_input_tokens_include_cache_reads_and_writes() -> None:
    line = ('{"type":"result","num_turns":1,"total_cost_usd":0.01,"usage":{"input_tokens":10,'
            '"cache_read_input_tokens":100,"cache_creation_input_tokens":5,"output_tokens":7}}')
    r = agent_result("claude-code", line, "m")
    assert (r.input_tokens, r.cache_tokens, r.output_tokens) == (115, 100, 7)


def test_codex_uses_the_last_running_total_once() -> None:
    r = agent_result("codex", sample("codex-token-count.jsonl"), "stub-solve-c")
    assert r == AgentResult(input_tokens=240, cache_tokens=0, output_tokens=60, cost_usd=None,
                            model="stub-solve-c")


def test_no_usage_line_gives_no_result() -> None:
    assert agent_result("claude-code", "", "m") is None
    assert agent_result("codex", "not json\n", "m") is None
    assert agent_result("gemini-cli", "{}", "m") is None


@pytest.mark.parametrize(("name", "expected"), [
    ("claude-code-429.jsonl", "ApiRateLimitError"),
    ("claude-code-401.jsonl", "AgentAuthenticationError"),
])
def test_claude_code_errors_are_classified_from_its_result_event(name: str, expected: str
                                                                  ) -> None:
    reported = claude_code_error(sample(name))
    assert reported is not None
    assert classify_agent_error(reported) == expected


def test_a_successful_result_reports_no_error() -> None:
    assert claude_code_error(sample("claude-code-result.jsonl")) is None


@pytest.mark.parametrize(("name", "expected"), [
    ("codex-429.txt", "ApiRateLimitError"),
    ("codex-401.txt", "AgentAuthenticationError"),
])
def test_codex_errors_are_classified_from_its_log(name: str, expected: str) -> None:
    assert classify_agent_error(sample(name)) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("prompt is too long: 210000 tokens > 200000 maximum", "ContextWindowExceededError"),
    ("Error: context_length_exceeded", "ContextWindowExceededError"),
    ("Segmentation fault", "NonZeroAgentExitCodeError"),
    ("litellm.RateLimitError: RateLimitError", "ApiRateLimitError"),
    ("Overloaded", "ApiOverloadedError"),
])
def test_classification_follows_harbors_patterns(text: str, expected: str) -> None:
    assert classify_agent_error(text) == expected


def test_results_add_up() -> None:
    a = AgentResult(input_tokens=1, cache_tokens=0, output_tokens=2, cost_usd=0.5, model="m",
                    turns=1)
    b = AgentResult(input_tokens=10, output_tokens=20, cost_usd=None, model="m", turns=2)
    assert add_results(a, b) == AgentResult(input_tokens=11, cache_tokens=0, output_tokens=22,
                                            cost_usd=0.5, model="m", turns=3)


def test_claude_code_session_becomes_an_atif_trajectory() -> None:
    result = agent_result("claude-code", sample("claude-code-result.jsonl"), "m")
    t = claude_code_trajectory(sample("claude-code-session.jsonl"), "2.1.330", "stub-solve-a",
                               result)
    assert t is not None
    assert t["schema_version"].startswith("ATIF-v1.")
    assert t["agent"] == {"name": "claude-code", "version": "2.1.330",
                          "model_name": "stub-solve-a"}
    user, call, answer = t["steps"]
    assert (user["source"], user["message"]) == ("user", "Create hello.txt\n")
    assert call["tool_calls"][0]["function_name"] == "Bash"
    assert "hello.txt" in call["tool_calls"][0]["arguments"]["command"]
    (observed,) = call["observation"]["results"]
    assert observed["source_call_id"] == call["tool_calls"][0]["tool_call_id"]
    assert call["metrics"] == {"prompt_tokens": 120, "completion_tokens": 30, "cached_tokens": 0}
    assert answer["message"] == "Done."
    assert [s["step_id"] for s in t["steps"]] == [1, 2, 3]
    assert t["final_metrics"]["total_cost_usd"] == 0.0027
    assert t["final_metrics"]["total_prompt_tokens"] == 240


def test_codex_stream_becomes_an_atif_trajectory() -> None:
    t = codex_trajectory(sample("codex-stream.jsonl"), "0.169.0", "stub-solve-d")
    assert t is not None
    kinds = [("tool" if s.get("tool_calls") else s["message"]) for s in t["steps"]]
    assert "tool" in kinds and "Done." in kinds
    call = next(s for s in t["steps"] if s.get("tool_calls"))
    assert "hello.txt" in call["tool_calls"][0]["arguments"]["cmd"]
    assert call["observation"]["results"][0]["extra"] == {"exit_code": 0}
    assert t["final_metrics"]["total_steps"] == len(t["steps"])


@pytest.mark.parametrize(("key", "path"), [
    ("agent.log", "agent/claude-code.txt"),
    ("agent.trajectory.json", "agent/trajectory.json"),
    ("verifier.log", "verifier/test-stdout.txt"),
    ("verifier.ctrf.json", "verifier/ctrf.json"),
    ("verifier.test-stderr.txt", "verifier/test-stderr.txt"),
    ("s1.verifier.ctrf.json", "steps/s1/verifier/ctrf.json"),
    ("write.agent.trajectory.json", "steps/write/agent/trajectory.json"),
    ("verifier.file.reward-details.json", "verifier/reward-details.json"),
    ("s.1.verifier.file.sites.log", "steps/s.1/verifier/sites.log"),
    ("verifier.file.", None),
    ("verifier.file.x.agent.trajectory.json", "verifier/x.agent.trajectory.json"),
    ("s.verifier.file.y.verifier.log", "steps/s/verifier/y.verifier.log"),
    ("other", None),
])
def test_logs_go_to_harbors_trial_directory(key: str, path: str | None) -> None:
    from shipyard.cli.harbor_results import harbor_log_path

    assert harbor_log_path(key, "claude-code") == path


def test_gemini_cli_session_gives_tokens_and_a_trajectory() -> None:
    from shipyard.reconcile.agent_trajectory import gemini_trajectory

    r = agent_result("gemini-cli", sample("gemini-cli-session.jsonl"), "fallback")
    # Two stub answers; the repeated copy of the first message counted once.
    assert r == AgentResult(input_tokens=240, cache_tokens=0, output_tokens=60,
                            model="stub-solve-g", turns=2)
    t = gemini_trajectory(sample("gemini-cli-session.jsonl"), "0.61.0", "stub-solve-g", r)
    assert t is not None
    user, call, answer = t["steps"]
    assert user["message"] == "Create hello.txt\n"
    assert call["tool_calls"][0]["function_name"] == "run_shell_command"
    assert answer["message"] == "Done."
