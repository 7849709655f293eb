"""The CLI's pure sweep pieces: the manifest, the live view and rows."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from shipyard.api.sweep import SweepSpec
from shipyard.cli.sweep_cmd import agent_specs
from shipyard.cli.sweep_view import (
    eta,
    progress_line,
    sweep_body,
    sweep_row,
    sweep_view,
    usage,
)

NOW = datetime(2026, 11, 23, 12, 10, tzinfo=UTC)


def sweep(**status) -> dict:
    return {"metadata": {"name": "s1", "creationTimestamp": "2026-11-23T12:00:00Z"},
            "status": {"progress": "40/100", "mean": 0.5, "startTime": "2026-11-23T12:00:00Z",
                       "counts": {"planned": 100, "completed": 40, "running": 10, "pending": 0,
                                  "errored": 2, "created": 50},
                       "evals": [{"key": "oracle__ds", "planned": 50, "finished": 20,
                                  "nErrors": 1, "metrics": [{"mean": 1.0}],
                                  "passAtK": {"2": 1.0}}],
                       **status}}


def test_sweep_body_is_a_valid_sweep() -> None:
    body = sweep_body(["a", "b"], agent_specs(("oracle", "nop"), ("m1",), None, {}),
                      name=None, prefix="My-Dataset-" * 5, attempts=5, parallelism=20,
                      per_task_parallelism=1, dataset="ds", template={"retries": 1})
    spec = SweepSpec.model_validate(body["spec"])
    assert [a.model for a in spec.agents] == ["m1", "m1"]
    assert spec.attempts == 5 and spec.per_task_parallelism == 1
    assert len(body["metadata"]["generateName"]) <= 31


def test_view_row_line_and_eta() -> None:
    s = sweep()
    assert eta(s, NOW) == "ETA 15m00s"  # 40 in 10 minutes, 60 to go
    assert sweep_row(s, NOW) == ["s1", "40/100", "10", "2", "0.5", "-", "Running", "10m"]
    s["status"]["costUsd"] = 0.01234
    assert sweep_row(s, NOW)[5] == "$0.01234"
    line = progress_line(s, NOW)
    assert "40/100 done" in line and "oracle__ds 20/50 mean 1" in line and "@2 1.00" in line
    console = Console(width=140, record=True)
    console.print(sweep_view(s, NOW))
    text = console.export_text()
    assert "oracle__ds" in text and "20/50" in text and "ETA 15m00s" in text
    done = sweep(completionTime="2026-11-23T12:05:00Z",
                 conditions=[{"type": "Complete", "status": "True"}])
    assert eta(done, NOW) == "took 5m00s"


def test_tokens_and_cost_per_eval_key_are_shown_when_reported() -> None:
    cc = {"key": "claude-code__m__ds", "planned": 3, "finished": 3, "metrics": [{"mean": 1.0}],
          "nInputTokens": 1200, "nCacheTokens": 0, "nOutputTokens": 90, "costUsd": 0.0123}
    cx = {"key": "codex__m__ds", "planned": 3, "finished": 3, "metrics": [{"mean": 0.0}],
          "nInputTokens": 450, "nCacheTokens": 0, "nOutputTokens": 45}
    s = sweep(evals=[cc, cx])
    line = progress_line(s, NOW)
    assert "claude-code__m__ds 3/3 mean 1 pass- tokens in 1200 cache 0 out 90, cost $0.0123" \
        in line
    assert "codex__m__ds 3/3 mean 0 pass- tokens in 450 cache 0 out 45, cost -" in line
    console = Console(width=200, record=True)
    console.print(sweep_view(s, NOW))
    text = console.export_text()
    assert "TOKENS IN/CACHE/OUT" in text and "1200/0/90" in text and "$0.0123" in text
    assert "450/0/45" in text
    assert usage(None, None, None, None) == ""  # oracle and nop report nothing
    plain = Console(width=200, record=True)
    plain.print(sweep_view(sweep(), NOW))
    assert "TOKENS" not in plain.export_text() and "tokens" not in progress_line(sweep(), NOW)
