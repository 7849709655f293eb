"""An agent's run as an ATIF trajectory (Harbor's `trajectory.json`, schema in
`harbor.models.trajectories`): the shape every agent's `trajectory` parser fills in."""

from __future__ import annotations

import json
from typing import Any

from shipyard.agents.base import UsageLike

SCHEMA_VERSION = "ATIF-v1.6"


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content
                         if isinstance(b, dict) and b.get("type") == "text")
    return ""


def result_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(text_of([b]) if b.get("type") == "text" else json.dumps(b)
                         for b in content if isinstance(b, dict))
    return content if isinstance(content, str) else json.dumps(content)


def _final_metrics(steps: list[dict[str, Any]], result: UsageLike | None) -> dict[str, Any]:
    def total(key: str) -> int | None:
        values = [s["metrics"][key] for s in steps if s.get("metrics", {}).get(key) is not None]
        return sum(values) if values else None

    return {
        "total_prompt_tokens": result.input_tokens if result else total("prompt_tokens"),
        "total_completion_tokens": result.output_tokens if result else total("completion_tokens"),
        "total_cached_tokens": result.cache_tokens if result else total("cached_tokens"),
        "total_cost_usd": result.cost_usd if result else None,
        "total_steps": len(steps),
    }


def trajectory(agent: str, version: str, model: str | None, session: str | None,
               steps: list[dict[str, Any]], result: UsageLike | None) -> dict[str, Any] | None:
    if not steps:
        return None
    for i, step in enumerate(steps, start=1):
        step["step_id"] = i
    return {
        "schema_version": SCHEMA_VERSION,
        "session_id": session,
        "agent": {"name": agent, "version": version, "model_name": model},
        "steps": steps,
        "final_metrics": _final_metrics(steps, result),
    }
